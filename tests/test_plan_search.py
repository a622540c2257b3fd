"""The layout search: every layout its rules allow is tried, only those that fit are kept, the fastest first.

Memory comes from a stand-in here (a peak that grows with the micro-batch and shrinks with the model
split), so these tests judge the search, not the memory model; one test runs the real one.
"""

import time
from types import SimpleNamespace

import pytest

from accounting.errors import AccountingError, AccountingTypeError
from accounting.model.config import TransformerConfig
from accounting.model.parallel.layout import ParallelLayout
from accounting.model.parallel.memory import layout_memory
from accounting.model.parallel.states import check_config_and_layout
from accounting.plan.devices import plan_device
from accounting.plan.layout_time import layout_step_time
from accounting.plan.links import Links, device_links
from accounting.plan.search import SEARCH_SHARDINGS, candidate_layouts, search_layouts

H100 = plan_device("H100 SXM", "bfloat16")
USABLE = int(H100.memory_bytes * 0.9)
CONFIG = TransformerConfig(layers=32, width=4096, heads=32, kv_heads=8, ffn_width=14336, sequence_length=8192,
                           vocabulary=128256, mlp="swiglu", norm="rmsnorm", bias=False, learned_positions=False,
                           tied_embeddings=False)
LLAMA_70B = TransformerConfig(layers=80, width=8192, heads=64, kv_heads=8, ffn_width=28672, sequence_length=8192,
                              vocabulary=128256, mlp="swiglu", norm="rmsnorm", bias=False, learned_positions=False,
                              tied_embeddings=False)


def stand_in(config, micro_batch, layout, *, micro_batches=1, **_):
    """16 bytes a parameter over the model-parallel ranks (and the sharding group under ZeRO-3), and
    8 KiB a token of each micro-batch in flight over the tensor and context ranks."""
    states = 16 * config.parameter_count // (layout.tensor * layout.pipeline)
    if layout.sharding_stage == "zero3":
        states //= layout.sharding_degree
    in_flight = min(layout.pipeline, micro_batches)
    tokens = micro_batch * config.sequence_length * in_flight // (layout.tensor * layout.context)
    return SimpleNamespace(most_loaded=SimpleNamespace(peak=states + 8192 * tokens, stage=0))


def _search(config=CONFIG, devices=32, **settings):
    return search_layouts(config, H100, devices, global_batch=64, memory_fn=stand_in, **settings)


def test_the_layouts_tried_are_the_rules_enumerated():
    """Every (T, P, C) of 32 devices, every sharding and schedule, kept by the docstring's rules written
    out again here: T on one node dividing the heads and width, P dividing the blocks, C a power of 2."""
    expected = set()
    for t in (1, 2, 4, 8, 16, 32):
        for p in (1, 2, 4, 8, 16, 32):
            for c in (1, 2, 4, 8, 16, 32):
                if 32 % (t * p * c) or t > 8 or CONFIG.layers % p:
                    continue
                schedules = [("1f1b", 1)] + ([("interleaved-1f1b", 2)] if p > 1 and CONFIG.layers % (2 * p) == 0
                                             else [])
                for schedule, v in schedules:
                    for sharding in SEARCH_SHARDINGS:
                        layout = ParallelLayout(devices=32, tensor=t, pipeline=p, context=c, schedule=schedule,
                                                virtual_stages=v, sharding=sharding)
                        try:
                            check_config_and_layout(CONFIG, layout)
                        except AccountingError:
                            continue
                        if sharding != "hsdp" or layout.sharding_degree < layout.data * c:
                            expected.add(layout)
    assert set(candidate_layouts(CONFIG, 32)) == expected
    assert {layout.context for layout in candidate_layouts(CONFIG, 32, attention="eager")} == {1}


def test_rows_fit_and_come_fastest_first_at_their_own_time():
    rows = _search()
    assert rows and all(row.peak <= USABLE for row in rows)
    seconds = [row.seconds_per_step for row in rows]
    assert seconds == sorted(seconds)
    links = device_links("H100 SXM")
    for row in rows:
        again = layout_step_time(CONFIG, row.layout, H100, links, micro_batch=row.micro_batch,
                                 micro_batches=row.micro_batches)
        assert again.total == pytest.approx(row.seconds_per_step)
        assert row.layout.data * row.micro_batch * row.micro_batches == 64


def test_the_best_row_is_the_fastest_of_every_fitting_choice():
    """Brute force: every candidate layout at every micro-batch dividing its share, timed if it fits."""
    best = None
    links = device_links("H100 SXM")
    for layout in candidate_layouts(CONFIG, 16):
        if 64 % layout.data:
            continue
        share = 64 // layout.data
        for batch in range(1, share + 1):
            count = share // batch
            if share % batch or (layout.schedule == "interleaved-1f1b" and count % layout.pipeline):
                continue
            if stand_in(CONFIG, batch, layout, micro_batches=count).most_loaded.peak > USABLE:
                continue
            seconds = layout_step_time(CONFIG, layout, H100, links, micro_batch=batch, micro_batches=count).total
            best = seconds if best is None else min(best, seconds)
    assert _search(devices=16)[0].seconds_per_step == pytest.approx(best)


def test_more_memory_or_a_faster_network_never_makes_the_best_slower():
    bigger = plan_device("H100 SXM", "bfloat16", memory_gb=160)
    first = _search()[0].seconds_per_step
    assert search_layouts(CONFIG, bigger, 32, global_batch=64, memory_fn=stand_in)[0].seconds_per_step <= first
    slow = Links(450e9, 5e9, "", "")
    assert _search(links=slow)[0].seconds_per_step >= first


def test_what_does_not_fit_is_left_out():
    def small_splits_overflow(config, micro_batch, layout, **settings):
        result = stand_in(config, micro_batch, layout, **settings)
        if layout.tensor * layout.pipeline < 8:
            result.most_loaded.peak = USABLE + 1
        return result

    rows = search_layouts(CONFIG, H100, 32, global_batch=64, memory_fn=small_splits_overflow, limit=100)
    assert rows and all(row.layout.tensor * row.layout.pipeline >= 8 for row in rows)
    assert search_layouts(CONFIG, H100, 32, global_batch=64, memory_fn=small_splits_overflow, limit=3) == rows[:3]


def test_the_real_memory_model_is_the_default():
    small = TransformerConfig(layers=4, width=512, heads=8, sequence_length=1024, vocabulary=32000)
    rows = search_layouts(small, H100, 8, global_batch=16, limit=3)
    for row in rows:
        peak = layout_memory(small, row.micro_batch, row.layout, micro_batches=row.micro_batches,
                             device=H100.attention_device).most_loaded.peak
        assert row.peak == peak


def test_llama_3_70b_on_64_devices_is_searched_quickly():
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return layout_memory(*args, **kwargs)

    start = time.perf_counter()
    rows = search_layouts(LLAMA_70B, H100, 64, global_batch=128, memory_fn=counted)
    elapsed = time.perf_counter() - start
    assert len(rows) == 10 and len(calls) < 3000
    assert elapsed < 8  # about 1 s on a quiet 2-core machine; room for a busy one


def test_bad_input_is_named():
    with pytest.raises(AccountingError, match="headroom"):
        _search(headroom=1.5)
    with pytest.raises(AccountingTypeError, match="PlanDevice"):
        search_layouts(CONFIG, "H100 SXM", 8, global_batch=8)
    mystery = plan_device("my-accelerator", "bfloat16", memory_gb=96, peak_tflops=500)
    with pytest.raises(AccountingError, match="no link bandwidths known for 'my-accelerator'"):
        search_layouts(CONFIG, mystery, 8, global_batch=8, memory_fn=stand_in)
    assert search_layouts(CONFIG, mystery, 8, global_batch=8, memory_fn=stand_in, links=Links(1e11, 1e10, "", ""))
