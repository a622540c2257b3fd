"""One rule for which dtypes a device runs natively: fake CPUs and GPUs, and everything that asks it.

Every field of the rule's answer is checked on devices described by their published facts: the ``dtype``
and ``path`` on every branch, the fp8 variant's format family, the ROCm version bound, and each branch's
reason. The truths are compute capabilities from NVIDIA's CUDA GPU table, ROCm architectures from AMD's GPU
specification tables, the CPU's ISA paths from :mod:`accounting.hardware.cpu_peak`, and torch's own dtypes
(the fp8 formats' ranges from ``torch.finfo``).
"""

import json
from types import SimpleNamespace

import pytest
import torch

from accounting import timing
from accounting.__main__ import main
from accounting.bench.matrix import load_benchmarks, parse_benchmarks
from accounting.bench.skips import gpu_skip_reason, native_skip_reason
from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.cpu_peak import cpu_matmul_path, cpu_native_paths
from accounting.hardware.devices import DeviceInfo, detect_device
from accounting.hardware.native import kind_reason, native_dtypes, native_matmul, rocm_arch
from accounting.hardware.peaks import peak_flops
from accounting.hardware.precision import HIPBLASLT_ALLOW_TF32
from accounting.report import run
from accounting.report.verdict import overall
from tests.support.fake_devices import FAKE_CPUS, GIB, NATIVE_FLAGS, ZEN3, ZEN4

CONFIGURED = ["float32", "bfloat16", "float16"]


@pytest.fixture(autouse=True)
def rocm_tf32_follows_the_flags(monkeypatch):
    """Every test here sees a torch whose ROCm build lets the TF32 flags alone decide (the newest sources:
    no ``HIPBLASLT_ALLOW_TF32`` check), whatever torch runs the suite; the tests of that check set their own."""
    monkeypatch.setattr(torch, "__version__", "2.13.0")
    monkeypatch.delenv(HIPBLASLT_ALLOW_TF32, raising=False)


def has_native_path(info, dtype):
    """The independent statement of the rule: some flag set of NATIVE_FLAGS is present."""
    return dtype == "float32" or any(flags <= info.cpu_flags for flags in NATIVE_FLAGS[dtype])


# ---- the rule on CPUs ----------------------------------------------------------------------------


@pytest.mark.parametrize("info, expected", FAKE_CPUS)
def test_cpu_native_dtypes_follow_the_isa_flags(info, expected):
    assert native_dtypes(info, CONFIGURED) == expected
    assert expected == [dtype for dtype in CONFIGURED if has_native_path(info, dtype)]
    for dtype in CONFIGURED:
        answer = native_matmul(info, dtype)
        assert answer.runs_as == dtype, "every CPU runs bf16/fp16 (natively or emulated)"
        assert answer.emulated == (not answer.native)
        if answer.native:
            assert answer.reason is None and answer.path
        else:
            needs = " or ".join(cpu_native_paths(dtype))
            float32_path = cpu_matmul_path("float32", info.cpu_flags, vendor=info.vendor).name
            assert answer.reason == (f"this CPU has no native {dtype} matmul path (that needs {needs}); "
                                     f"torch would emulate it through float32 on {float32_path}")
            assert answer.label == "emulated"


@pytest.mark.parametrize("info", [p.values[0] for p in FAKE_CPUS], ids=[p.id for p in FAKE_CPUS])
def test_no_cpu_has_tf32_or_fp8_units(info):
    tf32, fp8 = native_matmul(info, "tf32"), native_matmul(info, "fp8")
    assert not tf32.native and tf32.runs_as is None and tf32.label == "cannot run"
    assert tf32.reason == kind_reason("cpu", "tf32") == kind_reason("cpu", "tf32")
    assert not fp8.native and fp8.emulated and fp8.runs_as == "float8_e4m3fn", "torch emulates _scaled_mm on a CPU"


def test_the_rule_refuses_what_is_not_a_device_or_a_dtype():
    with pytest.raises(AccountingTypeError, match=r"^info must be a DeviceInfo"):
        native_matmul("cpu", "bf16")
    with pytest.raises(AccountingError, match=r"^unknown floating-point format 'int4'"):
        native_matmul(ZEN3, "int4")
    with pytest.raises(AccountingError, match=r"^kind must be 'cpu' or 'cuda', got 'tpu'"):
        kind_reason("tpu", "bf16")


# ---- the rule on GPUs ----------------------------------------------------------------------------


def gpu(name, *, capability=None, arch=None, runtime="CUDA 12.8"):
    return DeviceInfo("cuda", name, 0, 80 * GIB, compute_capability=capability, arch=arch, runtime=runtime)


H100 = gpu("NVIDIA H100 80GB HBM3", capability=(9, 0))
L4 = gpu("NVIDIA L4", capability=(8, 9))
A100 = gpu("NVIDIA A100-SXM4-80GB", capability=(8, 0))
V100 = gpu("Tesla V100-SXM2-16GB", capability=(7, 0))
MI300X = gpu("AMD Instinct MI300X", capability=(9, 4), arch="gfx942:sramecc+:xnack-", runtime="ROCm 6.2.41133")
MI355X = gpu("AMD Instinct MI355X", capability=(9, 5), arch="gfx950:sramecc+:xnack-", runtime="ROCm 7.0.0")
MI355X_OLD_ROCM = gpu("AMD Instinct MI355X", capability=(9, 5), arch="gfx950", runtime="ROCm 6.4.1")
MI250X = gpu("AMD Instinct MI250X/MI250", capability=(9, 0), arch="gfx90a:sramecc+:xnack-", runtime="ROCm 6.2")
ROCM_NO_ARCH = gpu("AMD Radeon Graphics", capability=(9, 4), runtime="ROCm 6.2")


@pytest.mark.parametrize("info, dtype, runs_as", [
    pytest.param(MI300X, "fp8", torch.float8_e4m3fnuz, id="gfx942-e4m3-fnuz"),
    pytest.param(MI300X, "float8_e5m2", torch.float8_e5m2fnuz, id="gfx942-e5m2-fnuz"),
    pytest.param(MI300X, "float8_e4m3fnuz", torch.float8_e4m3fnuz, id="gfx942-fnuz-asked"),
    pytest.param(MI355X, "fp8", torch.float8_e4m3fn, id="gfx950-ocp"),
    pytest.param(MI355X, "float8_e5m2fnuz", torch.float8_e5m2, id="gfx950-fnuz-asked-ocp-runs"),
    pytest.param(H100, "fp8", torch.float8_e4m3fn, id="sm90-ocp"),
    pytest.param(H100, "float8_e4m3fnuz", torch.float8_e4m3fn, id="sm90-fnuz-asked-ocp-runs"),
    pytest.param(L4, "float8_e5m2", torch.float8_e5m2, id="sm89-ocp"),
])
def test_fp8_runs_as_the_variant_the_device_supports(info, dtype, runs_as):
    answer = native_matmul(info, dtype)
    assert answer.native and answer.reason is None
    assert answer.runs_as == str(runs_as).removeprefix("torch.")


@pytest.mark.parametrize("info, reason", [
    pytest.param(A100, "fp8 matmul (torch._scaled_mm) needs compute capability >= 8.9; NVIDIA A100-SXM4-80GB is 8.0",
                 id="sm80"),
    pytest.param(MI250X, "fp8 matmul (torch._scaled_mm) on ROCm runs on gfx942 (fnuz), gfx950 (ocp), gfx1200 (ocp), "
                         "gfx1201 (ocp); AMD Instinct MI250X/MI250 is gfx90a", id="gfx90a"),
    pytest.param(MI355X_OLD_ROCM, "fp8 matmul (torch._scaled_mm) on gfx950 needs ROCm >= 6.5; this is ROCm 6.4.1",
                 id="gfx950-rocm-6.4"),
    pytest.param(ROCM_NO_ARCH, "fp8 matmul (torch._scaled_mm) on ROCm runs on gfx942 (fnuz), gfx950 (ocp), "
                               "gfx1200 (ocp), gfx1201 (ocp); AMD Radeon Graphics is an unknown arch", id="rocm-no-arch"),
])
def test_fp8_where_no_variant_runs_says_why(info, reason):
    answer = native_matmul(info, "fp8")
    assert (answer.native, answer.runs_as, answer.reason) == (False, None, reason)


@pytest.mark.parametrize("info, native, runs_as", [
    pytest.param(V100, False, "float32", id="sm70-no-tf32"),
    pytest.param(A100, True, "tf32", id="sm80-tf32"),
    pytest.param(MI300X, True, "tf32", id="gfx942-xf32"),
    pytest.param(MI250X, False, "float32", id="gfx90a-no-tf32"),
])
def test_tf32_needs_tensor_cores_for_it(info, native, runs_as):
    answer = native_matmul(info, "tf32")
    assert (answer.native, answer.runs_as, answer.emulated) == (native, runs_as, False)
    assert (answer.reason is None) == native
    assert answer.label == ("native" if native else "runs as float32")


# What torch's ROCm builds do with a float32 matmul when TF32 is allowed, from ATen's sources: before 2.7
# the TF32 compute type is compiled out of ROCm builds (CUDABlas.cpp, #ifndef USE_ROCM); 2.7 to 2.9 use it
# only when c10::utils::check_env("HIPBLASLT_ALLOW_TF32") is true, i.e. the variable is exactly "1"
# (Context.cpp, allowTF32CuBLAS); later sources have no such check.
ROCM_TF32_BUILDS = [
    pytest.param("2.4.1+rocm6.1", "1", False, "install torch 2.7 or later", id="2.4-no-tf32-path"),
    pytest.param("2.6.0+rocm6.2.4", "1", False, "install torch 2.7 or later", id="2.6-no-tf32-path"),
    pytest.param("2.7.1+rocm6.3", None, False, f"run with {HIPBLASLT_ALLOW_TF32}=1", id="2.7-variable-unset"),
    pytest.param("2.8.0+rocm6.4", "0", False, f"run with {HIPBLASLT_ALLOW_TF32}=1", id="2.8-variable-off"),
    pytest.param("2.8.0+rocm6.4", "true", False, f"run with {HIPBLASLT_ALLOW_TF32}=1", id="2.8-only-1-is-on"),
    pytest.param("2.9.1+rocm6.4", None, False, f"run with {HIPBLASLT_ALLOW_TF32}=1", id="2.9-variable-unset"),
    pytest.param("2.7.1+rocm6.3", "1", True, None, id="2.7-variable-on"),
    pytest.param("2.9.1+rocm6.4", "1", True, None, id="2.9-variable-on"),
    pytest.param("2.10.0+rocm7.0", None, True, None, id="2.10-flags-decide"),
]


@pytest.mark.parametrize("info", [MI300X, MI355X], ids=["gfx942", "gfx950"])
@pytest.mark.parametrize("version, variable, native, how", ROCM_TF32_BUILDS)
def test_rocm_tf32_is_native_only_where_torch_uses_the_xf32_units(monkeypatch, info, version, variable, native, how):
    monkeypatch.setattr(torch, "__version__", version)
    if variable is not None:
        monkeypatch.setenv(HIPBLASLT_ALLOW_TF32, variable)
    answer = native_matmul(info, "tf32")
    assert (answer.native, answer.runs_as, answer.emulated) == (native, "tf32" if native else "float32", False)
    assert answer.label == ("native" if native else "runs as float32")
    if native:
        assert answer.reason is None
    else:
        assert answer.reason.startswith(f"torch {version} on ROCm ") and "tf32 runs as plain FP32" in answer.reason
        assert f"to turn TF32 on, {how}" in answer.reason, "the answer says how to turn TF32 on"
    assert answer.path == rocm_arch(info)


def test_rocm_tf32_off_is_skipped_and_left_out_of_the_report_saying_how_to_turn_it_on(monkeypatch):
    """A healthy MI300X whose torch runs "tf32" as FP32 reads at most 0.25 of the TF32 peak (FP32's 163.4 of
    653.7 TFLOP/s), around its floor: neither the benchmark nor the report may judge it, and both say how to
    turn TF32 on."""
    monkeypatch.setattr(torch, "__version__", "2.8.0+rocm6.4")
    monkeypatch.setattr(run, "detect_device", lambda device=None: MI300X)
    monkeypatch.setattr(run, "_probe", lambda dtype, info: None)
    monkeypatch.delenv("ACCOUNTING_PEAK_TFLOPS", raising=False)
    monkeypatch.delenv("ACCOUNTING_BENCHMARKS", raising=False)
    hint = f"to turn TF32 on, run with {HIPBLASLT_ALLOW_TF32}=1"
    assert hint in native_skip_reason(MI300X, "tf32")
    plan = run.prepare(device="cuda", budget_s=30.0)
    assert "tf32" in load_benchmarks().device("cuda").dtypes and "tf32" not in plan.dtypes
    assert any(note.startswith("tf32 not timed by default: torch 2.8.0+rocm6.4 on ROCm") and hint in note
               for note in plan.notes)
    asked = run.prepare(device="cuda", dtypes=["tf32"], budget_s=30.0)
    assert not asked.native["tf32"].native and not run.preview(asked)["dtypes"]["tf32"]["judged"]
    monkeypatch.setenv(HIPBLASLT_ALLOW_TF32, "1")
    assert "tf32" in run.prepare(device="cuda", budget_s=30.0).dtypes


def test_gpu_bf16_is_native_on_every_kind_of_gpu():
    assert all(native_matmul(info, "bf16").native for info in (H100, A100, MI300X, MI250X))


# ---- fp8 on MI300X: the case, the peak, the report ----------------------------------------------


@pytest.mark.parametrize("dtype, a_dtype", [
    ("fp8", torch.float8_e4m3fnuz),
    ("float8_e5m2", torch.float8_e5m2fnuz),
])
def test_matmul_case_builds_the_fnuz_variant_on_gfx942(monkeypatch, dtype, a_dtype):
    """The MI300X's answer, with the operands on the CPU: fnuz operands, mat2 column-major."""
    monkeypatch.setattr(timing, "detect_device", lambda device=None: MI300X)
    case = timing.matmul_case(dtype, 32, 64, 48, "cpu")
    a, b, _scale_a, _scale_b = case.operands
    assert case.runs_as == str(a_dtype).removeprefix("torch.") and case.dtype == timing.format_name(dtype)
    assert (a.dtype, b.dtype) == (a_dtype, torch.float8_e4m3fnuz)
    assert b.stride() == (1, 64), "mat2 column-major"


def _cpu_scaled_mm_refusal(a_dtype) -> str | None:
    """Why this host's CPU ``_scaled_mm`` cannot multiply ``a_dtype`` by float8_e4m3fnuz (``None``: it can).

    Which fp8 formats the CPU kernel takes depends on the host: the oneDNN path chosen on a Xeon with
    AVX512-FP16 and AMX refuses fnuz formats ("itensor_view_from_dense expects ... fp8"), AMD hosts run them.
    """
    one = torch.ones(16, 16)
    try:
        torch._scaled_mm(one.to(a_dtype), one.to(torch.float8_e4m3fnuz).t().contiguous().t(),
                         scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0), out_dtype=torch.bfloat16)
    except RuntimeError as error:
        return str(error).splitlines()[0]
    return None


@pytest.mark.parametrize("dtype, a_dtype", [
    ("fp8", torch.float8_e4m3fnuz),
    ("float8_e5m2", torch.float8_e5m2fnuz),
])
def test_the_fnuz_case_computes_the_product_where_the_cpu_runs_fnuz(monkeypatch, dtype, a_dtype):
    """The case's function is the product of its operands (run on this CPU where its ``_scaled_mm`` takes fnuz)."""
    refusal = _cpu_scaled_mm_refusal(a_dtype)
    if refusal is not None:
        pytest.skip(f"this CPU's torch._scaled_mm does not run {a_dtype} x float8_e4m3fnuz: {refusal}")
    monkeypatch.setattr(timing, "detect_device", lambda device=None: MI300X)
    case = timing.matmul_case(dtype, 32, 64, 48, "cpu")
    a, b, _scale_a, _scale_b = case.operands
    torch.testing.assert_close(case.fn().float(), (a.float() @ b.float()).bfloat16().float(), rtol=1e-2, atol=1e-2)


def test_matmul_case_refuses_fp8_where_no_variant_runs(monkeypatch):
    monkeypatch.setattr(timing, "detect_device", lambda device=None: MI250X)
    with pytest.raises(AccountingError, match=r"^float8_e4m3fn cannot run on device 'cpu': fp8 matmul \(torch._scaled_mm\) "
                                              r"on ROCm runs on gfx942"):
        timing.matmul_case("fp8", 32, 32, 32, "cpu")


def test_fnuz_formats_read_the_fp8_peak():
    ocp = peak_flops("AMD Instinct MI300X", "float8_e4m3fn")
    assert peak_flops("AMD Instinct MI300X", torch.float8_e4m3fnuz) == peak_flops(
        "AMD Instinct MI300X", "float8_e5m2fnuz") == ocp == pytest.approx(2614.9e12)


def test_report_on_gfx942_records_the_fnuz_variant(monkeypatch):
    monkeypatch.setattr(run, "detect_device", lambda device=None: MI300X)
    monkeypatch.setattr(run, "_probe", lambda dtype, info: None)
    monkeypatch.delenv("ACCOUNTING_PEAK_TFLOPS", raising=False)
    plan = run.prepare(device="cuda", dtypes=["bf16", "fp8"], budget_s=30.0)
    assert plan.native["float8_e4m3fn"].runs_as == "float8_e4m3fnuz"
    assert plan.peaks["float8_e4m3fn"] == pytest.approx(2614.9e12)
    sections = run.preview(plan)["dtypes"]
    assert sections["float8_e4m3fn"]["runs_as"] == "float8_e4m3fnuz" and sections["float8_e4m3fn"]["judged"]
    assert sections["bfloat16"]["runs_as"] == "bfloat16"


def test_report_default_drops_fp8_where_no_variant_runs(monkeypatch):
    monkeypatch.setattr(run, "detect_device", lambda device=None: MI250X)
    monkeypatch.setattr(run, "_probe", lambda dtype, info: None)
    monkeypatch.delenv("ACCOUNTING_PEAK_TFLOPS", raising=False)
    plan = run.prepare(device="cuda", budget_s=30.0)
    assert "float8_e4m3fn" not in plan.dtypes and "tf32" not in plan.dtypes
    assert any(note.startswith("float8_e4m3fn skipped: it cannot run on cuda:0: fp8 matmul (torch._scaled_mm) on ROCm")
               for note in plan.notes)
    assert any(note.startswith("tf32 not timed by default: gfx90a has no TF32 matrix units") for note in plan.notes)


def _fake_cuda_device(monkeypatch, info):
    """torch.cuda answering as ``info``'s GPU would (properties, name, count)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: info.name)
    props = SimpleNamespace(major=info.compute_capability[0], minor=info.compute_capability[1],
                            total_memory=info.memory_bytes, multi_processor_count=304, L2_cache_size=4 * 2**20,
                            gcnArchName=info.arch)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(torch.version, "hip", info.runtime.removeprefix("ROCm ") if info.arch else None)


@pytest.mark.parametrize("info, skipped", [
    pytest.param(MI300X, False, id="gfx942-runs-fnuz"),
    pytest.param(MI250X, True, id="gfx90a-no-fp8"),
    pytest.param(H100, False, id="sm90"),
    pytest.param(A100, True, id="sm80"),
])
def test_gpu_skip_asks_the_same_rule(monkeypatch, info, skipped):
    _fake_cuda_device(monkeypatch, info)
    detected = detect_device("cuda")
    assert detected.arch == info.arch and detected.compute_capability == info.compute_capability
    reason = gpu_skip_reason("fp8")
    assert reason == native_matmul(info, "fp8").reason
    assert (reason is not None) == skipped


# ---- everything else that asks -------------------------------------------------------------------


def test_benchmarks_json_refuses_fp8_in_the_cpu_section_in_either_flavour():
    def section(dtype):
        return {"dtypes": [dtype], "shapes": [[256, 256, 256]], "floors": {dtype: 0.1}}

    document = {"regression": {"metric": "median", "threshold_percent": 10}, "cpu": section("float8_e4m3fnuz")}
    with pytest.raises(AccountingError, match=r"cpu.dtypes\[0\] has dtype 'float8_e4m3fnuz', which a CPU cannot run: "
                                              r"a CPU has no fp8 matmul units; list it under cuda$"):
        parse_benchmarks(document)
    document.update(cpu=section("bf16"), cuda=section("float8_e4m3fnuz"))
    assert parse_benchmarks(document).device("cuda").dtypes == ("float8_e4m3fnuz",)


@pytest.mark.parametrize("info, expected", FAKE_CPUS)
def test_pytest_skip_and_report_defaults_agree(monkeypatch, info, expected):
    """One question, two askers: the CPU benchmark skips exactly what the report leaves out, for the same reason."""
    monkeypatch.setattr(run, "detect_device", lambda device=None: info)
    monkeypatch.delenv("ACCOUNTING_PEAK_TFLOPS", raising=False)
    monkeypatch.delenv("ACCOUNTING_BENCHMARKS", raising=False)
    plan = run.prepare(device="cpu", budget_s=30.0)
    configured = list(load_benchmarks().device("cpu").dtypes)
    assert plan.dtypes == [dtype for dtype in configured if native_skip_reason(info, dtype) is None] == expected
    for dtype in configured:
        reason = native_skip_reason(info, dtype)
        if reason is not None:
            why = native_matmul(info, dtype).reason
            assert why in reason
            assert f"{dtype} not timed by default: {why}; time it anyway with --dtypes {dtype} " \
                   "(measured and shown, not judged)" in plan.notes


def test_the_report_on_this_host_judges_only_what_it_runs_natively(tmp_path, monkeypatch, capsys):
    """A real, brief default report here: its dtypes are this CPU's native ones and emulation decides nothing.

    Load from other jobs may lower float32's MFU, so this asserts on the dtype list and the
    judged flags, not on the float32 floor.
    """
    monkeypatch.delenv("ACCOUNTING_BENCHMARKS", raising=False)
    path = tmp_path / "report.json"
    assert main(["report", "--device", "cpu", "--budget", "1", "--quiet", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    here = detect_device("cpu")
    configured = list(load_benchmarks().device("cpu").dtypes)
    assert document["settings"]["dtypes"] == native_dtypes(here, configured) == document["judged_dtypes"]
    assert all(section["native"] and section["judged"] for section in document["dtypes"].values())
    assert document["verdict"] == overall(section["verdict"]["status"] for section in document["dtypes"].values())
    for dtype in set(configured) - set(document["settings"]["dtypes"]):
        assert any(note.startswith(f"{dtype} not timed by default: ") for note in document["notes"])
    capsys.readouterr()


# ---- every field of the answer, on devices described by their published facts ------------------------------

FP8 = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]
WIDE = ["float32", "bfloat16", "float16"]


def canonical(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def e5m2_family(name: str) -> bool:
    """5 exponent bits: the e5m2 formats reach 57344, the e4m3 ones at most 448 (torch.finfo)."""
    return torch.finfo(getattr(torch, name)).max > 10_000


def nvidia(name, capability):
    return DeviceInfo("cuda", name, 0, 80 * GIB, compute_capability=capability, runtime="CUDA 12.8")


def amd(name, arch, runtime="ROCm 7.0.1"):
    return DeviceInfo("cuda", name, 0, 192 * GIB, compute_capability=(9, 4), arch=arch, runtime=runtime)


# (device, the path its answers name, fp8 flavour it runs or None, has TF32/XF32 matrix units).
# NVIDIA: compute capability (developer.nvidia.com/cuda-gpus); fp8 _scaled_mm needs 8.9 or 9.x, TF32 8.0.
# AMD: gfx942 runs fnuz fp8 and XF32, gfx950 OCP fp8 and XF32, RDNA4 (gfx1200/gfx1201) OCP fp8, no XF32.
GPUS = [
    pytest.param(nvidia("NVIDIA H100 80GB HBM3", (9, 0)), "sm_90", "ocp", True, id="h100-sm90"),
    pytest.param(nvidia("NVIDIA L4", (8, 9)), "sm_89", "ocp", True, id="l4-sm89"),
    pytest.param(nvidia("NVIDIA Jetson AGX Orin", (8, 7)), "sm_87", None, True, id="orin-sm87"),
    pytest.param(nvidia("NVIDIA A100-SXM4-80GB", (8, 0)), "sm_80", None, True, id="a100-sm80"),
    pytest.param(nvidia("Tesla T4", (7, 5)), "sm_75", None, False, id="t4-sm75"),
    pytest.param(nvidia("NVIDIA B200", (10, 0)), "sm_100", "ocp", True, id="b200-sm100"),
    pytest.param(amd("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", "ROCm 6.2.41133-dd7f95766"), "gfx942",
                 "fnuz", True, id="mi300x-gfx942"),
    pytest.param(amd("AMD Instinct MI355X", "gfx950:sramecc+:xnack-"), "gfx950", "ocp", True, id="mi355x-gfx950"),
    pytest.param(amd("AMD Radeon RX 9070 XT", "gfx1201"), "gfx1201", "ocp", False, id="rx9070-gfx1201"),
    pytest.param(amd("AMD Radeon RX 9060 XT", "gfx1200"), "gfx1200", "ocp", False, id="rx9060-gfx1200"),
    pytest.param(amd("AMD Instinct MI250X/MI250", "gfx90a:sramecc+:xnack-"), "gfx90a", None, False,
                 id="mi250x-gfx90a"),
]


@pytest.mark.parametrize("info, path, flavour, tf32_units", GPUS)
def test_every_gpu_answer_names_its_dtype_path_and_variant(info, path, flavour, tf32_units):
    for dtype in WIDE:
        answer = native_matmul(info, getattr(torch, dtype))
        assert (answer.dtype, answer.native, answer.runs_as, answer.emulated, answer.reason, answer.path) == (
            dtype, True, dtype, False, None, path)
    for dtype in FP8:
        answer = native_matmul(info, getattr(torch, dtype))
        assert answer.dtype == dtype and answer.native == (flavour is not None) and not answer.emulated
        if flavour is None:
            assert answer.runs_as is None and answer.label == "cannot run"
            assert info.name in answer.reason and answer.path == path
            continue
        assert answer.reason is None and answer.label == "native"
        assert e5m2_family(answer.runs_as) == e5m2_family(dtype), "the variant keeps the requested format family"
        assert answer.runs_as.endswith("fnuz") == (flavour == "fnuz")
        assert answer.path == (path if path.startswith("sm_") else f"{path} ({flavour} fp8)")
    tf32 = native_matmul(info, "tf32")
    assert (tf32.dtype, tf32.native, tf32.runs_as, tf32.path) == ("tf32", tf32_units, "tf32" if tf32_units
                                                                   else "float32", path)
    assert (tf32.reason is None) == tf32_units
    if not tf32_units:
        assert tf32.reason.endswith("float32 with TF32 allowed runs as plain FP32")


def test_a_gpu_below_a_bound_names_the_bound_and_its_capability():
    t4 = native_matmul(nvidia("Tesla T4", (7, 5)), "tf32")
    assert t4.reason == ("tf32 (TF32 tensor cores) needs compute capability >= 8.0; Tesla T4 is 7.5: "
                         "float32 with TF32 allowed runs as plain FP32")
    orin = native_matmul(nvidia("NVIDIA Jetson AGX Orin", (8, 7)), "float8_e5m2")
    assert orin.reason == "fp8 matmul (torch._scaled_mm) needs compute capability >= 8.9; NVIDIA Jetson AGX Orin is 8.7"
    rdna3 = native_matmul(amd("AMD Radeon RX 7900 XTX", "gfx1100"), "tf32")
    assert (rdna3.native, rdna3.runs_as, rdna3.reason) == (
        False, "float32", "gfx1100 has no TF32 matrix units: float32 with TF32 allowed runs as plain FP32")


@pytest.mark.parametrize("dtype, what, bound", [
    pytest.param("tf32", "tf32 (TF32 tensor cores)", "8.0", id="tf32"),
    pytest.param("float8_e5m2", "fp8 matmul (torch._scaled_mm)", "8.9", id="fp8"),
])
def test_a_gpu_without_a_capability_is_not_trusted_with_a_bound(dtype, what, bound):
    """A CUDA device whose capability is unknown: neither native nor refused, with no sm_ path to name."""
    unknown = nvidia("Mystery GPU", None)
    answer = native_matmul(unknown, dtype)
    assert (answer.dtype, answer.native, answer.runs_as, answer.path) == (dtype, False, dtype, None)
    assert answer.reason == f"{what} needs compute capability >= {bound}; Mystery GPU's is not known"
    plain = native_matmul(unknown, "bf16")
    assert (plain.native, plain.runs_as, plain.path, plain.reason) == (True, "bfloat16", None, None)


@pytest.mark.parametrize("arch", ["gfx950", "gfx1200", "gfx1201"])
@pytest.mark.parametrize("runtime, runs", [
    pytest.param("ROCm 6.4.3", False, id="6.4"),
    pytest.param("ROCm 6.5.0", True, id="6.5"),
    pytest.param("ROCm 6.10.1", True, id="6.10"),
    pytest.param("ROCm 10.0.0", True, id="10.0"),
    pytest.param("HIP", True, id="no-version"),
    pytest.param(None, True, id="none"),
])
def test_ocp_fp8_on_rocm_needs_rocm_6_5_compared_as_numbers(arch, runtime, runs):
    """torch accepts float8_e4m3fn on ROCm from 6.5; a version it cannot read is not held against the device."""
    answer = native_matmul(amd("AMD GPU", arch, runtime), "fp8")
    assert (answer.native, answer.runs_as) == (runs, "float8_e4m3fn" if runs else None)
    assert answer.dtype == "float8_e4m3fn"
    if not runs:
        assert answer.reason == f"fp8 matmul (torch._scaled_mm) on {arch} needs ROCm >= 6.5; this is {runtime}"
        assert answer.path == arch


def test_fnuz_fp8_on_gfx942_has_no_rocm_bound():
    old = native_matmul(amd("AMD Instinct MI300X", "gfx942", "ROCm 5.7.0"), "float8_e5m2")
    assert (old.native, old.runs_as, old.path) == (True, "float8_e5m2fnuz", "gfx942 (fnuz fp8)")


@pytest.mark.parametrize("arch, expected", [
    pytest.param("gfx942:sramecc+:xnack-", "gfx942", id="features-dropped"),
    pytest.param(" GFX90A ", "gfx90a", id="case-and-space"),
    pytest.param("gfx1201", "gfx1201", id="bare"),
    pytest.param("sm_90", None, id="not-rocm"),
    pytest.param(None, None, id="none"),
])
def test_rocm_arch_reads_the_gcn_arch_name(arch, expected):
    assert rocm_arch(DeviceInfo("cuda", "GPU", 0, GIB, arch=arch)) == expected


def test_rocm_arch_is_none_on_a_cpu_even_with_an_arch_string():
    assert rocm_arch(DeviceInfo("cpu", "CPU", None, GIB, arch="gfx942")) is None


def test_a_rocm_runtime_without_an_arch_trusts_no_fp8_or_tf32_rule():
    blind = DeviceInfo("cuda", "AMD Radeon Graphics", 0, GIB, compute_capability=(9, 0), runtime="ROCm 6.2")
    tf32, bf16 = native_matmul(blind, "tf32"), native_matmul(blind, "bf16")
    assert (tf32.native, tf32.runs_as, tf32.path) == (False, "float32", "an unknown arch")
    assert (bf16.native, bf16.path) == (True, "an unknown arch")
    # The same capability under CUDA is an sm_90 device with TF32 units: the runtime decided.
    assert native_matmul(nvidia("GPU", (9, 0)), "tf32").native


@pytest.mark.parametrize("info, expected", FAKE_CPUS)
def test_every_cpu_answer_names_its_dtype_and_path(info, expected):
    float32 = cpu_matmul_path("float32", info.cpu_flags, vendor=info.vendor).name
    for dtype in [*WIDE, "float64"]:
        answer = native_matmul(info, getattr(torch, dtype))
        assert answer.dtype == dtype
        if answer.native:
            assert answer.path == cpu_matmul_path(dtype, info.cpu_flags, vendor=info.vendor).name
        else:
            assert answer.path == f"{float32} (via float32)"
    assert native_matmul(info, "float32").path == float32
    assert native_matmul(info, "float64").native, "float64 always runs natively"
    assert native_dtypes(info, [torch.float64, *expected]) == ["float64", *expected]


@pytest.mark.parametrize("info, expected", FAKE_CPUS)
def test_every_cpu_answer_is_a_real_bool_for_the_dtype_asked(info, expected):
    """``native`` is True or False, never None (JSON would write null, and ``is False`` checks would miss it)."""
    for dtype in [*WIDE, "float64", "tf32", *FP8]:
        answer = native_matmul(info, dtype)
        assert answer.dtype == dtype
        assert answer.native is (dtype in expected or dtype == "float64")
        assert type(answer.emulated) is bool


def test_zen4_names_its_half_width_avx512_units():
    """The vendor reaches the path: Zen 4's AVX-512 runs on 256-bit units (AMD's Zen 4 optimisation guide)."""
    assert native_matmul(ZEN4, "float32").path == "AVX-512 (Zen 4, 256-bit units)"
    assert native_matmul(ZEN4, "float16").path == "AVX-512 (Zen 4, 256-bit units) (via float32)"


def test_a_cpu_without_known_flags_is_taken_to_have_none():
    bare = DeviceInfo("cpu", "unknown", None, GIB, cpu_flags=None)
    assert native_dtypes(bare, WIDE) == ["float32"]
    assert native_matmul(bare, "bf16").path == "SSE (via float32)"


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_on_a_cpu_is_emulated_by_torch_and_says_so(dtype):
    answer = native_matmul(ZEN3, getattr(torch, dtype))
    assert (answer.dtype, answer.native, answer.emulated, answer.runs_as, answer.path) == (
        dtype, False, True, dtype, None)
    assert answer.reason == "a CPU has no fp8 matmul units; torch emulates it through float32"
    assert kind_reason("cpu", dtype) == "a CPU has no fp8 matmul units"
    assert kind_reason("cuda", dtype) is None


def test_fp8_really_runs_on_this_cpu_as_the_rule_says():
    """The emulation the answer claims: torch's CPU _scaled_mm accepts the fp8 operands and gives the product."""
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(16, 32).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)
    product = torch._scaled_mm(a, b, one, one, out_dtype=torch.float32)
    torch.testing.assert_close(product, a.float() @ b.float(), rtol=1e-2, atol=1e-2)
    assert native_matmul(ZEN3, a.dtype).runs


def test_the_wide_dtypes_run_everywhere_with_no_reason():
    for dtype in WIDE:
        assert kind_reason("cpu", dtype) is None and kind_reason("cuda", dtype) is None
    assert kind_reason("cpu", "tf32") == "tf32 is a CUDA tensor-core mode; a CPU has no tf32 matmul units"


@pytest.mark.parametrize("kind", ["mps", "meta", "CPU"])
def test_a_device_kind_without_a_rule_is_refused_by_name(kind):
    with pytest.raises(AccountingError, match=rf"^device kind must be 'cpu' or 'cuda', got '{kind}'$"):
        native_matmul(DeviceInfo(kind, "x", None, GIB), "float32")
