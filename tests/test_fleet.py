"""The fleet without processes: busbw factors, message sizes and expected values, the launcher's environment,
CPU shares, hung and slowed ranks, the document with its text and plot, and the command's one-line errors."""

import dataclasses
import io
import itertools
import json
from fractions import Fraction

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accounting.__main__ import build_parser, main
from accounting.bench.matrix import DEFAULT_STRAGGLER_FRACTION
from accounting.errors import AccountingError
from accounting.fleet import cli, collectives, launch, verdict
from accounting.fleet.gather import hung_ranks
from accounting.fleet.plot import write_plot
from accounting.fleet.render import render
from accounting.fleet.results import SCHEMA, document
from accounting.fleet.throttle import parse_slow_rank, throttled
from accounting.timing import matmul_case
from tests.support.cli_runs import fleet_bad_input

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# NVIDIA/nccl-tests doc/PERFORMANCE.md, "Summary": the correction factor from algbw to busbw.
NCCL_TESTS_FACTORS = {
    "all_reduce": lambda n: Fraction(2 * (n - 1), n),
    "reduce_scatter": lambda n: Fraction(n - 1, n),
    "all_gather": lambda n: Fraction(n - 1, n),
    "broadcast": lambda n: Fraction(1),
}


@pytest.mark.parametrize("ranks", [2, 3, 4, 8, 16, 512])
@pytest.mark.parametrize("collective", sorted(NCCL_TESTS_FACTORS))
def test_busbw_factors_match_nccl_tests(collective, ranks):
    assert collectives.BUSBW_FACTORS[collective](ranks) == pytest.approx(float(NCCL_TESTS_FACTORS[collective](ranks)))
    seconds, nbytes = 0.25, 3 * 2**20
    assert collectives.busbw(collective, nbytes, seconds, ranks) == pytest.approx(
        nbytes / seconds * float(NCCL_TESTS_FACTORS[collective](ranks)))


def test_the_factors_cover_exactly_the_timed_collectives():
    assert set(collectives.BUSBW_FACTORS) == set(NCCL_TESTS_FACTORS) == set(collectives.COLLECTIVES)


@given(ranks=st.integers(1, 64), smallest_log=st.integers(10, 22), span=st.integers(0, 8))
def test_message_sizes_split_evenly_and_grow(ranks, smallest_log, span):
    smallest, largest = 2**smallest_log, 2 ** (smallest_log + span)
    sizes = collectives.message_sizes(smallest, largest, ranks=ranks)
    assert sizes and sizes == sorted(set(sizes))
    assert all(size % (collectives.ELEMENT_BYTES * ranks) == 0 for size in sizes)
    assert all(size <= max(largest, collectives.ELEMENT_BYTES * ranks) for size in sizes)
    unit = collectives.ELEMENT_BYTES * ranks  # each size is rounded down to a whole unit
    assert all(later <= collectives.SIZE_GROWTH * (earlier + unit) for earlier, later in itertools.pairwise(sizes))
    assert sizes[-1] > largest // collectives.SIZE_GROWTH - unit, "the sweep reaches the largest size allowed"


@given(ranks=st.integers(1, 40), count=st.integers(1, 50), offset=st.integers(0, 100))
def test_the_expected_sum_is_the_sum_of_every_ranks_pattern(ranks, count, offset):
    total = sum(collectives.pattern(count, rank, "cpu", offset=offset) for rank in range(ranks))
    assert torch.equal(collectives.reduced_pattern(count, ranks, "cpu", offset=offset), total)


@pytest.mark.parametrize("per_call, target, expected", [
    pytest.param(0.001, 0.1, collectives.MAX_ITERATIONS, id="fast-calls-capped"),
    pytest.param(0.02, 0.1, 5, id="target-bound"),
    pytest.param(5.0, 0.1, collectives.MIN_ITERATIONS, id="slow-calls-floored"),
])
def test_iterations_follow_the_target(per_call, target, expected):
    assert collectives.iterations_for(per_call, target) == expected


# ---- the launcher's environment ----------------------------------------------------------------------


@pytest.mark.parametrize("environ, message", [
    pytest.param({"RANK": "0"}, r"^\$WORLD_SIZE is not set but \$RANK is: start the fleet with torchrun$", id="half-set"),
    pytest.param({"RANK": "-1", "WORLD_SIZE": "2"}, r"^\$RANK must be >= 0, got '-1'$", id="negative"),
    pytest.param({"RANK": "0", "WORLD_SIZE": "two"}, r"^\$WORLD_SIZE must be an integer, got 'two'$", id="not-a-number"),
    pytest.param({"RANK": "0", "WORLD_SIZE": "0"}, r"^\$WORLD_SIZE must be >= 1, got '0'$", id="empty-world"),
    pytest.param({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
                 r"^\$LOCAL_RANK must be below \$LOCAL_WORLD_SIZE \(2\), got '2'$", id="local-out-of-range"),
])
def test_bad_launch_variables_are_quoted(environ, message):
    with pytest.raises(AccountingError, match=message):
        launch.read_launch(environ)


@given(cpus=st.sets(st.integers(0, 255), min_size=1, max_size=64), ranks=st.integers(1, 80))
def test_cpu_shares_cover_the_cpus_evenly(cpus, ranks):
    shares = [launch.cpu_share(rank, ranks, cpus) for rank in range(ranks)]
    assert all(shares) and all(set(share) <= cpus for share in shares)
    if ranks <= len(cpus):
        flat = [cpu for share in shares for cpu in share]
        assert sorted(flat) == sorted(cpus), "disjoint and complete"
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
    else:
        assert all(len(share) == 1 for share in shares)


def test_hung_ranks_are_read_from_gloos_message():
    assert hung_ranks("[Rank 0]: Ranks 2 failed to pass monitoredBarrier in 3000 ms") == [2]
    assert hung_ranks("Connection closed by peer") == []


def test_slow_rank_throttle_runs_the_product_factor_times(monkeypatch):
    calls = []
    case = matmul_case("float32", 4, 4, 4, "cpu")
    original = case.fn

    def counting():
        calls.append(1)
        return original()

    slow = throttled(3, factory=lambda *args, **kwargs: dataclasses.replace(case, fn=counting))("float32", 4, 4, 4)
    result = slow.fn()
    assert len(calls) == 3 and slow.flops == case.flops
    assert torch.equal(result, original())
    assert parse_slow_rank("0:4") == (0, 4)


# ---- the document, its text and its plot -------------------------------------------------------------------

IDENTITY = {"name": "NVIDIA H100 80GB HBM3", "driver": "550.54", "runtime": "CUDA 12.4", "torch": "2.5.1"}


def _timed(collective, nbytes, seconds, wrong=0):
    return collectives.Timed(collective, nbytes, seconds, 5, wrong).as_dict()


def _record(rank, tflops, *, host="node-a", torch_version="2.13.0"):
    best = {"flops_per_s": tflops * 1e12, "m": 256, "k": 256, "n": 256}
    section = {"best": best, "mfu": tflops / 100, "floor": 0.001, "verdict": {"status": "healthy", "message": "ok"}}
    return {"rank": rank, "identity": {**IDENTITY, "torch": torch_version, "rank": rank, "host": host, "kind": "cuda",
                                       "device": f"cuda:{rank}", "pci_bus_id": f"0000:0{rank}:00.0"},
            "report": {"dtypes": {"bfloat16": section}, "bandwidth": {"measured_bytes_per_s": 3e12},
                       "machine": {"load_average_1min": 0.5}},
            "telemetry": {"clock_mhz_mean": 1980.0, "power_w_mean": 690.0, "temperature_c_max": 61.0,
                          "throttle_reasons": ["sw_power_cap"]},
            "collectives": {"world": {"ranks": [0, 1, 2], "results": [_timed("all_reduce", 2**20 * 3, 0.001)]}},
            "errors": []}


SETTINGS = {"world_size": 3, "backend": "nccl", "budget_s": 60.0, "dtypes": None,
            "straggler_fraction": DEFAULT_STRAGGLER_FRACTION, "min_busbw_gbps": None, "barrier_timeout_s": 30.0,
            "slow_rank": None}


@pytest.fixture
def crafted():
    records = [_record(0, 700.0), _record(1, 400.0), _record(2, 690.0, torch_version="2.4.0")]
    return document(records, settings=SETTINGS, elapsed_s=12.0, notes=["a note"])


def test_the_document_flags_what_the_figures_say(crafted):
    assert crafted["schema"] == SCHEMA and crafted["verdict"] == verdict.FLAGGED
    kinds = {(flag["kind"], flag["rank"]) for flag in crafted["flags"]}
    assert kinds == {(verdict.STRAGGLER, 1), (verdict.DRIFT, 2)}
    json.dumps(crafted, allow_nan=False)


def test_render_shows_every_rank_and_the_collectives(crafted):
    text = render(crafted)
    for piece in ("Fleet: 3 rank(s) (nccl)", "cuda:1 NVIDIA H100 80GB HBM3 [0000:01:00.0]", "bfloat16 TFLOP/s",
                  "sw_power_cap", "busbw (GB/s)", "#wrong", "straggler: rank 1 bfloat16", "Verdict: flagged (2 flag(s))",
                  "(no --min-busbw given"):
        assert piece in text, piece
    rank_lines = [line.split() for line in text.splitlines() if line.strip().startswith(("0  ", "1  ", "2  "))]
    assert [line[-2:] for line in rank_lines] == [["ok", "healthy"], ["straggler", "degraded"], ["drift", "degraded"]]
    assert "Health: degraded (exit status 0; 3 with --strict)" in text


def test_plot_is_a_png(crafted, tmp_path):
    path = tmp_path / "fleet.png"
    write_plot(crafted, str(path))
    assert path.read_bytes()[:8] == PNG_SIGNATURE


# ---- the command line ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--budget", "0"], "--budget must be a positive number of seconds, got '0'", id="budget"),
    pytest.param(["--min-busbw", "-3"], "--min-busbw must be a positive number of GB/s, got '-3'", id="min-busbw"),
    pytest.param(["--slow-rank", "x"], "--slow-rank must be RANK or RANK:FACTOR", id="slow-rank"),
    pytest.param(["--dtypes", "float33"], "--dtypes: ", id="dtype"),
    pytest.param(["--json", "/nonexistent-dir/f.json"], "--json '/nonexistent-dir/f.json' cannot be written", id="json"),
    pytest.param(["--slow-rank", "3"], "--slow-rank 3 is not a rank of this world (ranks 0..0)", id="slow-rank-range"),
])
def test_bad_input_is_one_line_and_status_2(argv, message, capsys, monkeypatch):
    err = fleet_bad_input(argv, capsys, monkeypatch)
    assert message in err, err


def test_bad_launch_environment_is_status_2(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "seven")
    with pytest.raises(SystemExit) as exit_:
        main(["fleet"])
    assert exit_.value.code == 2
    assert "$LOCAL_RANK must be an integer, got 'seven'" in capsys.readouterr().err


def test_a_world_of_one_runs_and_says_how_to_launch_more(tmp_path, monkeypatch, capsys):
    for name in launch.LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    json_path = tmp_path / "one.json"
    parser_args = ["fleet", "--budget", "1", "--dtypes", "float32", "--json", str(json_path)]
    args = build_parser().parse_args(parser_args)
    out = io.StringIO()
    status = cli.run(args, parser=args.parser, stdout=out, overrides={"bandwidth_bytes": 4 * 2**20})
    assert status == 0
    text = out.getvalue()
    assert "Fleet: 1 rank(s), budget 1 s" in text
    assert "torchrun --standalone --nproc-per-node=gpu -m accounting fleet" in text
    saved = json.loads(json_path.read_text())
    assert len(saved["ranks"]) == 1 and saved["collectives"] == [] and saved["settings"]["backend"] is None
    assert saved["ranks"][0]["report"]["dtypes"]["float32"]["best"]["flops_per_s"] > 0
