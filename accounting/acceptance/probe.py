"""What this machine has, found in a process of its own: ``python -m accounting.acceptance.probe``.

It prints one JSON object: the interpreter, torch and its CUDA/ROCm build, every visible GPU (name,
memory total and free, compute capability), whether NCCL is there, which packages the steps need
or may use are missing, whether every module of the package imports, and whether the pytest
plugin is registered (an installed package) or must be named with ``-p`` (a checkout on
``PYTHONPATH``), and the model size the model steps run (``model``: the largest that fits the first GPU's
free memory, planned here because that asks torch's SDPA dispatcher on the GPU). The acceptance run reads
it to decide which steps run and why the others are skipped. It runs apart so that a GPU driver that
hangs or crashes fails the probe, not the run, and so that the run's own process never holds a CUDA
context (about 0.5 GB, seen by every later step as another process on its GPU).

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

from accounting.acceptance.plan import PLUGIN_MODULE, Machine, planned_model
from accounting.bench.skips import gpu_skip_reason
from accounting.hardware.devices import cuda_available

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


def plan_model(found: dict) -> dict:
    """The model size and batch the model steps run on this machine (:func:`accounting.acceptance.plan.planned_model`),
    or why none: planned in this process, which already holds the GPU, so that the run's own never does."""
    if found.get("import_errors") or not found.get("gpu"):
        return {"name": None, "batch": None, "why": "not planned: " + ("the package does not import"
                                                                      if found.get("import_errors") else "no GPU")}
    try:
        return planned_model(Machine.from_probe(found))
    except Exception as error:  # noqa: BLE001 - a planning failure is reported, the probe's other findings kept
        return {"name": None, "batch": None, "why": f"planning failed: {type(error).__name__}: {error}"}


def probe() -> dict:
    """What is here (see the module's description)."""
    gpu = cuda_available()
    found = {
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
    found["model"] = plan_model(found)
    return found


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
