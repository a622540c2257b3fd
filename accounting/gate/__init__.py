"""The regression gate: does this run's benchmark suite run slower than the saved history says it should?

``python -m accounting gate`` (or the ``accounting gate`` console script) compares the
current pytest-benchmark runs with the last K saved runs of the same hardware and decides
each benchmark: **regression**, **no change**, **improvement** or **inconclusive**. It
fails (exit status 1) only on a regression it is sure of — slower beyond doubt *and* by
more than ``regression.threshold_percent`` in ``benchmarks.json`` — and re-measures
inconclusive benchmarks in fresh processes, a bounded number of times, before deciding.

One module per job:

- :mod:`~accounting.gate.stats` — the two-sample tests (permutation test over runs, t interval) and the verdict;
- :mod:`~accounting.gate.levels` — the significance level, the interval's confidence and the resampling settings;
- :mod:`~accounting.gate.multiple` — the matrix's adjustment (Holm; min-P over a joint permutation of the runs);
- :mod:`~accounting.gate.power` — what a verdict could have seen: power and the smallest detectable slowdown;
- :mod:`~accounting.gate.storage` — pytest-benchmark's saved runs, read and checked;
- :mod:`~accounting.gate.guard` — the load guard (was a run measured on a quiet machine?);
- :mod:`~accounting.gate.gpu_rounds` — on a GPU, disturbance judged from each benchmark's timed rounds (clock,
  power, throttle reasons against the baseline's), and the clock beside the time;
- :mod:`~accounting.gate.settings` — a GPU's power limit and application clocks, compared exactly;
- :mod:`~accounting.gate.device_events` — new ECC errors and Xid events during a GPU run;
- :mod:`~accounting.gate.gpu_noise` — what a GPU gate can detect, modelled from recorded runs;
- :mod:`~accounting.gate.decide` — the verdict on a whole matrix;
- :mod:`~accounting.gate.render` — the table, as text and as Markdown;
- :mod:`~accounting.gate.plot` — the history of each benchmark as a PNG;
- :mod:`~accounting.gate.measure` — running pytest: baselines, current runs, re-measurements;
- :mod:`~accounting.gate.ab` — interleaved A/B: the base revision and this one in alternating processes;
- :mod:`~accounting.gate.sequential` — ab's sequential test: bets on the pairs' log ratios, an always-valid p and
  interval, a closed test across the matrix;
- :mod:`~accounting.gate.budget` — the time budget: parsing it, predicting the next round, the plan;
- :mod:`~accounting.gate.changepoints` — the change points of one benchmark's run series (binary segmentation,
  each split permutation-tested; numpy only);
- :mod:`~accounting.gate.history` — the saved history per benchmark: its change points and the runs that started them;
- :mod:`~accounting.gate.cli` — ``accounting gate save|check|compare|ab``, and the ``history`` action's place;
- :mod:`~accounting.gate.cli_history` — ``accounting gate history``'s options and run;
- :mod:`~studies.gate_error_rates` — the gate's own false-alarm and detection rates, measured;
- :mod:`~studies.gate_power_table` — the A/B gate's power table, predicted from the noise model;
- :mod:`~studies.gate_change_points` — how well ``history`` finds steps in synthetic histories, beside ruptures,
  and the most often any method can place a step (the Bayes bound);
- :mod:`~studies.gate_replayed_history` — steps planted in this host's own kept run values.
"""
