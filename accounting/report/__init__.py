"""``accounting report``: how fast this machine's matmuls and memory really are, and whether that is healthy.

One module per job:

- :mod:`~accounting.report.cli` — arguments and their one-line errors, output files, exit status.
- :mod:`~accounting.report.run` — the plan (device, dtypes, peaks, floors) and the budgeted run.
- :mod:`~accounting.report.report_plan` — the plan and its choices in words.
- :mod:`~accounting.report.assembly` — the document from the plan and what was measured.
- :mod:`~accounting.report.sweep` — the budgeted search for the most matmul FLOP/s.
- :mod:`~accounting.report.measure` — timing products and a large copy on the device.
- :mod:`~accounting.report.headlines` — burst and sustained figures per dtype, each at its window's clock and power.
- :mod:`~accounting.report.headline_device` — what the headline phase needs from a device (timed windows).
- :mod:`~accounting.report.thermal_soak` — the soak before the sustained figures, until the clock is flat.
- :mod:`~accounting.report.saturation` — whether a window may be published as sustained (seconds long, saturated).
- :mod:`~accounting.report.accumulation` — an fp8 figure's accumulation (fast or default), named everywhere.
- :mod:`~accounting.report.roofline` — arithmetic intensity, ridge point, compute- or memory-bound.
- :mod:`~accounting.report.verdict` — healthy or not, per dtype, against the floors.
- :mod:`~accounting.report.results` — the JSON document every other output is drawn from.
- :mod:`~accounting.report.render` and :mod:`~accounting.report.plot` — the terminal table and the PNG.
- :mod:`~accounting.report.progress` — the progress bar on stderr.

Run it with ``python -m accounting report`` (or the ``accounting report`` console script).
"""
