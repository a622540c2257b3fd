"""The acceptance run's steps: each command, its budget, and why it cannot run here when it cannot.

Every step runs the package from the checkout (``PYTHONPATH``) with the interpreter that runs the
acceptance run, so it uses the torch already installed and installs nothing. Budgets
(:data:`BUDGETS_S`) add up, with the probe's, to :data:`TOTAL_BUDGET_S`: under 8 minutes on one GPU
whatever happens, since a step that overruns is stopped at its budget.

Order: the cheap checks whose failure would make the rest meaningless come first (the timer against
an independent clock, the quick report, the fault injection), then the long ones, so that a run cut
short still says the most.

>>> sum(BUDGETS_S.values()) + PROBE_BUDGET_S <= TOTAL_BUDGET_S
True
"""

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

from accounting.acceptance.steps import Step
from accounting.model.attention_kernels import AttentionDevice
from accounting.errors import AccountingError
from accounting.gate.measure import NOTHING_RUN_FILTER
from accounting.acceptance.model_anchor import transformers_missing
from accounting.bench.matrix import load_benchmarks
from accounting.model_mfu.sizes import MODEL_SIZES, model_size
from accounting.model_mfu.step import size_that_fits
from accounting.report.model_section import precisions_for

PLUGIN_MODULE = "accounting.bench.plugin"
"""The pytest plugin, named with ``-p`` when no installed distribution registers it (entry point ``pytest11``)."""

TOTAL_BUDGET_S = 476.0
"""The whole run's budget, probe and packing included: under 8 minutes (480 s) on one GPU (packing the logs takes
about a second)."""
MARGIN = 1.2
"""Each step's budget over its derived need (:data:`NEEDS`): a step's start-up (importing torch, initialising CUDA)
varies by a few seconds from one process to the next, and its work by its clock."""
PROBE_MARGIN = 1.5
"""The probe's: nothing runs without it, and it is the first process on the machine to initialise CUDA."""
WARM_UP_PER_BENCHMARK_S = 2.0
"""What each GPU benchmark's warm-up to the working clock may add (``accounting.bench.round_telemetry.WARM_MAX_S``,
its cap: under the power cap the clock may not settle)."""
MODEL_BENCHMARK_S = 10.0
"""A TinyLlama-sized training-step benchmark, its warm-up to the working clock included: build the 1.1B model (about
1 s), count one step (1 s), warm up to the clock (at most 2 s), 1 + 5 rounds of 0.16-0.22 s (Hugging Face's step of
that shape on the recorded H200: tests/data/hosts/nvidia-h200/hf-llama-step-peaks.json), one step for the peak
memory and the release (1 s): about 6.5 s, taken at 10."""


@dataclass(frozen=True)
class Need:
    """What a step needs on one H200: its time in the recorded run (``recorded_s``, ``None`` where that run had no
    such step) and each piece of work added since, ``(seconds, why)``; its budget is at least ``margin`` × that.

    >>> need = Need(10.0, ((2.0, "a warm-up"),))
    >>> need.seconds, need.least_budget_s
    (12.0, 14.4)
    """

    recorded_s: float | None
    added: tuple[tuple[float, str], ...] = ()
    margin: float = MARGIN

    @property
    def seconds(self) -> float:
        return (self.recorded_s or 0.0) + sum(seconds for seconds, _why in self.added)

    @property
    def least_budget_s(self) -> float:
        return round(self.margin * self.seconds, 6)


RECORDED_RUN = "tests/data/hosts/nvidia-h200"
"""The recorded acceptance run the needs start from (summary.json: each step's seconds; pytest-gpu.json: its
benchmarks), one H200 SXM, 2026-11-27, before the Llama size, the anchor, the warm-up to the working clock and the
GPU checks were added."""
RECORDED_BENCHMARKS = 14
"""GPU benchmarks in the recorded pytest-gpu step (10 matmuls, 4 GPT-2-small training steps): its pytest-gpu.json."""
NEW_MODEL_BENCHMARKS = 3
"""GPU benchmarks added since: TinyLlama-1.1B's bf16-mixed, bf16 and bf16-mixed with recomputation steps."""
GATE_BENCHMARK_COUNT = 2
"""The gate's benchmarks (:data:`GATE_BENCHMARKS`), each warmed to the working clock in every pytest process."""
START_UP_S = 6.2
"""A step process importing torch and the package and initialising CUDA: the recorded probe's whole time."""
GPU_CHECKS_S = 17.0
"""The clock check's added GPU checks (:mod:`accounting.acceptance.gpu_checks`): a 3-s soak; 3 turns of a ``time_fn``
window (0.8 s of event time, about 1.15 s of wall time with its spin and synchronize per 0.45-ms call), a 0.5-s
settle and two 0.8-s back-to-back windows (9.75 s); 200 hot rounds of an 8192³ bf16 product with two readings each
(about 1 s); operands and readers (3 s): 16.75 s."""

NEEDS = {
    "probe": Need(6.2, ((1.0, "plans the model size: SDPA's kernel asked of torch on the GPU, a few predictions"),),
                  margin=PROBE_MARGIN),
    "clock-check": Need(15.7, ((GPU_CHECKS_S, "the GPU checks after it, in the same process"),)),
    "report-quick": Need(11.5),
    "fault-injection": Need(11.8),
    "report": Need(43.0),  # its own --budget (REPORT_BUDGET_S, unchanged) bounds its work
    "pytest-gpu": Need(48.7, (
        (RECORDED_BENCHMARKS * WARM_UP_PER_BENCHMARK_S, "each recorded benchmark's warm-up to the working clock"),
        (NEW_MODEL_BENCHMARKS * MODEL_BENCHMARK_S, "the TinyLlama training steps, each with its warm-up"),
        (1.0, "six checks of SDPA's kernel rules against torch on the GPU (tensors of a few MiB)"))),
    "model-mfu": Need(19.0, ((3 * MODEL_BENCHMARK_S, "TinyLlama's three policy rows (GPT-2 small's four not taken off)"),)),
    "model-anchor": Need(None, (
        (START_UP_S, "start-up"), (5.0, "importing transformers"),
        (2 * MODEL_BENCHMARK_S, "two TinyLlama-sized models built, each counted, warmed and timed"),
        (5.0, "an untimed refill step before each timed one, the cache released before each (2 x 6 of each), the kernel "
              "read off one step of each"))),
    "fleet": Need(35.3, ((-10.0, "its --budget 30 -> 20 (FLEET_BUDGET_S): one GPU is a world of one"),)),
    "gate-save": Need(32.3, ((2 * GATE_BENCHMARK_COUNT * WARM_UP_PER_BENCHMARK_S, "two runs' warm-ups"),)),
    "gate-check": Need(21.1, ((GATE_BENCHMARK_COUNT * WARM_UP_PER_BENCHMARK_S, "one run's warm-ups"),)),
}
"""Each step's need on one H200 (:class:`Need`): the recorded seconds (:data:`RECORDED_RUN`) plus the work added since.
``tests/test_acceptance_plan.py`` recomputes each from the recorded files and fails a budget below margin × need."""

PROBE_BUDGET_S = 11.0  # need 7.2 s x 1.5 = 10.8
BUDGETS_S = {
    "clock-check": 40.0,       # need 15.7 + 17.0 = 32.7 s x 1.2 = 39.2
    "report-quick": 14.0,      # need 11.5 s x 1.2 = 13.8
    "fault-injection": 15.0,   # need 11.8 s x 1.2 = 14.2
    "report": 52.0,            # need 43.0 s x 1.2 = 51.6
    "pytest-gpu": 130.0,       # need 48.7 + 14 x 2.0 + 3 x 10 + 1.0 = 107.7 s x 1.2 = 129.2
    "model-mfu": 59.0,         # need 19.0 + 3 x 10 = 49.0 s x 1.2 = 58.8
    "model-anchor": 44.0,      # need 6.2 + 5 + 20 + 5 = 36.2 s x 1.2 = 43.4
    "fleet": 31.0,             # need 35.3 - 10 = 25.3 s x 1.2 = 30.4
    "gate-save": 49.0,         # need 32.3 + 8.0 = 40.3 s x 1.2 = 48.4
    "gate-check": 31.0,        # need 21.1 + 4.0 = 25.1 s x 1.2 = 30.1
}
"""Each step's wall-clock budget in seconds, start-up included, at least its need (:data:`NEEDS`) × its margin
(:data:`MARGIN`, the probe's :data:`PROBE_MARGIN`); with the probe's they add up to at most :data:`TOTAL_BUDGET_S`.
A step that overruns is stopped there and recorded failed: rerun it alone with ``--only`` and ``--step-budget``."""
COLLECT_BUDGET_S = 30.0
"""``pytest --collect-only`` of the GPU test files where there is no GPU (skipped on a GPU machine, so outside the
GPU budgets)."""
REPORT_BUDGET_S = 40.0
"""The standard report's own ``--budget`` (its sweep), inside the step's."""
FLEET_BUDGET_S = 20.0
"""The fleet's ``--budget`` per rank: on the one GPU a lent machine has, a world of one, no collectives (35.3 s at
30 on the recorded H200)."""
GATE_BENCHMARKS = "bfloat16-8192x8192x8192 or float16-8192x8192x8192"
"""``-k`` for the gate's two GPU benchmarks (the bf16 and fp16 8192³ matmuls; ``float16-…`` also matches
``bfloat16-…``, and the union is the two)."""
GATE_FILE = "tests/benchmarks/test_matmul.py"
GATE_RUNS = 2
"""Baseline runs the gate saves: two pytest processes, the fewest a comparison can use."""
GATE_VERDICT = "Gate:"
"""How the gate's verdict line begins (``Gate: pass: ...``)."""
FAULT = {"bfloat16": "bfloat16:flip:0:14", "float32": "float32:flip:0:30"}
"""The injected fault per dtype: flip the top exponent bit of the first element of the checked product."""
GPU_MARK = re.compile(r"^\s*(@(pytest\.)?mark\.gpu\b|pytestmark\s*=.*\bmark\.gpu\b)", re.MULTILINE)
"""How a test file marks a GPU test: a ``@pytest.mark.gpu`` decorator or a ``pytestmark = pytest.mark.gpu`` line."""

ANCHOR_JSON = "model-anchor.json"
"""What the anchor step measured (in the logs folder)."""

# The outputs kept beside the summary (at most 8 files in all: see accounting.acceptance.outputs).
PYTEST_JSON, REPORT_JSON, REPORT_PNG, FLEET_JSON = "pytest-gpu.json", "report.json", "report.png", "fleet.json"


@dataclass(frozen=True)
class Machine:
    """What the probe found (:mod:`accounting.acceptance.probe`), as the plan needs it."""

    gpu: bool
    no_gpu_reason: str | None = None
    devices: tuple = ()
    nccl: bool = False
    missing_optional: tuple = ()
    missing_needed: tuple = ()
    import_errors: tuple = ()
    plugin_registered: bool = False
    torch: str = ""
    model: dict | None = None

    @classmethod
    def from_probe(cls, found: dict) -> "Machine":
        fields = {field.name for field in dataclasses.fields(cls)}
        values = {key: tuple(value) if isinstance(value, list) else value
                  for key, value in found.items() if key in fields}
        return cls(**values)

    @property
    def device_name(self) -> str | None:
        return self.devices[0]["name"] if self.devices else None

    @property
    def compute_capability(self) -> tuple[int, int]:
        if not self.devices:
            return (0, 0)
        major, _, minor = str(self.devices[0].get("compute_capability", "0.0")).partition(".")
        return int(major), int(minor or 0)


@dataclass(frozen=True)
class Paths:
    """``root``: the checkout (every step's working directory); ``out``: OUTDIR; ``work``: logs and the rest."""

    root: Path
    out: Path
    work: Path


def gpu_skip_reason(machine: Machine | None, probe_problem: str | None = None) -> str | None:
    """Why no GPU step can run here, or ``None``: the probe failed, the package does not import, or no GPU.

    >>> gpu_skip_reason(Machine(gpu=False, no_gpu_reason="no CUDA device: torch.cuda.is_available() is False"))
    'no CUDA device: torch.cuda.is_available() is False'
    >>> gpu_skip_reason(None, "exit status 1")
    'the probe failed (exit status 1), so nothing is known of this machine'
    """
    if machine is None:
        return f"the probe failed ({probe_problem or 'no result'}), so nothing is known of this machine"
    if machine.import_errors:
        return f"the package does not import here: {machine.import_errors[0]}"
    if not machine.gpu:
        return machine.no_gpu_reason or "no CUDA or ROCm device visible to torch"
    return None


def gpu_test_files(root: Path) -> list[str]:
    """The test files under ``root/tests`` that mark a test ``gpu``, relative to ``root``, sorted.

    ``pytest -m gpu`` runs only these: a file with no GPU test adds nothing to it, and leaving the others
    uncollected keeps out files that import what the GPU machine lacks (``beartype``).
    """
    tests = Path(root) / "tests"
    return sorted(str(path.relative_to(root)) for path in tests.rglob("test_*.py")
                  if GPU_MARK.search(path.read_text(errors="replace")))


def plugin_arguments(machine: Machine) -> list[str]:
    """``-p accounting.bench.plugin`` where no installed distribution registers the plugin (a bare checkout)."""
    return [] if machine.plugin_registered else ["-p", PLUGIN_MODULE]


def model_size_that_fits(machine: Machine):
    """``benchmarks.json``'s GPU model size (``model.cuda.size``) at the largest batch whose every policy's predicted
    peak fits the first GPU's free memory, else its fallback size (``model.cuda.fallback_size``) likewise.

    Returns ``(ModelSize, why)``; ``(None, why)`` when neither fits even at batch 1. The prediction asks torch which
    SDPA kernel runs where this machine has the GPU: the probe calls it, in its own process (:func:`planned_model`).
    """
    if not machine.devices:
        return None, "no GPU"
    free = int(machine.devices[0]["free_bytes"])
    try:
        matrix = load_benchmarks().model("cuda")
        names = [matrix.size] + ([matrix.fallback_size] if matrix.fallback_size else [])
    except AccountingError:
        names = ["gpt2-small"]
    refusals = []
    for name in dict.fromkeys(names):
        size, why = size_that_fits(MODEL_SIZES[name], precisions_for("cuda", name), "cuda:0", free_bytes=free,
                                   attention_device=AttentionDevice("cuda", machine.compute_capability))
        if size is not None:
            return size, why if not refusals else f"{why}; {refusals[0]}"
        refusals.append(why)
    return None, f"no model size fits: {'; '.join(refusals)}"


def planned_model(machine: Machine) -> dict:
    """:func:`model_size_that_fits` as the probe records it: ``{"name", "batch", "why"}`` (``name`` ``None``: none fits).

    The probe plans it, not the run: asking torch's SDPA dispatcher on the GPU gives a process a CUDA context
    (about 0.5 GB) for as long as it lives, which every later step would see as another process on its GPU.

    >>> planned_model(Machine(gpu=False))
    {'name': None, 'batch': None, 'why': 'no GPU'}
    """
    size, why = model_size_that_fits(machine)
    return {"name": size.name if size else None, "batch": size.batch_size if size else None, "why": why}


def planned_model_size(machine: Machine):
    """The model size and batch the probe planned (:func:`planned_model`), as ``(ModelSize, why)``; ``(None, why)``
    when none fits or the probe planned none. Reads the record only: the run's own process never touches the GPU.

    >>> size, why = planned_model_size(Machine(gpu=True, model={"name": "gpt2-small", "batch": 3, "why": "fits"}))
    >>> size.name, size.batch_size, why
    ('gpt2-small', 3, 'fits')
    >>> planned_model_size(Machine(gpu=True))
    (None, 'the probe planned no model size')
    """
    planned = machine.model or {}
    if not planned.get("name"):
        return None, planned.get("why") or "the probe planned no model size"
    try:
        return model_size(planned["name"], batch=planned.get("batch")), planned.get("why") or ""
    except (AccountingError, TypeError, ValueError) as error:
        return None, f"the probe planned a model size this checkout does not have: {error}"


def _needs(machine: Machine, *packages: str) -> str | None:
    absent = [name for name in packages if name in machine.missing_needed]
    return f"needs {', '.join(absent)}, not installed here" if absent else None


def build_steps(machine: Machine | None, paths: Paths, python: str, *, probe_problem: str | None = None) -> list[Step]:
    """The GPU steps, in the order they run, each with its command and (where it cannot run) its skip reason."""
    skip = gpu_skip_reason(machine, probe_problem)
    collect = collect_step(machine, paths, python, probe_problem=probe_problem)
    machine = machine or Machine(gpu=False)
    out, work = Path(paths.out), Path(paths.work)
    accounting = [python, "-m", "accounting"]
    plugin = plugin_arguments(machine)
    files = gpu_test_files(paths.root)
    fault_dtype = "bfloat16" if machine.compute_capability >= (8, 0) else "float32"
    size, size_why = planned_model_size(machine)
    size_arguments = ["--model", size.name, "--batch", str(size.batch_size)] if size else ["--model", "tiny"]
    plot = "matplotlib" not in machine.missing_needed
    report_outputs = ["--json", str(out / REPORT_JSON)] + (["--plot", str(out / REPORT_PNG)] if plot else [])
    gate_pytest = ["--", "-m", "gpu", *plugin, "-p", "no:cacheprovider", "--gpus", "0", "-k", GATE_BENCHMARKS,
                   GATE_FILE]
    steps = [
        Step("clock-check", "time_matmul against a CUDA-event loop and the host clock (bf16, fp32 8192³); then, after "
                            "a soak, time_fn against one event pair at the sustained shape, and 200 hot rounds' "
                            "throttle reasons during each round and after its synchronize",
             (python, "-m", "accounting.acceptance.gpu_checks", str(work / "clock-check.json")),
             BUDGETS_S["clock-check"]),
        Step("report-quick", "accounting report --level quick --strict",
             (*accounting, "report", "--level", "quick", "--strict", "--quiet", "--json", str(work / "report-quick.json")),
             BUDGETS_S["report-quick"]),
        Step("fault-injection", f"accounting report --level quick --inject-fault {FAULT[fault_dtype]}: must end failed (exit 4)",
             (*accounting, "report", "--level", "quick", "--dtypes", fault_dtype, "--inject-fault", FAULT[fault_dtype],
              "--quiet", "--json", str(work / "fault.json")),
             BUDGETS_S["fault-injection"], expect_status=4, check=lambda: _fault_was_caught(work / "fault.json")),
        Step("report", f"accounting report --budget {REPORT_BUDGET_S:g} --strict (standard level)"
                       + ("" if plot else "; no --plot: matplotlib is not installed"),
             (*accounting, "report", "--budget", f"{REPORT_BUDGET_S:g}", "--strict", "--quiet", *report_outputs),
             BUDGETS_S["report"]),
        Step("pytest-gpu", f"pytest -m gpu --benchmark-compare ({len(files)} files with GPU tests)",
             (python, "-m", "pytest", "-m", "gpu", *plugin, "-p", "no:cacheprovider", "-q", "-rs", "-W", NOTHING_RUN_FILTER,
              f"--benchmark-json={out / PYTEST_JSON}", "--benchmark-compare",
              f"--benchmark-storage=file://{work / 'pytest-storage'}", *files),
             BUDGETS_S["pytest-gpu"], check=lambda: _benchmarks_ran(out / PYTEST_JSON),
             skip=_needs(machine, "pytest", "pytest_benchmark", "hypothesis") or (None if files else "no test file marks a gpu test")),
        Step("model-mfu", f"accounting report --level quick --model {size.name if size else '?'}"
                          f"{f' --batch {size.batch_size}' if size else ''} (model MFU per precision policy)",
             (*accounting, "report", "--level", "quick", "--dtypes", fault_dtype, "--quiet", *size_arguments,
              "--json", str(work / "model.json")),
             BUDGETS_S["model-mfu"], skip=None if size or skip else size_why),
        Step("model-anchor", f"the {size.name if size else '?'} step beside Hugging Face's of the same shape, bf16, "
                             "timed in turns in one process (the package's must not be slower)",
             (python, "-m", "accounting.acceptance.model_anchor", str(work / ANCHOR_JSON),
              "--size", size.name if size else "tiny", "--batch", str(size.batch_size if size else 1)),
             BUDGETS_S["model-anchor"], skip=(None if skip else (None if size else size_why) or transformers_missing()),
             check=lambda: _anchor_held(work / ANCHOR_JSON)),
        Step("fleet", f"torchrun --standalone --nproc-per-node=gpu -m accounting fleet --budget {FLEET_BUDGET_S:g}"
                      + (" (one GPU: a world of one, no collectives)" if len(machine.devices) == 1 else ""),
             (python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=gpu", "-m", "accounting",
              "fleet", "--budget", f"{FLEET_BUDGET_S:g}", "--json", str(out / FLEET_JSON)),
             BUDGETS_S["fleet"], skip=None if machine.nccl else "torch.distributed has no NCCL (or RCCL) here"),
        Step("gate-save", "accounting gate save --runs 2 on the bf16 and fp16 8192³ benchmarks",
             (*accounting, "gate", "save", "--storage", str(work / "gate-storage"), "--runs", str(GATE_RUNS), *gate_pytest),
             BUDGETS_S["gate-save"], skip=_needs(machine, "pytest", "pytest_benchmark", "scipy"),
             check=lambda: _gate_saved(work / "gate-storage", GATE_RUNS)),
        Step("gate-check", "accounting gate check --baselines 2 --max-extra-runs 0 on the same two",
             (*accounting, "gate", "check", "--storage", str(work / "gate-storage"), "--baselines", "2",
              "--max-extra-runs", "0", "--markdown", str(work / "gate-check.md"), *gate_pytest),
             BUDGETS_S["gate-check"], skip=_needs(machine, "pytest", "pytest_benchmark", "scipy"),
             check=lambda: _gate_compared(work / "gate-check.log")),
    ]
    if skip:
        steps = [dataclasses.replace(step, skip=skip) for step in steps]
    return [collect, *steps]


def collect_step(machine: Machine | None, paths: Paths, python: str, *, probe_problem: str | None = None) -> Step:
    """``pytest --collect-only -m gpu`` on the GPU test files, where there is no GPU to run them.

    On a machine without a GPU (CI) it still shows that every GPU test file imports with what a lent GPU
    machine has: a file that imports ``beartype`` or ``transformers`` would stop ``pytest -m gpu`` there with a
    collection error, and nothing else run without a GPU would notice. With a GPU, ``pytest-gpu`` collects them.
    """
    broken = gpu_skip_reason(machine, probe_problem) if machine is None or machine.import_errors else None
    machine = machine or Machine(gpu=False)
    files = gpu_test_files(paths.root)
    skip = (broken or ("a GPU is here: the pytest-gpu step collects these files itself" if machine.gpu else None)
            or _needs(machine, "pytest", "pytest_benchmark", "hypothesis")
            or (None if files else "no test file marks a gpu test"))
    return Step("pytest-collect", f"pytest --collect-only -m gpu on the {len(files)} GPU test files (where there is no GPU to run them)",
                (python, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", *plugin_arguments(machine),
                 "-p", "no:cacheprovider", *files), COLLECT_BUDGET_S, skip=skip, gpu=False)


REQUIRES = {"gate-check": "gate-save"}
"""A step that runs only when another passed (the check compares with the runs the save saved)."""


def _fault_was_caught(path: Path) -> str | None:
    """``None`` when the fault-injection report says the device failed; else why the step did not hold."""
    with open(path) as handle:
        health = json.load(handle)["health"]
    if health.get("state") != "failed":
        return f"the injected fault was not caught: the report's health is {health.get('state')!r}, not 'failed'"
    return None


def _anchor_held(path: Path) -> str | None:
    """``None`` when the package's step was not slower than Hugging Face's; else why the anchor did not hold (a skip
    inside the step, two models that do not fit together, is a reason too)."""
    with open(path) as handle:
        document = json.load(handle)
    if document.get("skipped"):
        return f"not measured: {document['skipped']}"
    return None if document.get("held") else document.get("reason") or "the anchor did not hold"


def _benchmarks_ran(path: Path) -> str | None:
    """``None`` when pytest-benchmark saved at least one GPU benchmark; else why the step did not hold."""
    if not path.exists():
        return "no GPU benchmark ran: pytest-benchmark saved no JSON (every benchmark skipped?)"
    with open(path) as handle:
        benchmarks = json.load(handle).get("benchmarks") or []
    return None if benchmarks else "no GPU benchmark ran: the benchmark JSON lists none"


def saved_runs(storage: Path) -> int:
    """How many runs the gate saved under ``storage`` (one JSON per pytest process, in the machine's folder)."""
    return sum(1 for _ in Path(storage).rglob("*.json")) if Path(storage).is_dir() else 0


def _gate_saved(storage: Path, runs: int) -> str | None:
    saved = saved_runs(storage)
    return None if saved >= runs else f"the gate saved {saved} runs, not {runs}: no GPU benchmark ran (see its log)"


def gate_verdict(log: Path) -> str:
    """The gate's verdict line (``Gate: pass: 2 benchmarks, no change``) from its log; empty when there is none."""
    lines = [line.strip() for line in Path(log).read_text(errors="replace").splitlines()]
    return next((line for line in lines if line.startswith(GATE_VERDICT)), "")


def _gate_compared(log: Path) -> str | None:
    verdict = gate_verdict(log)
    if not verdict:
        return "the gate printed no verdict"
    return "the gate compared nothing: no GPU benchmark ran" if "nothing compared" in verdict else None
