"""The device seam: everything that differs between a CPU and a CUDA (or ROCm) device, and what each can do.

Modules, each building only on the ones before it:

- :mod:`~accounting.hardware.environment` — the variables a user overrides the peak and the clock with;
- :mod:`~accounting.hardware.dtypes` — matmul dtype names as the peak tables read them;
- :mod:`~accounting.hardware.cpu_facts` — the CPU's ISA flags, vendor, model, cores, memory;
- :mod:`~accounting.hardware.cpu_paths` — FLOPs per cycle of a CPU's best matmul path for a dtype;
- :mod:`~accounting.hardware.vector_clock` — the CPU clock with every FMA unit busy, measured;
- :mod:`~accounting.hardware.cpu_clock` — the clock the CPU peak uses, and the clock under scalar load;
- :mod:`~accounting.hardware.devices` — which device is in use (:class:`DeviceInfo`, ``detect_device``);
- :mod:`~accounting.hardware.clocks` — waiting for a device and the clock that times it;
- :mod:`~accounting.hardware.precision` — TF32 flags, and a block that sets them;
- :mod:`~accounting.hardware.cpu_peak` — a CPU's estimated peak FLOP/s;
- :mod:`~accounting.hardware.native` — whether a device runs a dtype's matmul natively;
- :mod:`~accounting.hardware.peaks` — published GPU peaks, and the one lookup for a detected device;
- :mod:`~accounting.hardware.flops_per_clock` — dense FLOP per clock per SM, and the physical ceiling of a figure.

>>> from accounting.hardware.peaks import peak_flops
>>> peak_flops("NVIDIA H100 80GB HBM3", "bf16") / 1e12
989.4
"""
