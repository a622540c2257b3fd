"""The predicted power table: its simulated jobs follow the gate's rules, and agree with the power formula where they
must; a small run prints the table, bad options are one line."""

import math

import numpy as np
import pytest

from accounting.gate.ab import AB_CONFIDENCE
from accounting.gate.power import conviction_power
from accounting.gate.stats import Decision
from studies import gate_power_table as study


def test_jobs_held_to_their_cap_fail_as_often_as_the_formula_says():
    # With start = cap there is one verdict per job: its conviction rate is conviction_power's, up to sampling.
    generator = np.random.default_rng(7)
    jobs = 300
    failed = sum(study.simulate_job(1.10, 0.066, threshold=0.05, start_pairs=8, max_pairs=8,
                                    generator=generator).decision is Decision.REGRESSION for _ in range(jobs))
    expected = conviction_power(1.10, 0.066, 8, 8, alpha=0.01, threshold=0.05, confidence=AB_CONFIDENCE)
    assert failed / jobs == pytest.approx(expected, abs=4 * math.sqrt(expected * (1 - expected) / jobs) + 0.03)


def test_a_job_stops_at_its_first_decision_and_never_passes_the_cap():
    generator = np.random.default_rng(1)
    quiet = study.simulate_job(1.0, 0.001, threshold=0.10, generator=generator)
    assert (quiet.decision, quiet.pairs) == (Decision.NO_CHANGE, 3)   # 3 pairs exclude 10 % at this noise
    noisy = [study.simulate_job(1.10, 0.3, threshold=0.10, max_pairs=6, generator=generator) for _ in range(20)]
    assert max(job.pairs for job in noisy) == 6 and all(job.pairs >= 3 for job in noisy)


def test_a_small_run_prints_the_predicted_table(capsys):
    assert study.main(["--noises", "0.02", "--effects", "1,1.25", "--thresholds", "0.1", "--jobs", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Predicted, not measured: 5 simulated gate ab jobs per cell")
    lines = out.splitlines()
    assert len([line for line in lines if line.strip().startswith("0.02")]) == 2


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--effects", "0.9"], "--effects needs comma-separated numbers in [1, 10), got '0.9'", id="speedup"),
    pytest.param(["--thresholds", "5"], "--thresholds needs comma-separated numbers in [1e-09, 1), got '5'",
                 id="percent"),
    pytest.param(["--jobs", "0"], "--jobs must be a positive integer, got 0", id="no-jobs"),
])
def test_bad_options_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        study.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.splitlines()) == 1
