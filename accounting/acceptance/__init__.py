"""The GPU acceptance run: every GPU check of the package in one prepared call, within 8 minutes.

``bash .ci/gpu OUTDIR`` (``python -m accounting.acceptance OUTDIR`` with the checkout on ``PYTHONPATH``)
runs, each step within its own budget and never stopping at a failure: the package's timer against an
independent clock, the report at ``--level quick``, its fault injection (which must end *failed*), the
standard report, ``pytest -m gpu`` with its benchmark JSON, model MFU, the fleet under ``torchrun`` over
NCCL, and a short gate ``save`` and ``check``. The summary says each step's outcome, time and headline
figures, and whether each figure is in the range a healthy H100 SXM or H200 reads. On a machine without
a GPU every GPU step is skipped with its reason, in seconds.

Modules, one job each:

- :mod:`~accounting.acceptance.steps`: a step, its budget, its outcome (an overrun is killed and recorded);
- :mod:`~accounting.acceptance.probe`: what the machine has, and the model size that fits, found in a process of
  its own (the run's own never touches the GPU);
- :mod:`~accounting.acceptance.plan`: the steps' commands, budgets and skip reasons;
- :mod:`~accounting.acceptance.expected`: what a healthy device reads, with sources, and the verdicts;
- :mod:`~accounting.acceptance.figures`: the headline figures of each step's outputs;
- :mod:`~accounting.acceptance.clock_check`: ``time_matmul`` against a CUDA-event loop and the host clock;
- :mod:`~accounting.acceptance.gpu_checks`: after it, in its step, what only a real GPU answers (``time_fn`` against
  one event pair at the sustained shape after a soak; hot rounds' throttle reasons during and after their sync);
- :mod:`~accounting.acceptance.summary`: the summary record and its Markdown;
- :mod:`~accounting.acceptance.outputs`: at most 8 files in OUTDIR, the logs in one archive;
- :mod:`~accounting.acceptance.cli`: the run itself, and the check CI makes of a run without a GPU.
"""
