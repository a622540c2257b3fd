"""What this machine has, found in a process of its own: ``python -m accounting.acceptance.probe``.

It prints one JSON object: the interpreter, torch and its CUDA/ROCm build, every visible GPU (name,
memory total and free, compute capability), whether NCCL is there, which packages the steps need
or may use are missing, whether every module of the package imports, and whether the pytest
plugin is registered (an installed package) or must be named with ``-p`` (a checkout on
``PYTHONPATH``). The acceptance run reads it to decide which steps run and why the others are
skipped. It runs apart so that a GPU driver that hangs or crashes fails the probe, not the run, and
so that the run's own process never holds a CUDA context while the steps measure.

:data:`OPTIONAL` names what is left out without a package, as the summary says it.

>>> sorted(OPTIONAL)
['beartype', 'pynvml']
"""

import importlib
import importlib.metadata
import importlib.util
import json
import pkgutil
import platform
import sys
from pathlib import Path

import torch

from accounting.bench.skips import gpu_skip_reason
from accounting.hardware.devices import cuda_available

PLUGIN_MODULE = "accounting.bench.plugin"
"""The pytest plugin, named with ``-p`` when no installed distribution registers it (entry point ``pytest11``)."""

PACKAGE = Path(__file__).resolve().parents[1]
"""The package's folder, whose every module the probe imports."""

OPTIONAL = {
    "pynvml": "NVML telemetry (SM clock, power, energy, throttle reasons; package nvidia-ml-py)",
    "beartype": "the runtime type checks of the test suite (test files that import it are not collected)",
}
"""Packages the run does without, and what is left out without each."""

NEEDED = {
    "pytest": "pytest -m gpu and the gate",
    "pytest_benchmark": "pytest -m gpu and the gate (pytest-benchmark)",
    "hypothesis": "the test suite's conftest.py",
    "matplotlib": "the report's --plot",
    "scipy": "the gate's statistics",
}
"""Packages a step needs, and which steps need each."""


def missing(names) -> list[str]:
    """The names in ``names`` that cannot be imported here, in order.

    >>> missing(["json", "no_such_module_here"])
    ['no_such_module_here']
    """
    return [name for name in names if importlib.util.find_spec(name) is None]


def import_errors() -> list[str]:
    """Every module of the package that fails to import, with the error: what the GPU machine would hit."""
    errors = []
    for module in pkgutil.walk_packages([str(PACKAGE)], "accounting."):
        try:
            importlib.import_module(module.name)
        except Exception as error:  # any failure to import is what is being looked for
            errors.append(f"{module.name}: {type(error).__name__}: {error}")
    return errors


def plugin_registered() -> bool:
    """Whether a distribution on ``sys.path`` registers the plugin for pytest (then ``-p`` would register it twice)."""
    return any(entry.value == PLUGIN_MODULE for entry in importlib.metadata.entry_points(group="pytest11"))


def devices() -> list[dict]:
    """Every visible GPU: name, total and free memory in bytes, compute capability, multiprocessors."""
    found = []
    for index in range(torch.cuda.device_count()):
        properties = torch.cuda.get_device_properties(index)
        free, total = torch.cuda.mem_get_info(index)
        found.append({"index": index, "name": properties.name, "total_bytes": int(total), "free_bytes": int(free),
                      "compute_capability": f"{properties.major}.{properties.minor}",
                      "multiprocessors": properties.multi_processor_count})
    return found


def nccl_available() -> bool:
    distributed = torch.distributed
    return bool(distributed.is_available() and distributed.is_nccl_available())


def probe() -> dict:
    """What is here (see the module's description)."""
    gpu = cuda_available()
    return {
        "python": sys.executable,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "gpu": gpu,
        "no_gpu_reason": None if gpu else gpu_skip_reason(),
        "devices": devices() if gpu else [],
        "nccl": nccl_available(),
        "missing_optional": missing(OPTIONAL),
        "missing_needed": missing(NEEDED),
        "import_errors": import_errors(),
        "plugin_registered": plugin_registered(),
    }


def main(argv=None) -> int:
    """Print the probe's JSON, and write it to the path given as the one argument, if any."""
    argv = sys.argv[1:] if argv is None else argv
    text = json.dumps(probe(), indent=1)
    print(text)
    if argv:
        with open(argv[0], "w") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
