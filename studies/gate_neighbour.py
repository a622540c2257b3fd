"""A seeded noisy neighbour for the gate's studies: one core spun on and off at random (``python -m studies.gate_neighbour``).

A CI runner's other job — a build beside the tests — takes a core for a while, then leaves it. This
process does the same, reproducibly: it alternates busy spells (a tight loop on one core) and idle
ones (sleeping), each of an exponentially distributed length, so that on average it is busy
``duty`` of the time, spells of ``mean_spell_s`` seconds. The same seed gives the same spells.

:func:`running` starts it beside a study and ends it (by its own process id) when the study ends.

>>> spells(seed=1, duty=0.5, mean_spell_s=2.0, total_s=600.0)[1] > 0.4
True
"""

import argparse
import contextlib
import random
import subprocess
import sys
import time


def spells(*, seed: int, duty: float, mean_spell_s: float, total_s: float) -> tuple[list, float]:
    """The ``(busy, seconds)`` spells that fill ``total_s``, and the share of it that is busy."""
    if not 0 < duty < 1 or mean_spell_s <= 0:
        raise ValueError(f"duty must be in (0, 1) and mean_spell_s positive, got {duty!r} and {mean_spell_s!r}")
    generator = random.Random(seed)
    busy_mean, idle_mean = 2 * mean_spell_s * duty, 2 * mean_spell_s * (1 - duty)
    found, elapsed, busy_s, busy = [], 0.0, 0.0, generator.random() < duty
    while elapsed < total_s:
        length = generator.expovariate(1 / (busy_mean if busy else idle_mean))
        found.append((busy, length))
        elapsed += length
        busy_s += length if busy else 0.0
        busy = not busy
    return found, busy_s / elapsed


def spin(*, seed: int, duty: float, mean_spell_s: float, total_s: float) -> None:
    """Spend ``total_s`` seconds in the spells of :func:`spells`: busy ones in a tight loop, idle ones asleep."""
    for busy, length in spells(seed=seed, duty=duty, mean_spell_s=mean_spell_s, total_s=total_s)[0]:
        end = time.monotonic() + length
        if busy:
            while time.monotonic() < end:
                pass
        else:
            time.sleep(length)


@contextlib.contextmanager
def running(seed: int | None, *, duty: float = 0.5, mean_spell_s: float = 2.0, total_s: float = 86400.0):
    """A neighbour process for the duration of the ``with`` block (nothing when ``seed`` is ``None``)."""
    if seed is None:
        yield None
        return
    process = subprocess.Popen([sys.executable, "-m", "studies.gate_neighbour", "--seed", str(seed), "--duty",
                                repr(duty), "--mean-spell", repr(mean_spell_s), "--seconds", repr(total_s)])
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.gate_neighbour",
                                     description="Spin one core on and off at random (seeded): a noisy neighbour.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duty", type=float, default=0.5, help="share of the time busy. Default: %(default)r")
    parser.add_argument("--mean-spell", type=float, default=2.0, help="mean seconds of a spell. Default: %(default)r")
    parser.add_argument("--seconds", type=float, default=86400.0, help="how long to run. Default: a day")
    args = parser.parse_args(argv)
    spin(seed=args.seed, duty=args.duty, mean_spell_s=args.mean_spell, total_s=args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
