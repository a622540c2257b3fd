"""Who a rank is: host, device, and the versions that must agree across a fleet.

The fields compared for configuration drift are :data:`DRIFT_FIELDS`; the rest
(UUID, PCI bus id, CPUs) say which physical device a figure belongs to.

>>> from accounting.hardware.devices import detect_device
>>> me = identify(detect_device("cpu"), rank=0, local_rank=0, cpus=[0])
>>> me["kind"], me["rank"], me["uuid"], me["torch"] == torch.__version__
('cpu', 0, None, True)
"""

import os
import socket

import torch

from accounting.hardware.devices import DeviceInfo, cuda_uuid_and_bus_id

DRIFT_FIELDS = ("name", "driver", "runtime", "torch")
"""Device model, GPU driver, CUDA/ROCm runtime and torch version: a rank differing from the majority in
any of them is flagged (one node on another driver or torch build is a classic cause of a slow or failing job)."""


def identify(info: DeviceInfo, *, rank: int, local_rank: int, cpus=None, host: str | None = None) -> dict:
    """This rank's identity as plain JSON values (``None`` where a field does not apply or is unknown)."""
    uuid, bus_id = cuda_uuid_and_bus_id(info.device) if info.kind == "cuda" else (None, None)
    capability = info.compute_capability
    return {
        "rank": rank,
        "local_rank": local_rank,
        "host": host or socket.gethostname(),
        "pid": os.getpid(),
        "device": str(info.device),
        "kind": info.kind,
        "name": info.name,
        "uuid": uuid,
        "pci_bus_id": bus_id,
        "driver": info.driver,
        "runtime": info.runtime,
        "torch": torch.__version__,
        "compute_capability": None if capability is None else ".".join(map(str, capability)),
        "memory_bytes": info.memory_bytes,
        "cores": info.cores,
        "clock_ghz": info.clock_ghz,
        "clock_source": info.clock_source,
        "cpus": None if cpus is None else list(cpus),
    }
