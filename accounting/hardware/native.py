"""Whether a device runs a dtype's matmul natively, and if not, why: the package's one rule.

The report's default dtypes, the pytest benchmarks' skips, ``benchmarks.json``
validation, :func:`accounting.timing.matmul_case` and the pytest plugin's GPU skip all
ask :func:`native_matmul`; none of them decides by itself.

- **CPU**: from the ISA flags and vendor the CPU peak estimate reads
  (:func:`accounting.hardware.cpu_peak.cpu_matmul_path`): bfloat16 is native with AMX-BF16 or
  AVX512-BF16 (Sapphire Rapids, Cooper Lake, Zen 4), float16 with AMX-FP16 or
  AVX512-FP16; without them (Zen 2/3 with AVX2 only, Skylake/Cascade Lake with
  AVX-512 but no BF16) torch emulates them through float32 at a small fraction of the
  float32 rate. float32 and float64 always run natively. No CPU has TF32 (a CUDA
  tensor-core mode: torch refuses nothing, it would simply run float32) or FP8 units
  (torch's CPU ``_scaled_mm`` converts to float32: it runs, emulated).
- **NVIDIA**: TF32 needs compute capability 8.0 (Ampere) or later — before that a
  float32 matmul with TF32 allowed runs as plain FP32. FP8 (``torch._scaled_mm``) needs
  8.9 (Ada) or 9.0+, the bound of torch's ``_scaled_mm_allowed_device``
  (aten/src/ATen/native/cuda/Blas.cpp, ScaledBlas.cpp in later releases), in the OCP
  formats ``float8_e4m3fn``/``float8_e5m2``.
- **ROCm** (an ``arch`` starting ``gfx``): torch's ``_scaled_mm`` runs on gfx942
  (MI300X/MI300A/MI325X) in the fnuz formats only (``_scaled_mm_is_fnuz``; hipBLASLt
  "data type support": hipblaslt_f8_fnuz/bf8_fnuz on gfx942 only, the OCP f8/bf8 on
  gfx950 and gfx12), and on gfx950 and gfx1200/gfx1201 in the OCP formats, which torch
  accepts from ROCm 6.5 (its ``Float8_e4m3fn is only supported for ROCm 6.5`` check).
  TF32 (XF32) matrix units exist on gfx942 and gfx950 (MI300X / MI355X datasheets), but torch uses them
  only from 2.7, and 2.7 to 2.9 only with ``HIPBLASLT_ALLOW_TF32=1`` in the environment
  (:func:`accounting.hardware.precision.rocm_tf32_blocker`): otherwise "tf32" runs as plain FP32, and the
  answer says so and how to turn TF32 on. This is read from this process's torch and environment.

An fp8 dtype names the format family (e4m3 or e5m2); :attr:`NativeMatmul.runs_as` is
the variant the device runs (``float8_e4m3fnuz`` on an MI300X for ``"fp8"``).

>>> from accounting.hardware.devices import DeviceInfo
>>> zen3 = DeviceInfo("cpu", "AMD EPYC", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), vendor="amd")
>>> native_matmul(zen3, "float32").native, native_matmul(zen3, "bf16").emulated
(True, True)
>>> mi300x = DeviceInfo("cuda", "AMD Instinct MI300X", 0, 2**30, arch="gfx942:sramecc+:xnack-", runtime="ROCm 6.2")
>>> native_matmul(mi300x, "fp8").runs_as
'float8_e4m3fnuz'
"""

import re
from dataclasses import dataclass

import torch

from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.cpu_peak import cpu_matmul_path, cpu_native_paths
from accounting.hardware.devices import DeviceInfo
from accounting.hardware.dtypes import FP8, dtype_name, peak_column
from accounting.hardware.precision import rocm_tf32_blocker
from accounting.memory import TF32

FP8_MIN_CAPABILITY = (8, 9)
"""NVIDIA: torch._scaled_mm needs Ada (8.9) or Hopper (9.0) and later."""
TF32_MIN_CAPABILITY = (8, 0)
"""NVIDIA: TF32 tensor cores arrived with Ampere (8.0)."""

# fp8 format family -> the variant, per fp8 flavour a device supports.
_FP8_VARIANTS = {
    "ocp": {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"},
    "fnuz": {"e4m3": "float8_e4m3fnuz", "e5m2": "float8_e5m2fnuz"},
}
# ROCm arch -> (fp8 flavour, lowest ROCm version torch accepts it on). Source: torch's
# _scaled_mm_allowed_device / _scaled_mm_is_fnuz and its ROCm 6.5 check for the OCP formats.
_ROCM_FP8 = {"gfx942": ("fnuz", None), "gfx950": ("ocp", (6, 5)), "gfx1200": ("ocp", (6, 5)),
             "gfx1201": ("ocp", (6, 5))}
_ROCM_TF32_ARCHS = frozenset({"gfx942", "gfx950"})
_CPU_NEVER = {
    TF32: "tf32 is a CUDA tensor-core mode; a CPU has no tf32 matmul units",
    FP8: "a CPU has no fp8 matmul units",
}


@dataclass(frozen=True)
class NativeMatmul:
    """The answer for one device and dtype.

    - ``native``: the device has units for this dtype; its floors and peaks apply.
    - ``runs_as``: the torch dtype (or ``"tf32"``) that actually runs — the fp8 variant
      the device supports, ``"float32"`` for tf32 without TF32 units — or ``None`` when
      the device cannot run it at all.
    - ``emulated``: torch runs it only by converting through float32 (bf16 on an AVX2 CPU).
    - ``reason``: why it is not native (``None`` when it is).
    - ``path``: the ISA path or unit that runs it (``"AMX-BF16"``, ``"AVX2+FMA"``,
      ``"sm_90"``, ``"gfx942"``).
    """

    dtype: str
    native: bool
    runs_as: str | None
    emulated: bool = False
    reason: str | None = None
    path: str | None = None

    @property
    def runs(self) -> bool:
        """Whether the device can run the dtype at all (natively or not)."""
        return self.runs_as is not None

    @property
    def label(self) -> str:
        """One word or phrase for tables: ``native``, ``emulated``, ``runs as float32`` or ``cannot run``.

        >>> NativeMatmul("tf32", False, "float32", reason="no TF32 units").label
        'runs as float32'
        """
        if self.native:
            return "native"
        if self.runs_as is None:
            return "cannot run"
        return "emulated" if self.emulated else f"runs as {self.runs_as}"


def _fp8_family(name: str) -> str:
    return "e5m2" if name.startswith("float8_e5m2") else "e4m3"


def kind_reason(kind: str, dtype) -> str | None:
    """Why no device of ``kind`` (``"cpu"`` or ``"cuda"``) runs ``dtype`` natively; ``None`` when some do.

    The rule a device-independent setting (``benchmarks.json``'s ``cpu`` section) can
    ask; :func:`native_matmul` adds the device's own flags and capability.

    >>> kind_reason("cpu", "float8_e5m2"), kind_reason("cpu", "bf16"), kind_reason("cuda", "tf32")
    ('a CPU has no fp8 matmul units', None, None)
    """
    if kind not in ("cpu", "cuda"):
        raise AccountingError(f"kind must be 'cpu' or 'cuda', got {kind!r}")
    column = peak_column(dtype)
    return _CPU_NEVER.get(column) if kind == "cpu" else None


def _cpu(info: DeviceInfo, name: str) -> NativeMatmul:
    never = kind_reason("cpu", name)
    if never:
        # torch runs fp8 _scaled_mm on a CPU by converting to float32; tf32 it would run as plain float32.
        if name == TF32:
            return NativeMatmul(name, False, None, reason=never)
        return NativeMatmul(name, False, name, emulated=True, reason=never + "; torch emulates it through float32")
    path = cpu_matmul_path(name, info.cpu_flags or (), vendor=info.vendor)
    if path.native:
        return NativeMatmul(name, True, name, path=path.name)
    needs = " or ".join(cpu_native_paths(name))
    reason = (f"this CPU has no native {name} matmul path (that needs {needs}); "
              f"torch would emulate it through float32 on {path.name}")
    return NativeMatmul(name, False, name, emulated=True, reason=reason, path=f"{path.name} (via float32)")


def _rocm_version(runtime: str | None) -> tuple[int, int] | None:
    match = re.match(r"ROCm (\d+)\.(\d+)", runtime or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _rocm(info: DeviceInfo, arch: str, name: str) -> NativeMatmul:
    if name == TF32:
        if arch not in _ROCM_TF32_ARCHS:
            return NativeMatmul(name, False, "float32", path=arch,
                                reason=f"{arch} has no TF32 matrix units: float32 with TF32 allowed runs as plain FP32")
        blocker = rocm_tf32_blocker()  # what this torch does with TF32 on ROCm, whatever the units
        if blocker is not None:
            return NativeMatmul(name, False, "float32", path=arch, reason=blocker)
        return NativeMatmul(name, True, name, path=arch)
    if not name.startswith("float8"):
        return NativeMatmul(name, True, name, path=arch)
    supported = ", ".join(f"{gfx} ({flavour})" for gfx, (flavour, _) in _ROCM_FP8.items())
    if arch not in _ROCM_FP8:
        return NativeMatmul(name, False, None, path=arch,
                            reason=f"fp8 matmul (torch._scaled_mm) on ROCm runs on {supported}; {info.name} is {arch}")
    flavour, min_rocm = _ROCM_FP8[arch]
    version = _rocm_version(info.runtime)
    if min_rocm is not None and version is not None and version < min_rocm:
        need = ".".join(map(str, min_rocm))
        return NativeMatmul(name, False, None, path=arch,
                            reason=f"fp8 matmul (torch._scaled_mm) on {arch} needs ROCm >= {need}; this is {info.runtime}")
    return NativeMatmul(name, True, _FP8_VARIANTS[flavour][_fp8_family(name)], path=f"{arch} ({flavour} fp8)")


def _nvidia(info: DeviceInfo, name: str) -> NativeMatmul:
    capability = info.compute_capability
    sm = f"sm_{capability[0]}{capability[1]}" if capability else None
    need = {TF32: TF32_MIN_CAPABILITY}.get(name, FP8_MIN_CAPABILITY if name.startswith("float8") else None)
    if need is None:
        return NativeMatmul(name, True, name, path=sm)
    runs_as = "float32" if name == TF32 else None
    what = "tf32 (TF32 tensor cores)" if name == TF32 else "fp8 matmul (torch._scaled_mm)"
    if capability is None:
        return NativeMatmul(name, False, name, reason=f"{what} needs compute capability >= {need[0]}.{need[1]}; "
                                                      f"{info.name}'s is not known")
    if tuple(capability) < need:
        reason = f"{what} needs compute capability >= {need[0]}.{need[1]}; {info.name} is {capability[0]}.{capability[1]}"
        if name == TF32:
            reason += ": float32 with TF32 allowed runs as plain FP32"
        return NativeMatmul(name, False, runs_as, reason=reason, path=sm)
    if name.startswith("float8"):
        return NativeMatmul(name, True, _FP8_VARIANTS["ocp"][_fp8_family(name)], path=sm)
    return NativeMatmul(name, True, name, path=sm)


def rocm_arch(info: DeviceInfo) -> str | None:
    """The ROCm architecture of a GPU (``"gfx942"``, features dropped), or ``None`` for anything else.

    >>> rocm_arch(DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, arch="gfx942:sramecc+:xnack-"))
    'gfx942'
    """
    arch = (info.arch or "").split(":")[0].strip().lower()
    return arch if info.kind == "cuda" and arch.startswith("gfx") else None


def native_matmul(info: DeviceInfo, dtype) -> NativeMatmul:
    """Whether ``info``'s device runs ``dtype`` matmuls natively, what runs instead, and why (see the module doc).

    >>> from accounting.hardware.devices import DeviceInfo
    >>> v100 = DeviceInfo("cuda", "Tesla V100-SXM2-16GB", 0, 2**34, compute_capability=(7, 0))
    >>> answer = native_matmul(v100, "tf32")
    >>> answer.native, answer.runs_as, answer.reason
    (False, 'float32', 'tf32 (TF32 tensor cores) needs compute capability >= 8.0; Tesla V100-SXM2-16GB is 7.0: float32 with TF32 allowed runs as plain FP32')
    """
    if not isinstance(info, DeviceInfo):
        raise AccountingTypeError(f"info must be a DeviceInfo (see detect_device), got {info!r}")
    name = dtype_name(dtype)
    if info.kind == "cpu":
        return _cpu(info, name)
    if info.kind != "cuda":
        raise AccountingError(f"device kind must be 'cpu' or 'cuda', got {info.kind!r}")
    arch = rocm_arch(info)
    if arch is None and (info.runtime or "").startswith("ROCm"):
        arch = "an unknown arch"  # no gcnArchName: no fp8 or tf32 rule can be trusted
    if arch is not None:
        return _rocm(info, arch, name)
    return _nvidia(info, name)


def native_dtypes(info: DeviceInfo, dtypes) -> list[str]:
    """The ``dtypes`` (canonical names, order kept) that ``info``'s device runs natively.

    >>> from accounting.hardware.devices import DeviceInfo
    >>> zen4 = DeviceInfo("cpu", "AMD EPYC 9654", None, 2**30, cpu_flags=frozenset({"avx512f", "avx512_bf16"}),
    ...                   vendor="amd")
    >>> native_dtypes(zen4, ["float32", "bfloat16", "float16"])
    ['float32', 'bfloat16']
    """
    return [answer.dtype for answer in (native_matmul(info, dtype) for dtype in dtypes) if answer.native]


def fast_accumulation_honoured() -> bool:
    """Whether this torch build runs another fp8 kernel for ``_scaled_mm(..., use_fast_accum=True)``: CUDA builds do;
    ROCm builds (``torch.version.hip`` set) ignore the flag, since torch's ``scaled_gemm`` sets cuBLASLt's
    fast-accumulation attribute only outside ROCm (``#ifndef USE_ROCM``), so hipBLASLt runs one product either way.

    >>> fast_accumulation_honoured() == (torch.version.hip is None)
    True
    """
    return getattr(torch.version, "hip", None) is None
