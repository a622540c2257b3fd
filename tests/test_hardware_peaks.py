"""Published peaks: the table's rows and figures, device-name matching, the ROCm arch, and a detected device's peak.

No GPU needed: names, archs and :class:`DeviceInfo` are written out, and each figure is the reference table's.
"""

import os
import re
import warnings

import pytest
import torch

from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware import devices, peaks
from accounting.hardware.devices import DeviceInfo
from accounting.hardware.peaks import (
    PEAK_TFLOPS_ENV,
    PeakUnknownWarning,
    chip_row,
    device_peak_flops,
    find_chip,
    peak_bandwidth,
    peak_flops,
)

GIB = 2**30

# Every device-name string of the reference (shared/reference/accelerators.md), with the row it
# belongs to and that row's FP32 / TF32 / BF16 / FP8 / INT8 dense figures (TFLOP/s, TOPS) and
# bandwidth (TB/s), transcribed by hand from the reference table. None: "—" there.
NAMED_ROWS = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 66.9, 494.7, 989.4, 1978.9, 1978.9, 3.35),
    ("NVIDIA H100 PCIe", "H100 PCIe", 51.2, 378, 756, 1513, 1513, 2.0),
    ("NVIDIA H100 NVL", "H100 NVL (one GPU)", 60, 417.5, 835.5, 1670.5, 1670.5, 3.9),
    ("NVIDIA H200", "H200 SXM", 66.9, 494.7, 989.4, 1978.9, 1978.9, 4.8),
    ("NVIDIA H200 NVL", "H200 NVL", 60, 417.5, 835.5, 1670.5, 1670.5, 4.8),
    ("NVIDIA B200", "B200", 75, 1100, 2250, 4500, 4500, 7.7),
    ("NVIDIA GB200", "GB200 (per GPU)", 80, 1250, 2500, 5000, 5000, 8.0),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM", 19.5, 156, 312, None, 624, 1.555),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM", 19.5, 156, 312, None, 624, 2.039),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe", 19.5, 156, 312, None, 624, 1.555),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe", 19.5, 156, 312, None, 624, 1.935),
    ("NVIDIA A10", "A10", 31.2, 62.5, 125, None, 250, 0.6),
    ("NVIDIA A10G", "A10G", 31.2, 62.5, 125, None, 250, 0.6),
    ("NVIDIA L4", "L4", 30.3, 60, 121, 242.5, 242.5, 0.3),
    ("NVIDIA L40S", "L40S", 91.6, 183, 362, 733, 733, 0.864),
    ("Tesla T4", "T4", 8.1, None, None, None, 130, 0.32),
    ("Tesla V100-SXM2-16GB", "V100 SXM2", 15.7, None, None, None, None, 0.9),
    ("Tesla V100-PCIE-32GB", "V100 PCIe", 14.0, None, None, None, None, 0.9),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 82.6, 82.6, 165.2, 330.3, 660.6, 1.008),
    ("NVIDIA GeForce RTX 3090", "RTX 3090", 35.6, 35.6, 71, None, 284, 0.936),
    ("AMD Instinct MI300X", "MI300X", 163.4, 653.7, 1307.4, 2614.9, 2614.9, 5.3),
    # a virtual function, as cloud VMs show the whole chip passed to them
    ("AMD Instinct MI300X VF", "MI300X", 163.4, 653.7, 1307.4, 2614.9, 2614.9, 5.3),
    # float32: the FP32 matrix rate rocBLAS SGEMM runs at (47.9 per GCD), where the reference lists the vector rate (24)
    ("AMD Instinct MI250X/MI250", "MI250X (per GCD, as torch sees it)", 47.9, None, 191.5, None, 191.5, 1.6),
]
REFERENCE_ROWS = {
    "H100 SXM", "H100 PCIe", "H100 NVL (one GPU)", "H200 SXM", "H200 NVL", "B200", "GB200 (per GPU)",
    "A100 SXM", "A100 PCIe", "A10", "A10G", "L4", "L40S", "T4", "V100 SXM2", "V100 PCIe", "RTX 4090",
    "RTX 3090", "MI300X", "MI250X (per GCD, as torch sees it)",
}
COLUMNS = ("float32", "tf32", "bfloat16", "float8_e4m3fn", torch.int8)


@pytest.mark.parametrize("name, row, figures", [pytest.param(case[0], case[1], case[2:], id=case[0]) for case in NAMED_ROWS])
def test_every_reference_name_resolves_to_its_row(name, row, figures):
    assert find_chip(name).row == row
    for column, expected in zip(COLUMNS, figures[:5]):
        if expected is None:
            with pytest.warns(PeakUnknownWarning, match=r"has no published .* rate; pass override_tflops="):
                assert peak_flops(name, column) is None
        else:
            assert peak_flops(name, column) == pytest.approx(expected * 1e12)
    assert peak_bandwidth(name) == pytest.approx(figures[5] * 1e12)


def test_every_reference_row_is_reached_by_some_name():
    assert {find_chip(case[0]).row for case in NAMED_ROWS} == REFERENCE_ROWS


@pytest.mark.parametrize("name, row", [
    pytest.param("nvidia h100 80gb hbm3", "H100 SXM", id="lower-case"),
    pytest.param("  NVIDIA  H100  PCIe ", "H100 PCIe", id="extra-spaces"),
    pytest.param("NVIDIA A100-SXM4-80GB", "A100 SXM", id="a100-not-a10"),
    pytest.param("NVIDIA A10G", "A10G", id="a10g-not-a10"),
    pytest.param("NVIDIA H200 NVL", "H200 NVL", id="h200-nvl-not-h200"),
    pytest.param("NVIDIA H100 NVL", "H100 NVL (one GPU)", id="h100-nvl-not-pcie"),
    pytest.param("NVIDIA GB200", "GB200 (per GPU)", id="gb200-not-b200"),
    pytest.param("NVIDIA L40S", "L40S", id="l40s-not-l4"),
    pytest.param("NVIDIA GH200 480GB", "GH200 (96GB HBM3)", id="gh200-not-h200"),
    pytest.param("AMD Instinct MI300A", "MI300A", id="mi300a-not-mi300x"),
    pytest.param("AMD Instinct MI325X", "MI325X", id="mi325x-not-mi300x"),
])
def test_look_alike_names_stay_apart(name, row):
    assert find_chip(name).row == row


@pytest.mark.parametrize("name, not_row", [
    pytest.param("NVIDIA L40", "L4", id="l40-is-not-l4-or-l40s"),
    pytest.param("Tesla V100S-PCIE-32GB", "V100 PCIe", id="v100s-is-not-v100"),
    pytest.param("NVIDIA GeForce RTX 4090 D", "RTX 4090", id="4090d-is-not-4090"),
    pytest.param("NVIDIA GeForce RTX 3090 Ti", "RTX 3090", id="3090ti-is-not-3090"),
    pytest.param("NVIDIA A100", "A10", id="bare-a100-is-not-a10"),
    pytest.param("NVIDIA B100", "B200", id="b100-is-not-b200"),
])
def test_unknown_look_alikes_are_unknown_not_a_neighbour(name, not_row):
    assert find_chip(name) is None
    with pytest.warns(PeakUnknownWarning, match=rf"^no peak FLOP/s for device '{name}': it is not in the peak table; "
                                                rf"pass override_tflops= \(pytest: --peak-tflops\) or set \${PEAK_TFLOPS_ENV}"):
        assert peak_flops(name, "bf16") is None


def test_ambiguous_h100_asks_for_an_override():
    with pytest.warns(PeakUnknownWarning, match=r"could be H100 SXM, H100 PCIe or H100 NVL"):
        assert peak_flops("NVIDIA H100", "bf16") is None


@pytest.mark.parametrize("arch, row", [("gfx942:sramecc+:xnack-", "MI300X"), ("gfx90a", "MI250X (per GCD, as torch sees it)")])
def test_rocm_arch_resolves_an_unrecognised_name(arch, row):
    assert find_chip("", arch=arch).row == row
    assert find_chip("AMD Radeon Graphics", arch=arch).row == row


def test_chip_row_resolves_a_device_by_name_then_rocm_arch():
    radeon = DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, arch="gfx942:sramecc+:xnack-")
    assert chip_row(radeon) == "MI300X"
    assert chip_row(DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 2**30)) == "H100 SXM"
    assert chip_row(DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30)) is None
    assert chip_row(DeviceInfo("cpu", "NVIDIA H100 80GB HBM3", None, 2**30)) is None  # a CPU has no table row
    with pytest.raises(AccountingTypeError, match="'NVIDIA H100 80GB HBM3'"):
        chip_row("NVIDIA H100 80GB HBM3")


def test_sparse_rates_double_tensor_dtypes_only():
    dense = peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16", sparse=True) == 2 * dense
    with pytest.warns(PeakUnknownWarning, match=r"no 2:4-sparse float32 rate"):
        assert peak_flops("NVIDIA H100 80GB HBM3", "float32", sparse=True) is None
    with pytest.warns(PeakUnknownWarning, match=r"V100 SXM2 has no 2:4-sparse float16 rate"):
        assert peak_flops("Tesla V100-SXM2-16GB", "fp16", sparse=True) is None


def test_float64_uses_fp64_tensor_cores_where_present():
    assert peak_flops("NVIDIA A100-SXM4-80GB", torch.float64) == pytest.approx(19.5e12)  # FP64 TC
    assert peak_flops("Tesla V100-SXM2-16GB", torch.float64) == pytest.approx(7.8e12)  # no FP64 TC


def test_both_fp8_formats_read_one_rate():
    assert peak_flops("NVIDIA L4", torch.float8_e5m2) == peak_flops("NVIDIA L4", "fp8") == pytest.approx(242.5e12)


@pytest.mark.parametrize("dtype, error, message", [
    ("float128", AccountingError, r"^unknown floating-point format 'float128'"),
    (3, AccountingTypeError, r"^expected a torch dtype or its name, got 3"),
])
def test_bad_dtype_is_rejected(dtype, error, message):
    with pytest.raises(error, match=message):
        peak_flops("NVIDIA L4", dtype)


def test_bad_device_name_type_is_rejected():
    with pytest.raises(AccountingTypeError, match=r"^device_name must be a string, got 42"):
        peak_flops(42, "bf16")


def test_bandwidth_of_an_unknown_device_is_none_with_a_warning():
    with pytest.warns(PeakUnknownWarning, match=r"^no peak bandwidth for device 'NVIDIA Jetson AGX Orin': it is not in the table$"):
        assert peak_bandwidth("NVIDIA Jetson AGX Orin") is None


@pytest.mark.parametrize("function, args, kwargs, message", [
    pytest.param(peak_flops, ("NVIDIA B100", "bf16"), {}, r"it is not in the peak table; .* dense bfloat16 TFLOP/s$",
                 id="unknown-chip"),
    pytest.param(peak_flops, ("NVIDIA A100-SXM4-80GB", "fp8"), {},
                 r"^A100 SXM .* has no published fp8 rate; .* dense fp8 TFLOP/s$", id="no-rate"),
    pytest.param(peak_flops, ("Tesla T4", "fp16"), {"sparse": True},
                 r"^T4 has no 2:4-sparse float16 rate; .* dense float16 TFLOP/s$", id="no-sparse-rate"),
    pytest.param(peak_bandwidth, ("NVIDIA B100",), {},
                 r"^no peak bandwidth for device 'NVIDIA B100': it is not in the table$", id="bandwidth-unknown-chip"),
    pytest.param(peak_bandwidth, ("AMD Instinct MI308X",), {}, r": MI308X has no published bandwidth$",
                 id="bandwidth-unpublished"),
])
def test_an_unknown_peak_warns_at_the_callers_line_and_says_which_peak_to_give(function, args, kwargs, message):
    """The warning points at the line that asked (stacklevel=2), where the user can act on it."""
    with pytest.warns(PeakUnknownWarning, match=message) as record:
        assert function(*args, **kwargs) is None
    if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut calls through a trampoline: one frame more
        assert [warning.filename for warning in record] == [__file__]  # not hardware.py, nor pytest's caller


def test_bandwidth_of_a_card_known_only_by_its_rocm_arch():
    # AMD Instinct MI300X datasheet: 5.3 TB/s HBM3 (reference table).
    assert peak_bandwidth("AMD Radeon Graphics", arch="gfx942:sramecc+:xnack-") == pytest.approx(5.3e12)


def test_an_unknown_rocm_arch_leaves_a_card_without_a_model_number_unknown():
    # gfx1100 is RDNA 3 (Radeon RX 7900 XTX, ROCm's GPU specifications table), which the peak table has no row for.
    assert find_chip("AMD Radeon Graphics", arch="gfx1100") is None
    assert chip_row(DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, arch="gfx1100")) is None


# ---- the gfx942 family, MI250X float32, GH200 --------------------------------------------------------------

GFX942 = "gfx942:sramecc+:xnack-"


@pytest.mark.parametrize("name, arch, row, bf16_tflops, bandwidth_tbs", [
    pytest.param("AMD Instinct MI300X", GFX942, "MI300X", 1307.4, 5.3, id="mi300x"),
    pytest.param("AMD Radeon Graphics", GFX942, "MI300X", 1307.4, 5.3, id="unnamed-gfx942-is-mi300x"),
    pytest.param("AMD Instinct MI300A", GFX942, "MI300A", 980.6, 5.3, id="mi300a-not-mi300x"),
    pytest.param("AMD Instinct MI325X", GFX942, "MI325X", 1307.4, 6.0, id="mi325x-own-bandwidth"),
    pytest.param("AMD Instinct MI308X", GFX942, "MI308X", None, None, id="mi308x-no-public-figures"),
    pytest.param("AMD Instinct MI210", "gfx90a", None, None, None, id="mi210-not-mi250x"),
])
def test_rocm_arch_is_used_only_when_the_name_says_nothing(name, arch, row, bf16_tflops, bandwidth_tbs):
    info = DeviceInfo("cuda", name, 0, 128 * GIB, arch=arch)
    assert chip_row(info) == row, "floors (chip_floors) follow the same row"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PeakUnknownWarning)
        peak = peak_flops(name, "bf16", arch=arch)
        bandwidth = peak_bandwidth(name, arch=arch)
    assert peak == (None if bf16_tflops is None else pytest.approx(bf16_tflops * 1e12))
    assert bandwidth == (None if bandwidth_tbs is None else pytest.approx(bandwidth_tbs * 1e12))
    assert (len(caught) > 0) is (bf16_tflops is None), "an unknown figure warns; a known one does not"
    if row is not None and bandwidth_tbs is None:
        assert f"{row} has no published bandwidth" in str(caught[-1].message)


def test_mi250x_float32_peak_is_the_matrix_rate_rocblas_sgemm_runs_at():
    """Per GCD: 110 CUs × 1.7 GHz; CDNA 2 matrix cores do 256 FP32 FLOPs per clock per CU (vector: 128)."""
    matrix = 110 * 256 * 1.7e9
    assert peak_flops("AMD Instinct MI250X/MI250", "float32") == pytest.approx(matrix, rel=2e-3)
    assert peak_flops("AMD Instinct MI250X/MI250", "float32") == peak_flops("AMD Instinct MI250X/MI250", "float64")


def test_gh200_has_its_own_rows():
    assert find_chip("NVIDIA GH200 480GB").row == "GH200 (96GB HBM3)"
    assert peak_flops("NVIDIA GH200 480GB", "bf16") == pytest.approx(989.5e12)
    assert peak_bandwidth("NVIDIA GH200 144GB HBM3e") == pytest.approx(4.9e12)
    with pytest.warns(PeakUnknownWarning, match=r"could be GH200 \(96GB HBM3\) or GH200 \(144GB HBM3e\)"):
        assert peak_flops("NVIDIA GH200", "bf16") is None


# ---- what a cloud VM is given: a virtual function (the whole chip) or a MIG slice (a fraction of it) ---------


@pytest.mark.parametrize("arch", [GFX942, None], ids=["with-arch", "name-only"])
def test_a_cloud_mi300x_virtual_function_is_the_mi300x(monkeypatch, arch):
    """Azure's MI300X VMs: torch names each GPU "AMD Instinct MI300X VF" and reports one XCD's 4 MB L2."""
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    vf = DeviceInfo("cuda", "AMD Instinct MI300X VF", 0, 192 * GIB, compute_capability=(9, 4), multiprocessors=304,
                    l2_cache_bytes=4 * 2**20, arch=arch, runtime="ROCm 6.3.42131")
    assert chip_row(vf) == "MI300X", "its floors are the MI300X's (chip_floors)"
    assert device_peak_flops(vf, "bf16") == pytest.approx(1307.4e12)  # MI300X datasheet, dense
    assert peak_bandwidth(vf.name, arch=arch) == pytest.approx(5.3e12)
    assert peaks.last_level_cache_bytes(vf) == INFINITY_CACHE_BYTES, "the flush and bandwidth copy see 256 MB"


@pytest.mark.parametrize("name", ["AMD Instinct MI325X VF", "AMD Instinct MI300A VF", "NVIDIA H100 80GB HBM3 VF"])
def test_a_virtual_function_reads_its_own_chips_row_not_a_neighbours(name):
    assert find_chip(name) is find_chip(name.removesuffix(" VF")) is not None


# NVIDIA MIG profiles (MIG user guide): a slice has a fraction of the SMs and of the memory bandwidth.
MIG_NAMES = [
    pytest.param("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb", "H100 SXM", id="h100-1g"),
    pytest.param("NVIDIA H100 80GB HBM3 MIG 7g.80gb", "7g.80gb", "H100 SXM", id="h100-7g-still-a-slice"),
    pytest.param("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "3g.20gb", "A100 SXM", id="a100-3g"),
    pytest.param("NVIDIA H200 MIG 1g.18gb+me", "1g.18gb+me", "H200 SXM", id="h200-media-extensions"),
    pytest.param("NVIDIA H100 MIG 2g.20gb", "2g.20gb", "'NVIDIA H100'", id="ambiguous-chip"),
]


@pytest.mark.parametrize("name, profile, whole", MIG_NAMES)
def test_a_mig_slice_has_no_published_peak_and_says_so(monkeypatch, name, profile, whole):
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    assert find_chip(name) is None
    said = rf"it is a MIG slice \({re.escape(profile)}\) of {re.escape(whole)}: NVIDIA publishes no peak for a slice"
    with pytest.warns(PeakUnknownWarning, match=rf"^no peak FLOP/s for device '{re.escape(name)}': {said}"):
        assert peak_flops(name, "bf16") is None
    assert peaks.mig_slice(name)[1] == profile
    with pytest.warns(PeakUnknownWarning, match=rf"^no peak bandwidth for device '{re.escape(name)}': {said}"):
        assert peak_bandwidth(name) is None
    info = DeviceInfo("cuda", name, 0, 10 * GIB, compute_capability=(9, 0), l2_cache_bytes=5 * 2**20)
    assert chip_row(info) is None, "no floors: they are for the whole chip"
    with pytest.warns(PeakUnknownWarning, match=said):
        assert device_peak_flops(info, "bf16") is None
    assert peaks.last_level_cache_bytes(info) == info.l2_cache_bytes


def test_a_whole_chip_or_its_virtual_function_is_no_slice():
    assert peaks.mig_slice("NVIDIA H100 80GB HBM3") is None and peaks.mig_slice("AMD Instinct MI300X VF") is None


# ---- the device in use -------------------------------------------------------------------------------------

CPU_INFO = DeviceInfo("cpu", "test CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), cores=4, clock_ghz=3.0)
H100_INFO = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * 2**30, compute_capability=(9, 0))


def test_device_peak_reads_the_table_for_cuda_and_estimates_the_cpu():
    assert device_peak_flops(H100_INFO, "bf16") == pytest.approx(989.4e12)
    assert device_peak_flops(CPU_INFO, "float32") == pytest.approx(4 * 3.0e9 * 32)


def test_device_peak_override_beats_table_and_environment(monkeypatch):
    monkeypatch.setenv(PEAK_TFLOPS_ENV, "700")
    assert device_peak_flops(H100_INFO, "bf16") == pytest.approx(700e12)
    assert device_peak_flops(H100_INFO, "bf16", override_tflops=650) == pytest.approx(650e12)
    monkeypatch.setenv(PEAK_TFLOPS_ENV, "-1")
    with pytest.raises(AccountingError, match=r"^\$ACCOUNTING_PEAK_TFLOPS must be a positive number of TFLOP/s, got '-1'"):
        device_peak_flops(H100_INFO, "bf16")


def test_device_peak_has_no_cpu_tf32(monkeypatch):
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    with pytest.warns(PeakUnknownWarning, match=r"^tf32 is a CUDA tensor-core mode; a CPU has no tf32 matmul units, so no tf32 peak"):
        assert device_peak_flops(CPU_INFO, "tf32") is None


def test_device_peak_rejects_a_non_device_info():
    with pytest.raises(AccountingTypeError, match=r"^info must be a DeviceInfo"):
        device_peak_flops("cpu", "float32")


def test_device_peak_of_a_gpu_passes_sparsity_and_the_rocm_arch_on(monkeypatch):
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    # H100 SXM datasheet: BF16 1979 TFLOP/s with sparsity, 989.4 dense (reference table).
    assert device_peak_flops(H100_INFO, "bf16", sparse=True) == pytest.approx(1978.8e12)
    # A gfx942 whose driver prints no model number is the MI300X row: BF16 1307.4 dense (AMD datasheet).
    radeon = DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, arch="gfx942:sramecc+:xnack-")
    assert device_peak_flops(radeon, "bf16") == pytest.approx(1307.4e12)


@pytest.mark.parametrize("override, error, message", [
    pytest.param(-1, AccountingError, r"^override_tflops must be positive, got -1$", id="negative"),
    pytest.param("700", AccountingTypeError, r"^override_tflops must be a real number, got '700'$", id="string"),
])
def test_a_bad_peak_override_is_named(override, error, message):
    with pytest.raises(error, match=message):
        device_peak_flops(H100_INFO, "bf16", override_tflops=override)


def test_the_environment_override_may_carry_spaces(monkeypatch):
    monkeypatch.setenv(PEAK_TFLOPS_ENV, " 312 \n")
    assert device_peak_flops(CPU_INFO, "float32") == pytest.approx(312e12)
    monkeypatch.setenv(PEAK_TFLOPS_ENV, "   ")  # blank: no override, the estimate
    assert device_peak_flops(CPU_INFO, "float32") == pytest.approx(4 * 3.0e9 * 32)


# AMD CDNA 3 white paper: 256 MB Infinity Cache behind the 4 MB L2 of each XCD (the L2 torch reports).
INFINITY_CACHE_BYTES = 256 * 2**20


@pytest.mark.parametrize("info, expected", [
    pytest.param(DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, l2_cache_bytes=4 * 2**20, arch="gfx942"),
                 INFINITY_CACHE_BYTES, id="mi300x-known-only-by-arch"),
    pytest.param(DeviceInfo("cuda", "NVIDIA L40", 0, 2**30, l2_cache_bytes=96 * 2**20), 96 * 2**20,
                 id="unknown-chip-its-reported-l2"),
    pytest.param(DeviceInfo("cuda", "NVIDIA L40", 0, 2**30), devices.UNREPORTED_CACHE_BYTES,
                 id="nothing-reported-the-assumed-size"),
    pytest.param(CPU_INFO, 0, id="cpu-no-device-cache"),
])
def test_last_level_cache_is_the_largest_known_cache(info, expected):
    assert peaks.last_level_cache_bytes(info) == expected


@pytest.mark.parametrize("function", [peaks.last_level_cache_bytes, chip_row])
def test_cache_and_row_lookups_reject_a_name_in_place_of_a_device_info(function):
    with pytest.raises(AccountingTypeError, match=r"^info must be a DeviceInfo \(see detect_device\), got 'NVIDIA L4'$"):
        function("NVIDIA L4")


@pytest.mark.parametrize("info, dtype", [
    pytest.param(CPU_INFO, "fp8", id="a-dtype-no-cpu-runs"),
    pytest.param(DeviceInfo("cpu", "test CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), cores=4), "float32", id="no-cpu-clock"),
])
def test_an_unknown_device_peak_warns_at_the_callers_line(info, dtype, monkeypatch):
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    with pytest.warns(PeakUnknownWarning) as record:
        assert device_peak_flops(info, dtype) is None
    if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut calls through a trampoline: one frame more
        assert [warning.filename for warning in record] == [__file__]
