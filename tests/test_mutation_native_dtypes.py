"""The native-dtype rule, every field of its answer, on devices described by their published facts.

Written to close what mutation testing (issue 15, README "Development") found unchecked in
:mod:`accounting.hardware.native`: the answer's ``dtype`` and ``path`` on every branch, the fp8
variant's format family, the ROCm version bound, and the reasons of the branches no other test
reaches. The truths are device facts (compute capabilities from NVIDIA's CUDA GPU table, ROCm
architectures from AMD's GPU specification tables, ISA paths from :mod:`accounting.hardware`) and
torch's own dtypes (the fp8 formats' ranges from ``torch.finfo``).
"""

import pytest
import torch

from accounting.hardware.devices import DeviceInfo
from accounting.errors import AccountingError
from accounting.hardware.cpu_peak import cpu_matmul_path
from accounting.hardware.native import kind_reason, native_dtypes, native_matmul, rocm_arch
from tests.fake_devices import FAKE_CPUS, GIB, ZEN3, ZEN4

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
