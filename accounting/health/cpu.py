"""CPU health counters on Linux: memory-controller errors (EDAC) and machine-check exceptions.

- EDAC (``/sys/devices/system/edac/mc/mc*/ce_count`` and ``ue_count``): correctable and
  uncorrectable errors per memory controller since boot (or since ``reset_counters``), summed.
  Absent where no EDAC driver is loaded, and in most VMs.
- Machine checks: the ``MCE:`` line of ``/proc/interrupts`` (machine-check exceptions, per CPU,
  summed; x86 only). Its ``MCP:`` line counts the kernel's periodic polls, not errors, and
  ``/sys/devices/system/machinecheck`` holds bank settings, not counts: neither is read.

``root`` stands for ``/`` so tests read a fake tree.

>>> read_cpu(root="/nonexistent").value(EDAC_CORRECTED) is None
True
"""

import socket
from pathlib import Path

from accounting.health.counters import (
    EDAC_CORRECTED,
    EDAC_UNCORRECTED,
    MACHINE_CHECKS,
    Counter,
    DeviceId,
    Snapshot,
    snapshot,
)

EDAC_DIR = "sys/devices/system/edac/mc"
INTERRUPTS = "proc/interrupts"


def _edac(root: Path) -> dict:
    controllers = sorted((root / EDAC_DIR).glob("mc[0-9]*"))
    where = f"/{EDAC_DIR}"
    if not controllers:
        reason = f"no EDAC memory controller under {where} (no EDAC driver loaded, or a VM)"
        return {EDAC_CORRECTED: Counter.missing(reason), EDAC_UNCORRECTED: Counter.missing(reason)}
    out = {}
    for name, file in ((EDAC_CORRECTED, "ce_count"), (EDAC_UNCORRECTED, "ue_count")):
        total = 0
        for controller in controllers:
            try:
                total += int((controller / file).read_text().strip())
            except (OSError, ValueError) as error:
                out[name] = Counter.missing(f"{where}/{controller.name}/{file} unreadable: {error}")
                break
        else:
            out[name] = Counter.of(total)
    return out


def _machine_checks(root: Path) -> Counter:
    path = root / INTERRUPTS
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        return Counter.missing(f"/{INTERRUPTS} unreadable: {error}")
    for line in lines:
        label, _, rest = line.strip().partition(":")
        if label == "MCE":
            counts = []
            for word in rest.split():
                if not word.isdigit():
                    break  # the per-CPU counts end where the description starts
                counts.append(int(word))
            return Counter.of(sum(counts))
    return Counter.missing(f"no MCE line in /{INTERRUPTS} (not an x86 kernel with machine-check support)")


def read_cpu(*, root="/") -> Snapshot:
    """The host's EDAC counts and machine-check exceptions, never raising."""
    root = Path(root)
    counters = _edac(root)
    counters[MACHINE_CHECKS] = _machine_checks(root)
    return snapshot(DeviceId("cpu", host=socket.gethostname()), counters)

