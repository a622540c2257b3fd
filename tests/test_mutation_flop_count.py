"""FLOPs counted by ``FlopCounterMode`` (``accounting.flop_count``): what mutation testing found unchecked (issue 15).

The truth is ``FlopCounterMode`` itself, run here on the same functions; the messages must name
every operator it counted, and say so when it counted none.
"""

import torch
from torch.utils.flop_counter import FlopCounterMode

from accounting.flop_count import FlopCount, count_flops, counted_total, flops_mismatch


def _counted_by_torch(fn) -> dict:
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return {str(op): int(flops) for op, flops in counter.get_flop_counts()["Global"].items()}


def test_a_mismatch_names_every_operator_counted():
    a, batch = torch.ones(8, 4), torch.ones(3, 4, 5)

    def two_operators():
        return a @ a.T, batch @ batch.transpose(1, 2)
    count = count_flops(two_operators)
    by_torch = _counted_by_torch(two_operators)
    assert count.by_operator == by_torch and len(by_torch) == 2
    message = flops_mismatch(1, count)
    listed = ", ".join(f"{name}: {flops}" for name, flops in by_torch.items())
    assert f"counted {sum(by_torch.values())} in fn ({listed}): " in message


def test_a_mismatch_against_nothing_counted_says_so():
    vector = torch.ones(16)
    count = count_flops(lambda: vector @ vector)  # aten.dot: invisible to FlopCounterMode
    assert count.total == 0 and count.by_operator == {}
    assert flops_mismatch(32, count) == "flops=32 given, but FlopCounterMode counted 0 in fn (no matmul ops): nothing counted"


def test_the_smallest_counts_are_accepted_and_only_zero_refused():
    one_by_one = torch.ones(1, 1)
    smallest = count_flops(lambda: one_by_one @ one_by_one)
    assert counted_total(smallest) == sum(_counted_by_torch(lambda: one_by_one @ one_by_one).values()) == 2
    assert counted_total(FlopCount(1, {"custom": 1})) == 1  # any positive count, however it was made


def test_the_seconds_are_the_counted_calls_own_wall_time():
    """Bracketed by the test's own clock: at least the time the function sleeps, at most the whole call."""
    import time

    a = torch.ones(4, 4)

    def slow():
        time.sleep(0.02)
        return a @ a
    before = time.perf_counter()
    count = count_flops(slow)
    after = time.perf_counter()
    assert 0.02 <= count.seconds <= after - before
