"""Dense FLOP per clock per SM of NVIDIA GPUs, and the physical ceiling it puts on any measured figure.

A GPU cannot do more work per second than its SMs × the FLOPs each SM retires per clock ×
the clock it ran at. A measured figure above that ceiling (with ``PHYSICAL_MARGIN`` for a clock
read a moment away from the work) says its clock was read outside the timed window, or that the
timer is wrong; either way the figure and its clock cannot both be true.

The table is by compute capability and peak column (:func:`accounting.hardware.dtypes.peak_column`);
FLOPs = 2 per multiply-add. Each entry is the dense (no 2:4 sparsity) rate, derived from the vendor's
dense peak ÷ (SMs × the clock the peak is quoted at); ``tests/test_hardware_flops_per_clock.py``
checks every entry against the datasheet peaks in :mod:`accounting.hardware.peaks` and each part's SM
count and maximum clock. Sources: NVIDIA A100, H100 and Ada (L4, L40S) whitepapers and datasheets; the
A10 datasheet. ``float32`` is the CUDA cores' FP32 FMA (no tensor cores); ``tf32`` the tensor cores'
float32 mode. An architecture or dtype not in the table is not checked (the check says so).

The table is NVIDIA's: torch on ROCm fills a GPU's compute capability with its gfx version's digits (gfx90a,
MI210 and MI250X, reads (9, 0) as Hopper does; gfx942, MI300X, (9, 4)), so a device's capability is looked up
only for an NVIDIA GPU (:func:`nvidia_capability`); an AMD GPU's figures are not checked, and the check says so.

A figure is judged at the highest clock its window read (:func:`highest_clock_mhz`): the clock the work ran at is
at most that, and a lower reading (the median of a few, one of them an edge before the work) can call a figure
impossible that the SMs gave.

>>> round(dense_flops_per_s((9, 0), "bf16", multiprocessors=132, clock_mhz=1830.0) / 1e12, 1)
989.4
>>> physical_check(793.1e12, (9, 0), "bfloat16", multiprocessors=132, clock_mhz=1350.0)  # doctest: +ELLIPSIS
'impossible: 793.1 TFLOP/s > 132 SMs × 4096 FLOP/clock × 1350 MHz × 1.02 = 744.5 TFLOP/s: ...'
>>> print(physical_check(685.0e12, (9, 0), "bfloat16", multiprocessors=132, clock_mhz=1455.0))
None
"""

from accounting.hardware.devices import DeviceInfo
from accounting.hardware.dtypes import dtype_name, peak_column
from accounting.hardware.native import rocm_arch

IMPOSSIBLE = "impossible"
"""The name a figure that fails the physical check is tagged and flagged with (``"impossible: <why>"``)."""
PHYSICAL_MARGIN = 1.02
"""A figure may exceed SMs × FLOP/clock × clock by this factor (a clock sampled between its steps) and pass."""

FLOPS_PER_CLOCK_PER_SM = {
    # Ampere GA100 (A100): 4 third-generation tensor cores per SM, 256 FP16 FMA/clock each; TF32 half;
    # 64 FP32 cores (128 FLOP/clock). No FP8.
    (8, 0): {"bfloat16": 2048, "float16": 2048, "tf32": 1024, "float32": 128},
    # Ampere GA10x (A10, A40, RTX 30): tensor cores of half GA100's rate; 128 FP32 cores. GeForce parts run
    # FP16 with FP32 accumulation at half this: the table is the ceiling, the highest of the architecture.
    (8, 6): {"bfloat16": 1024, "float16": 1024, "tf32": 512, "float32": 256},
    # Ada (L4, L40S, RTX 40): as GA10x, plus FP8 at twice FP16.
    (8, 9): {"bfloat16": 1024, "float16": 1024, "tf32": 512, "fp8": 2048, "float32": 256},
    # Hopper (H100, H200, GH200): 4 fourth-generation tensor cores per SM, 512 FP16 FMA/clock each; TF32 half,
    # FP8 double; 128 FP32 cores (256 FLOP/clock).
    (9, 0): {"bfloat16": 4096, "float16": 4096, "tf32": 2048, "fp8": 8192, "float32": 256},
}
"""Dense FLOP per clock per SM of NVIDIA GPUs, by compute capability and peak column."""


def nvidia_capability(info: DeviceInfo) -> tuple[int, int] | None:
    """The compute capability the table is read by for ``info``'s device: an NVIDIA GPU's, ``None`` for anything else
    (a CPU, an AMD GPU whose gfx version torch reports in the same fields).

    >>> h200 = DeviceInfo("cuda", "NVIDIA H200", 0, 2**37, compute_capability=(9, 0), runtime="CUDA 13.0")
    >>> mi250x = DeviceInfo("cuda", "AMD Instinct MI250X/MI250", 0, 2**36, compute_capability=(9, 0), arch="gfx90a")
    >>> nvidia_capability(h200), nvidia_capability(mi250x)
    ((9, 0), None)
    """
    if info.kind != "cuda" or _rocm(info):
        return None
    return info.compute_capability


def _rocm(info: DeviceInfo) -> bool:
    """Whether ``info`` is a ROCm GPU: a gfx arch, or a ROCm runtime (where torch gave no arch name)."""
    return rocm_arch(info) is not None or (info.runtime or "").startswith("ROCm")


def other_vendor_note(info: DeviceInfo) -> str | None:
    """Why an AMD GPU's figures are not checked (``None`` for any other device).

    >>> mi300x = DeviceInfo("cuda", "AMD Instinct MI300X", 0, 2**37, compute_capability=(9, 4), arch="gfx942:xnack-")
    >>> print(other_vendor_note(mi300x))
    physical check not made: no FLOP/clock table for AMD GPUs (gfx942; its compute capability 9.4 is not NVIDIA's)
    """
    if info.kind != "cuda" or not _rocm(info):
        return None
    capability = "" if info.compute_capability is None else (
        f"; its compute capability {'.'.join(str(part) for part in info.compute_capability)} is not NVIDIA's")
    return f"physical check not made: no FLOP/clock table for AMD GPUs ({rocm_arch(info) or info.runtime}{capability})"


def highest_clock_mhz(summary) -> float | None:
    """The clock a physical check reads a window's figure against: the highest its readings saw (``None``: no reading).

    ``summary``: a telemetry window (``accounting.telemetry.Summary`` or its ``to_dict()``). The work ran at most at
    that clock, so a figure above the ceiling there is impossible. The median of a few readings is no such bound:
    one low reading taken before the work (the shape before, an idle edge) moves it below the clock the work ran at.

    >>> highest_clock_mhz({"clock_mhz_median": 1400.0, "clock_mhz_max": 1900.0}), highest_clock_mhz(None)
    (1900.0, None)
    """
    if summary is None:
        return None
    return summary.get("clock_mhz_max") if isinstance(summary, dict) else getattr(summary, "clock_mhz_max", None)


def flops_per_clock_per_sm(compute_capability, dtype) -> int | None:
    """Dense FLOP per clock per SM of ``dtype`` on a GPU of ``compute_capability``; ``None`` when not in the table.

    >>> flops_per_clock_per_sm((9, 0), "float8_e4m3fn"), flops_per_clock_per_sm([8, 0], "tf32")
    (8192, 1024)
    >>> print(flops_per_clock_per_sm((10, 0), "bfloat16"))
    None
    """
    if compute_capability is None:
        return None
    rates = FLOPS_PER_CLOCK_PER_SM.get(tuple(int(part) for part in compute_capability))
    return None if rates is None else rates.get(peak_column(dtype))


def dense_flops_per_s(compute_capability, dtype, *, multiprocessors: int, clock_mhz: float) -> float | None:
    """SMs × dense FLOP per clock per SM × clock: what the GPU can do at ``clock_mhz`` (``None``: not in the table)."""
    rate = flops_per_clock_per_sm(compute_capability, dtype)
    if rate is None or not multiprocessors or not clock_mhz:
        return None
    return multiprocessors * rate * clock_mhz * 1e6


def physical_check(flops_per_s: float, compute_capability, dtype, *, multiprocessors: int | None,
                   clock_mhz: float | None) -> str | None:
    """``None`` when ``flops_per_s`` is at most ``PHYSICAL_MARGIN`` × the ceiling at ``clock_mhz``, else why not.

    Unknown parts (no SM count, no clock, no table entry) pass: the check cannot be made, and a figure is
    not refused for what is not known.
    """
    rate = flops_per_clock_per_sm(compute_capability, dtype)
    ceiling = dense_flops_per_s(compute_capability, dtype, multiprocessors=multiprocessors or 0,
                                clock_mhz=clock_mhz or 0.0)
    if ceiling is None or flops_per_s <= PHYSICAL_MARGIN * ceiling:
        return None
    return (f"{IMPOSSIBLE}: {flops_per_s / 1e12:.1f} TFLOP/s > {multiprocessors} SMs × {rate} FLOP/clock × "
            f"{clock_mhz:.0f} MHz × {PHYSICAL_MARGIN} = {PHYSICAL_MARGIN * ceiling / 1e12:.1f} TFLOP/s: the clock "
            "was read outside the timed work, or the timer is wrong")


def physical_check_note(compute_capability, dtype, *, multiprocessors: int | None) -> str | None:
    """Why :func:`physical_check` cannot judge figures of ``dtype`` on this GPU (``None`` when it can).

    >>> physical_check_note((10, 0), "bf16", multiprocessors=148)
    'physical check not made: no dense FLOP/clock/SM for bfloat16 on compute capability 10.0'
    """
    if not multiprocessors:
        return "physical check not made: the device reports no SM count"
    if flops_per_clock_per_sm(compute_capability, dtype) is None:
        where = "this device" if compute_capability is None else (
            "compute capability " + ".".join(str(part) for part in compute_capability))
        return f"physical check not made: no dense FLOP/clock/SM for {dtype_name(dtype)} on {where}"
    return None


def physical_check_record(info, dtype, flops_per_s: float | None, clock_mhz: float | None) -> dict:
    """The physical check of a benchmark's figure as ``extra_info`` keeps it: ``ok`` (``None``: not made),
    ``reason`` (why it failed, or why it was not made), ``clock_mhz`` (the clock it was judged at: the highest of
    the window the figure was timed in, :func:`highest_clock_mhz`) and the ceiling at that clock.

    ``info``: the :class:`~accounting.hardware.devices.DeviceInfo` of the timed device.

    >>> h200 = DeviceInfo("cuda", "NVIDIA H200", 0, 2**37, compute_capability=(9, 0), multiprocessors=132)
    >>> physical_check_record(h200, "bf16", 726e12, 1980.0)["ok"], physical_check_record(h200, "bf16", 793e12, 1350.0)["ok"]
    (True, False)
    >>> physical_check_record(DeviceInfo("cpu", "a CPU", None, 2**30), "float32", 1e11, None)["ok"] is None
    True
    """
    capability = nvidia_capability(info)
    if info.kind != "cuda":
        note = "physical check not made: not a GPU"
    else:
        note = other_vendor_note(info) or physical_check_note(capability, dtype, multiprocessors=info.multiprocessors)
    if note is None and not flops_per_s:
        note = "physical check not made: no figure"
    if note is None and not clock_mhz:
        note = "physical check not made: no clock reading in the window"
    if note is not None:
        return {"ok": None, "reason": note, "clock_mhz": clock_mhz, "ceiling_flops_per_s": None}
    ceiling = dense_flops_per_s(capability, dtype, multiprocessors=info.multiprocessors, clock_mhz=clock_mhz)
    why = physical_check(flops_per_s, capability, dtype, multiprocessors=info.multiprocessors, clock_mhz=clock_mhz)
    return {"ok": why is None, "reason": why, "clock_mhz": clock_mhz, "ceiling_flops_per_s": ceiling}
