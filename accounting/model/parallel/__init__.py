"""Parallel layouts: what each rank holds, moves and computes when a model is split over many devices.

- ``layout`` — :class:`ParallelLayout`, the tensor, pipeline, context, expert and data-parallel degrees;
"""
