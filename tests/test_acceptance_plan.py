"""accounting.acceptance.plan: each step's command, budget and skip reason, from what the probe found.

The commands of the package's own CLIs are parsed by those CLIs' real parsers (``accounting report``,
``gate``, ``fleet``, the clock check), so an option that does not exist fails here, not on a lent GPU.
"""

import dataclasses
import json
from pathlib import Path

import pytest

from accounting.__main__ import build_parser
from accounting.acceptance import plan as plan_module
from accounting.acceptance.plan import (
    BUDGETS_S,
    COLLECT_BUDGET_S,
    GATE_BENCHMARK_COUNT,
    GATE_BENCHMARKS,
    GATE_RUNS,
    NEEDS,
    NEW_MODEL_BENCHMARKS,
    PROBE_BUDGET_S,
    RECORDED_BENCHMARKS,
    RECORDED_RUN,
    TOTAL_BUDGET_S,
    WARM_UP_PER_BENCHMARK_S,
    Machine,
    Paths,
    build_steps,
    gate_verdict,
    gpu_skip_reason,
    gpu_test_files,
    model_size_that_fits,
    planned_model,
    plugin_arguments,
    saved_runs,
)
from accounting.bench.round_telemetry import WARM_MAX_S
from accounting.model.attention_kernels import AttentionDevice
from accounting.bench.matrix import load_benchmarks
from accounting.model_mfu.sizes import MODEL_SIZES
from accounting.model_mfu.step import MEMORY_FRACTION, predicted_peak_bytes
from accounting.report.model_section import precisions_for

ROOT = Path(__file__).resolve().parents[1]
H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "total_bytes": 85 * 10**9, "free_bytes": 84 * 10**9,
        "compute_capability": "9.0", "multiprocessors": 132}


def _machine(**changes):
    """A GPU machine as the probe records it: the model size planned for its free memory, as the probe plans it."""
    values = {"gpu": True, "devices": (H100,), "nccl": True, "plugin_registered": False}
    values.update(changes)
    machine = Machine(**values)
    return machine if "model" in changes else dataclasses.replace(machine, model=planned_model(machine))


def _steps(machine, tmp_path, **kwargs):
    paths = Paths(ROOT, tmp_path / "out", tmp_path / "out" / "logs")
    return {step.name: step for step in build_steps(machine, paths, "python3", **kwargs)}


def test_the_budgets_add_up_to_under_eight_minutes():
    assert sum(BUDGETS_S.values()) + PROBE_BUDGET_S <= TOTAL_BUDGET_S < 480


RECORDED = ROOT / RECORDED_RUN


def _gpu_benchmark_names() -> set[str]:
    """The benchmarks `pytest -m gpu` runs now, named as pytest-benchmark names them (benchmarks.json's CUDA matrix)."""
    config = load_benchmarks()
    matmuls = config.device("cuda")
    names = {f"test_gpu_matmul[{dtype}-{'x'.join(map(str, shape))}-cuda:0]"
             for dtype in matmuls.dtypes for shape in matmuls.shapes}
    model = config.model("cuda")
    for size in dict.fromkeys((model.quick_size, model.size)):
        precisions = model.precisions_of(size)
        names |= {f"test_gpu_training_step[{size}-{precision}]" for precision in precisions}
        names.add(f"test_gpu_training_step[{size}-{precisions[0]}-recompute]")
    return names


def test_each_budget_covers_its_need_recomputed_from_the_recorded_h200_run():
    """Each step's need: its seconds in the recorded run (summary.json) plus the work added since; a budget below
    its margin x need fails. The added benchmarks are counted from the recorded pytest-gpu.json and benchmarks.json."""
    summary = json.loads((RECORDED / "summary.json").read_text())
    recorded = {step["name"]: step["seconds"] for step in summary["steps"] if step["status"] != "skipped"}
    benchmarks = {b["name"] for b in json.loads((RECORDED / "pytest-gpu.json").read_text())["benchmarks"]}
    now = _gpu_benchmark_names()
    assert len(benchmarks) == RECORDED_BENCHMARKS and benchmarks <= now
    added = now - benchmarks
    assert len(added) == NEW_MODEL_BENCHMARKS and all(name.startswith("test_gpu_training_step[") for name in added)
    assert WARM_UP_PER_BENCHMARK_S == WARM_MAX_S  # the warm-up's own cap
    gate = [name for name in now if any(part.strip() in name for part in GATE_BENCHMARKS.split(" or "))]
    assert len(gate) == GATE_BENCHMARK_COUNT
    budgets = {"probe": PROBE_BUDGET_S, **BUDGETS_S}
    assert set(NEEDS) == set(budgets)
    for name, need in NEEDS.items():
        # the derivation starts from what was recorded (to the tenth of a second it quotes)
        assert need.recorded_s == (None if name not in recorded else pytest.approx(recorded[name], abs=0.05)), name
        seconds = recorded.get(name, 0.0) + sum(extra for extra, _why in need.added)
        assert budgets[name] >= need.margin * seconds, (name, budgets[name], need.margin * seconds)
        assert need.margin >= 1.2


def test_every_step_has_its_budget_and_none_is_skipped_on_a_healthy_gpu_machine(tmp_path):
    steps = _steps(_machine(), tmp_path)
    assert list(steps) == ["pytest-collect", *BUDGETS_S]
    assert {name: step.budget_s for name, step in steps.items() if step.gpu} == BUDGETS_S
    assert [name for name, step in steps.items() if step.skip] == ["pytest-collect"]
    assert steps["pytest-collect"].skip == "a GPU is here: the pytest-gpu step collects these files itself"


def test_without_a_gpu_every_step_is_skipped_with_the_probe_s_reason(tmp_path):
    reason = "no CUDA device: torch.cuda.is_available() is False (torch 2.13.0+cpu)"
    steps = _steps(Machine(gpu=False, no_gpu_reason=reason), tmp_path)
    assert {step.skip for step in steps.values() if step.gpu} == {reason}
    collect = steps["pytest-collect"]
    assert collect.skip is None and not collect.gpu  # without a GPU the GPU test files are still collected
    assert collect.command[collect.command.index("-m") + 1:collect.command.index("-m") + 4] == ("pytest", "--collect-only", "-q")
    assert [arg for arg in collect.command if arg.startswith("tests/")] == gpu_test_files(ROOT)


def test_a_broken_package_skips_the_collection_too(tmp_path):
    steps = _steps(None, tmp_path, probe_problem="exit status 1")
    assert steps["pytest-collect"].skip == "the probe failed (exit status 1), so nothing is known of this machine"


@pytest.mark.parametrize("machine, problem, reason", [
    pytest.param(None, "exit status 1", "the probe failed (exit status 1), so nothing is known of this machine",
                 id="probe-failed"),
    pytest.param(Machine(gpu=True, import_errors=("accounting.gate.history: ModuleNotFoundError: x",)), None,
                 "the package does not import here: accounting.gate.history: ModuleNotFoundError: x", id="import-error"),
    pytest.param(Machine(gpu=False), None, "no CUDA or ROCm device visible to torch", id="no-gpu-no-reason-given"),
])
def test_why_no_gpu_step_can_run(machine, problem, reason):
    assert gpu_skip_reason(machine, problem) == reason


def test_a_step_is_skipped_for_what_it_lacks_alone(tmp_path):
    steps = _steps(_machine(nccl=False, missing_needed=("pytest_benchmark",)), tmp_path)
    assert steps["fleet"].skip == "torch.distributed has no NCCL (or RCCL) here"
    assert steps["pytest-gpu"].skip == "needs pytest_benchmark, not installed here"
    assert steps["gate-save"].skip == steps["gate-check"].skip == "needs pytest_benchmark, not installed here"
    assert steps["report"].skip is None and steps["clock-check"].skip is None


def test_the_report_leaves_out_its_plot_without_matplotlib(tmp_path):
    with_plot = _steps(_machine(), tmp_path)["report"]
    without = _steps(_machine(missing_needed=("matplotlib",)), tmp_path)["report"]
    assert "--plot" in with_plot.command and "--plot" not in without.command
    assert without.what.endswith("no --plot: matplotlib is not installed")


def _accounting_args(step):
    command = list(step.command)
    return command[command.index("accounting") + 1:]


@pytest.mark.parametrize("name", ["report-quick", "fault-injection", "report", "model-mfu", "fleet", "gate-save",
                                  "gate-check"])
def test_each_command_of_the_package_parses_with_its_own_parser(tmp_path, name):
    args = build_parser().parse_args(_accounting_args(_steps(_machine(), tmp_path)[name]))
    assert args.command == {"gate-save": "gate", "gate-check": "gate", "fleet": "fleet"}.get(name, "report")


def test_the_fault_injection_expects_a_failed_device_and_uses_bf16_where_it_is_native(tmp_path):
    step = _steps(_machine(), tmp_path)["fault-injection"]
    args = build_parser().parse_args(_accounting_args(step))
    assert step.expect_status == 4
    assert (args.level, args.dtypes, str(args.inject_fault)) == ("quick", ["bfloat16"], "bfloat16:flip:0:14")
    volta = dict(H100, compute_capability="7.0")
    old = build_parser().parse_args(_accounting_args(_steps(_machine(devices=(volta,)), tmp_path)["fault-injection"]))
    assert str(old.inject_fault) == "float32:flip:0:30"


@pytest.mark.parametrize("state, problem", [
    pytest.param("failed", None, id="caught"),
    pytest.param("healthy", "the injected fault was not caught: the report's health is 'healthy', not 'failed'",
                 id="missed"),
])
def test_the_fault_injection_reads_the_report_s_health(tmp_path, state, problem):
    step = _steps(_machine(), tmp_path)["fault-injection"]
    path = Path(step.command[step.command.index("--json") + 1])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"health": {"state": state}}))
    assert step.check() == problem


def test_pytest_runs_the_gpu_files_with_the_plugin_named_only_where_it_is_not_registered(tmp_path):
    bare = _steps(_machine(plugin_registered=False), tmp_path)["pytest-gpu"].command
    installed = _steps(_machine(plugin_registered=True), tmp_path)["pytest-gpu"].command
    assert bare[bare.index("-p") + 1] == "accounting.bench.plugin"
    assert "accounting.bench.plugin" not in installed
    assert [arg for arg in bare if arg.startswith("tests/")] == gpu_test_files(ROOT)
    assert plugin_arguments(_machine(plugin_registered=True)) == []


def test_the_gpu_test_files_are_those_that_mark_a_test_gpu(tmp_path):
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "test_a.py").write_text("import pytest\n\n@pytest.mark.gpu\ndef test_x(): pass\n")
    (tmp_path / "tests" / "sub" / "test_b.py").write_text("import pytest\npytestmark = pytest.mark.gpu\n")
    (tmp_path / "tests" / "test_c.py").write_text("from beartype import beartype\n\ndef test_y(): pass\n")
    (tmp_path / "tests" / "helper.py").write_text("pytest.mark.gpu\n")
    (tmp_path / "tests" / "test_d.py").write_text('TEXT = "@pytest.mark.gpu"\nx = "pytest.mark.gpu"\n')  # only text
    (tmp_path / "tests" / "test_e.py").write_text("from pytest import mark\n\n\nclass T:\n    @mark.gpu\n    def test_z(self): pass\n")
    assert gpu_test_files(tmp_path) == ["tests/sub/test_b.py", "tests/test_a.py", "tests/test_e.py"]


def test_pytest_gpu_holds_only_when_a_benchmark_ran(tmp_path):
    step = _steps(_machine(), tmp_path)["pytest-gpu"]
    path = Path(next(arg for arg in step.command if arg.startswith("--benchmark-json=")).split("=", 1)[1])
    assert step.check().startswith("no GPU benchmark ran: pytest-benchmark saved no JSON")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"benchmarks": []}))
    assert step.check() == "no GPU benchmark ran: the benchmark JSON lists none"
    path.write_text(json.dumps({"benchmarks": [{"name": "test_gpu_matmul[bfloat16-8192x8192x8192-cuda:0]"}]}))
    assert step.check() is None


def test_the_gate_steps_hold_only_when_runs_were_saved_and_compared(tmp_path):
    steps = _steps(_machine(), tmp_path)
    storage = tmp_path / "out" / "logs" / "gate-storage" / "Linux-CPython-3.11-64bit"
    assert steps["gate-save"].check() == f"the gate saved 0 runs, not {GATE_RUNS}: no GPU benchmark ran (see its log)"
    storage.mkdir(parents=True)
    for number in range(1, GATE_RUNS + 1):
        (storage / f"000{number}_save.json").write_text("{}")
    assert saved_runs(storage.parent) == GATE_RUNS and steps["gate-save"].check() is None
    log = tmp_path / "out" / "logs" / "gate-check.log"
    log.write_text("accounting gate: run 1: 2 passed\nGate: pass: nothing compared\n")
    assert steps["gate-check"].check() == "the gate compared nothing: no GPU benchmark ran"
    log.write_text("accounting gate: run 1: 2 passed\nGate: pass: 2 benchmarks, 2 inconclusive\n")
    assert gate_verdict(log) == "Gate: pass: 2 benchmarks, 2 inconclusive" and steps["gate-check"].check() is None


def _needed(name, batch=None):
    size = MODEL_SIZES[name] if batch is None else dataclasses.replace(MODEL_SIZES[name], batch_size=batch)
    return max(predicted_peak_bytes(size, precision, device=AttentionDevice("cuda", (9, 0)))  # H100's capability
               for precision in precisions_for("cuda", name))


def test_the_model_size_is_benchmarks_json_s_at_the_largest_batch_that_fits_then_its_fallback():
    matrix = load_benchmarks().model("cuda")
    primary, fallback = MODEL_SIZES[matrix.size], MODEL_SIZES[matrix.fallback_size]
    enough = int(_needed(matrix.size) / MEMORY_FRACTION) + 1
    size, why = model_size_that_fits(_machine(devices=(dict(H100, free_bytes=enough),)))
    assert size == primary and why.startswith(f"{matrix.size} at batch {primary.batch_size}: fits")
    size, why = model_size_that_fits(_machine(devices=(dict(H100, free_bytes=enough - 2**20),)))
    assert (size.name, size.batch_size) == (matrix.size, primary.batch_size - 1)
    below_one = int(_needed(matrix.size, batch=1) / MEMORY_FRACTION) - 2**20
    size, why = model_size_that_fits(_machine(devices=(dict(H100, free_bytes=below_one),)))
    assert size.name == fallback.name and _needed(fallback.name, size.batch_size) <= MEMORY_FRACTION * below_one
    assert f"{matrix.size} does not fit even at batch 1" in why


def test_the_model_steps_run_the_size_and_batch_that_fit(tmp_path):
    steps = _steps(_machine(devices=(dict(H100, free_bytes=140 * 2**30),)), tmp_path)
    size = MODEL_SIZES[load_benchmarks().model("cuda").size]
    args = build_parser().parse_args(_accounting_args(steps["model-mfu"]))
    assert (args.model, args.batch) == (size.name, size.batch_size)
    anchor = list(steps["model-anchor"].command)
    assert anchor[anchor.index("--size") + 1:anchor.index("--size") + 4] == [size.name, "--batch", str(size.batch_size)]


def test_no_model_size_fitting_skips_the_model_steps_with_why(tmp_path):
    tiny = _machine(devices=(dict(H100, free_bytes=1024),))
    assert model_size_that_fits(tiny)[0] is None
    steps = _steps(tiny, tmp_path)
    for name in ("model-mfu", "model-anchor"):
        assert steps[name].skip.startswith("no model size fits: tinyllama-1.1b does not fit even at batch 1: ")


def test_the_anchor_is_skipped_with_its_reason_where_transformers_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "transformers_missing", lambda: "needs transformers, not installed here")
    steps = _steps(_machine(), tmp_path)
    assert steps["model-anchor"].skip == "needs transformers, not installed here"
    assert steps["model-mfu"].skip is None


@pytest.mark.parametrize("document, problem", [
    pytest.param({"held": True, "reason": ""}, None, id="held"),
    pytest.param({"held": False, "reason": "the package's step took 1.100 x Hugging Face's, more than 1 + 0.03"},
                 "the package's step took 1.100 x Hugging Face's, more than 1 + 0.03", id="slower"),
    pytest.param({"skipped": "both steps need 90 GiB"}, "not measured: both steps need 90 GiB", id="did-not-fit"),
])
def test_the_anchor_step_holds_when_the_package_is_not_slower(tmp_path, document, problem):
    step = _steps(_machine(), tmp_path)["model-anchor"]
    logs = tmp_path / "out" / "logs"
    logs.mkdir(parents=True)
    (logs / "model-anchor.json").write_text(json.dumps(document))
    assert step.check() == problem


def test_the_development_guide_s_table_gives_each_step_its_budget():
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf8")
    rows = {line.split("|")[1].strip(): line.split("|")[3].strip()
            for line in text.split("## The GPU acceptance run", 1)[1].splitlines() if line.startswith("| ")}
    for name, budget in BUDGETS_S.items():
        key = "gate-save, gate-check" if name.startswith("gate-") else name
        assert f"{budget:g}" in rows[key].split(", "), (name, rows.get(key))
    assert rows["probe"] == f"{PROBE_BUDGET_S:g}" and rows["pytest-collect"] == f"{COLLECT_BUDGET_S:g}"


@pytest.mark.parametrize("model, reason", [
    pytest.param(None, "the probe planned no model size", id="not-planned"),
    pytest.param({"name": None, "batch": None, "why": "planning failed: TypeError: x"}, "planning failed: TypeError: x",
                 id="planning-failed"),
    pytest.param({"name": "gpt-5", "batch": 1, "why": "fits"},
                 "the probe planned a model size this checkout does not have: model size must be one of", id="unknown"),
])
def test_the_model_steps_say_why_when_the_probe_planned_no_size_they_can_run(tmp_path, model, reason):
    steps = _steps(_machine(model=model), tmp_path)
    assert steps["model-mfu"].skip.startswith(reason) and steps["model-anchor"].skip.startswith(reason)
    assert steps["report"].skip is None
