"""The plugin's command-line options, registered in every pytest run: this module imports no torch.

Any project that installs the package loads the plugin, and most of its pytest runs never time a
benchmark. What pytest needs at start-up (these options, and the markers in
:mod:`~accounting.bench.plugin`) is therefore kept apart from the modules that import torch; those are
loaded only when a test uses the plugin's fixtures, carries the ``gpu`` marker, or pytest-benchmark
asks for the machine's identity.

>>> from types import SimpleNamespace
>>> added = []
>>> group = SimpleNamespace(addoption=lambda name, **settings: added.append(name))
>>> add_options(SimpleNamespace(getgroup=lambda name, description: group))
>>> added
['--peak-tflops', '--benchmarks-json', '--gpus', '--matmul-shapes']
"""

from accounting.hardware.environment import PEAK_TFLOPS_ENV  # a module that imports nothing: no torch at start-up

SHAPE_MODES = ("auto", "quick", "full")
"""``--matmul-shapes``: the configured quick shapes, all of them, or either as the ``-m`` expression picks."""


def add_options(parser) -> None:
    """Add the plugin's options, in one group with the ``accounting`` prefix, to pytest's ``parser``."""
    group = parser.getgroup("accounting", "accounting: FLOPs, peaks and MFU in benchmarks")
    group.addoption(
        "--peak-tflops", type=float, default=None, metavar="TFLOPS",
        help=f"Dense peak TFLOP/s of the device under test, instead of the table or the CPU estimate "
             f"(also ${PEAK_TFLOPS_ENV}). Default: %(default)r",
    )
    group.addoption(
        "--benchmarks-json", default=None, metavar="PATH",
        help="The benchmark matrix to run. Default: %(default)r ($ACCOUNTING_BENCHMARKS or ./benchmarks.json)",
    )
    group.addoption(
        "--gpus", default=None, metavar="LIST",
        help="CUDA devices the GPU benchmarks run on, comma-separated indices (0,3); each becomes its own test "
             "(cuda:N in the test id), so baselines compare per GPU. Default: %(default)r (every visible GPU)",
    )
    group.addoption(
        "--matmul-shapes", choices=SHAPE_MODES, default="auto",
        help="Which configured matmul shapes to run: quick (the quick_shapes), full (all), or auto "
             "(full when -m selects cpu or gpu, quick otherwise). Default: %(default)r",
    )
