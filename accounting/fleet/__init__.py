"""``accounting fleet``: validate every device of a node and every node of a cluster, on torch.distributed.

Start one process per device with ``torchrun`` (``torchrun --standalone --nproc-per-node=gpu
-m accounting fleet``); without it the command runs as a world of one and says how to launch more.

One module per job:

- :mod:`~accounting.fleet.launch` — the launcher's environment, the device and CPU share, the process groups.
- :mod:`~accounting.fleet.identity` — host, device, UUID, PCI bus id, driver and versions of a rank.
- :mod:`~accounting.fleet.measure` — the rank's own device, measured by the report's code.
- :mod:`~accounting.fleet.collectives` — all_reduce, all_gather, reduce_scatter, broadcast timed as nccl-tests does.
- :mod:`~accounting.fleet.agreement` — the device probe, and the gloo agreement on who may enter the next NCCL call.
- :mod:`~accounting.fleet.thresholds` — ``--min-busbw`` per scope and collective, and benchmarks.json's presets.
- :mod:`~accounting.fleet.scopes` — world, intra-node and inter-node groups.
- :mod:`~accounting.fleet.gather` — barriers that name hung ranks; the records brought to rank 0.
- :mod:`~accounting.fleet.verdict` — stragglers, drift, slow or wrong collectives, failed and hung ranks.
- :mod:`~accounting.fleet.health` — each device healthy, degraded or failed, rolled up per node and for the fleet.
- :mod:`~accounting.fleet.levels` — ``--level quick|standard|long``: what each rank and the ranks together run.
- :mod:`~accounting.fleet.results`, :mod:`~accounting.fleet.render`, :mod:`~accounting.fleet.plot` — JSON, text, PNG.
- :mod:`~accounting.fleet.throttle` — a deliberate straggler (``--slow-rank``).
- :mod:`~accounting.fleet.run` and :mod:`~accounting.fleet.cli` — one rank from start to exit status.
"""
