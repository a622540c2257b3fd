"""How often a quiet CPU fleet flags a healthy rank, and how often a real neighbour is still named:
``python -m studies.fleet_quiet_runs --runs 10``.

Each run is the README's command on this node, ``torchrun --standalone --nproc-per-node=N -m accounting fleet
--budget B --json FILE`` (N: one rank per core, at most ``--ranks``), read back from its JSON:

- ``quiet``: nothing else running. A figure flag (straggler, slow memory, often slowest, slow link) or a busy
  flag on any rank is a false alarm: the ranks are the same hardware.
- ``neighbour``: one CPU-bound process pinned to the last rank's core for the whole run. The run should name
  that rank (busy, or a figure flag) and no other.

Run it on a machine with nothing else running: the study cannot tell its own neighbour from someone else's.
Figures: docs/fleet.md ("A quiet node reads healthy").

>>> tally([{"flags": [{"kind": "straggler", "rank": 0}]}, {"flags": []}], ranks=2, neighbour=None)
{'runs': 2, 'flagged': 1, 'named_neighbour': 0, 'other_rank_flagged': 1, 'kinds': {'straggler': 1}}
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

FIGURE_AND_BUSY_KINDS = ("straggler", "slow memory", "often slowest", "slow link", "busy")
"""The flags that judge a rank's figures against the others' (or name other work on its cores)."""
SPIN = "while True: pass"


def one_run(ranks: int, budget_s: float, neighbour_cpu: int | None, directory: Path) -> dict:
    """One fleet run's document (``{"flags": [...], "error": ...}`` where it wrote none), with a spinning
    process pinned to ``neighbour_cpu`` for its whole length where given."""
    spinner = None
    if neighbour_cpu is not None:
        spinner = subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=lambda: os.sched_setaffinity(0, {neighbour_cpu}))
    path = directory / f"fleet-{time.monotonic_ns()}.json"
    try:
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc-per-node={ranks}", "-m", "accounting", "fleet", "--budget", f"{budget_s:g}",
                               "--json", str(path)], capture_output=True, text=True, check=False, timeout=600)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    if not path.exists():
        return {"flags": [], "error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    return json.loads(path.read_text())


def tally(documents: list, *, ranks: int, neighbour: int | None) -> dict:
    """Counts over runs: flagged at all (a figure or busy flag on any rank), the neighbour's rank named, another
    rank flagged; and how often each kind of flag was raised."""
    kinds, flagged, named, other = Counter(), 0, 0, 0
    for document in documents:
        raised = [flag for flag in document.get("flags", []) if flag.get("kind") in FIGURE_AND_BUSY_KINDS]
        kinds.update(flag["kind"] for flag in raised)
        flagged += bool(raised)
        named += neighbour is not None and any(flag.get("rank") == neighbour for flag in raised)
        other += any(flag.get("rank") != neighbour for flag in raised)
    return {"runs": len(documents), "flagged": flagged, "named_neighbour": named, "other_rank_flagged": other,
            "kinds": dict(kinds)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per scenario. Default: %(default)r")
    parser.add_argument("--budget", type=float, default=20.0, help="the fleet's --budget. Default: %(default)r")
    parser.add_argument("--ranks", type=int, default=2, help="ranks (one per core). Default: %(default)r")
    parser.add_argument("--scenarios", default="quiet,neighbour", help="Default: %(default)r")
    args = parser.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    ranks = min(args.ranks, len(cpus))
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for scenario in args.scenarios.split(","):
            neighbour_rank = ranks - 1 if scenario == "neighbour" else None
            neighbour_cpu = cpus[neighbour_rank] if neighbour_rank is not None else None  # the rank's share of 1 CPU
            documents = []
            for run in range(args.runs):
                started = time.monotonic()
                documents.append(one_run(ranks, args.budget, neighbour_cpu, Path(folder)))
                flags = [(flag["kind"], flag.get("rank")) for flag in documents[-1].get("flags", [])]
                print(f"{scenario} run {run + 1}/{args.runs} ({time.monotonic() - started:.0f} s): "
                      f"{documents[-1].get('verdict', documents[-1].get('error'))} {flags}", flush=True)
            results[scenario] = tally(documents, ranks=ranks, neighbour=neighbour_rank)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
