"""Parallel layouts: what each rank holds, moves and computes when a model is split over many devices.

- ``layout`` — :class:`~accounting.model.parallel.layout.ParallelLayout`, the tensor, pipeline, context, expert
  and data-parallel degrees, and the checks that a model divides by them;
- ``states`` — the parameters and model states each pipeline stage's rank holds, and Megatron-LM's own estimate
  beside them;
- ``activations`` — what each rank saves for backward per micro-batch, the micro-batches a schedule keeps in
  flight, recomputation policies and the communication buffers;
- ``memory`` — a rank's step by part and its peak, for every pipeline stage, the most loaded named;
- ``communication`` — the bytes each axis moves per step, by collective.
"""
