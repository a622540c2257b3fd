"""Facts about this machine's CPU, read from the system: ISA flags, vendor, model, physical cores, memory.

ISA flags come from ``/proc/cpuinfo`` joined with what torch's CPUID probe reports
(``torch.cpu.get_capabilities()``): a VM's kernel may not list every flag the CPU has
(a KVM guest may list no ``amx_fp16`` that oneDNN nonetheless uses). Physical cores come
from the ``physical id``/``core id`` lines of the CPUs this process may run on.

>>> parse_cpuinfo("processor : 0\\nflags : fma avx2\\n")[0]["flags"]
'fma avx2'
>>> physical_cores() >= 1 and cpu_memory_bytes() > 0
True
"""

import functools
import os
import platform
import re
from pathlib import Path

import torch

PROC_CPUINFO = Path("/proc/cpuinfo")
_PROC_MEMINFO = Path("/proc/meminfo")

# torch.cpu.get_capabilities() spells some flags differently from /proc/cpuinfo.
_TORCH_FLAG_NAMES = {
    "fma3": "fma",
    "avx512_f": "avx512f",
    "avx512_bw": "avx512bw",
    "avx512_cd": "avx512cd",
    "avx512_dq": "avx512dq",
    "avx512_vl": "avx512vl",
    "avx512_ifma": "avx512ifma",
    "avx512_vbmi": "avx512vbmi",
}



def read_text(path: Path) -> str | None:
    """The text of ``path``, or ``None`` where it cannot be read (a missing ``/proc`` or ``/sys`` file)."""
    try:
        return path.read_text()
    except OSError:
        return None


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """Split ``/proc/cpuinfo`` text into one ``{field: value}`` dict per logical CPU.

    >>> parse_cpuinfo("processor : 0\\ncpu MHz : 2700.000\\n\\nprocessor : 1\\n")[0]["cpu MHz"]
    '2700.000'
    """
    blocks = []
    for chunk in text.strip().split("\n\n"):
        fields = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if fields:
            blocks.append(fields)
    return blocks


def cpuinfo_blocks() -> list[dict[str, str]]:
    return _parsed_cpuinfo(PROC_CPUINFO)


@functools.cache
def _parsed_cpuinfo(path: Path) -> list[dict[str, str]]:
    """``/proc/cpuinfo`` read and parsed once per process (keyed by path, so tests can point elsewhere)."""
    text = read_text(path)
    return parse_cpuinfo(text) if text else []


@functools.cache
def _torch_cpu_capabilities() -> dict:
    """torch's CPUID probe, asked once per process (``{}`` on a torch without it)."""
    try:
        return dict(torch.cpu.get_capabilities())
    except (AttributeError, RuntimeError):  # older torch
        return {}


def cpu_flags() -> frozenset[str]:
    """ISA flags of this CPU, in ``/proc/cpuinfo`` spelling (``avx512f``, ``amx_bf16``, ...).

    The union of the kernel's list and torch's own CPUID probe.
    """
    flags = set()
    for block in cpuinfo_blocks()[:1]:
        flags.update(block.get("flags", "").split())
    for name, present in _torch_cpu_capabilities().items():
        if present is True:
            flags.add(_TORCH_FLAG_NAMES.get(name, name))
    return frozenset(flags)


def cpu_vendor() -> str | None:
    """``"intel"``, ``"amd"`` or ``None`` (unknown), from ``vendor_id``."""
    blocks = cpuinfo_blocks()
    vendor = blocks[0].get("vendor_id", "") if blocks else ""
    return {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(vendor)


def cpu_model_name() -> str:
    """The CPU's model string (``model name`` in ``/proc/cpuinfo``), or the platform's guess."""
    blocks = cpuinfo_blocks()
    if blocks and blocks[0].get("model name"):
        return blocks[0]["model name"]
    return platform.processor() or platform.machine() or "unknown CPU"


def physical_cores() -> int:
    """Physical cores this process may run on (SMT siblings counted once).

    From the ``physical id``/``core id`` of the CPUs in this process's affinity mask;
    falls back to torch's probe, then to ``os.cpu_count()``.
    """
    blocks = cpuinfo_blocks()
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = set()
    for block in blocks:
        if "core id" not in block:
            cores = set()
            break
        if allowed is not None and int(block.get("processor", -1)) not in allowed:
            continue
        cores.add((block.get("physical id", "0"), block["core id"]))
    if cores:
        return len(cores)
    count = _torch_cpu_capabilities().get("num_physical_cores")
    return int(count or os.cpu_count() or 1)



def cpu_memory_bytes() -> int:
    text = read_text(_PROC_MEMINFO) or ""
    match = re.search(r"^MemTotal:\s+(\d+)\s+kB", text, re.MULTILINE)
    if match:
        return int(match.group(1)) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cpu_available_bytes() -> int:
    text = read_text(_PROC_MEMINFO) or ""
    match = re.search(r"^MemAvailable:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else cpu_memory_bytes()
