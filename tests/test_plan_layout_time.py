"""A layout's seconds per step: the bubble against a pipeline schedule run op by op, links as the fleet reads them.

The bubble's truth is a simulation: each rank runs its schedule's list of forward and backward chunk
steps in order (GPipe; 1F1B, PipeDream-Flush; Megatron-LM's interleaved 1F1B, its warm-up count and
chunk order from ``megatron/core/pipeline_parallel/schedules.py``), each step starting when its rank
is free and its input has arrived (the previous chunk's forward, the next chunk's backward). The idle
share of the makespan is compared with :func:`bubble_fraction`.
"""

import json

import pytest

from accounting.errors import AccountingError
from accounting.model.config import TransformerConfig
from accounting.model.parallel.communication import step_traffic
from accounting.model.parallel.layout import ParallelLayout
from accounting.plan.devices import plan_device
from accounting.model.flops import transformer_flops
from accounting.plan.layout_time import bubble_fraction, layout_step_time, training_flops_per_sequence
from accounting.plan.links import Links, device_links, known_links, read_links


def _schedule(schedule, rank, pipeline, micro_batches, virtual):
    """The (kind, micro-batch, chunk) steps rank ``rank`` runs, in order."""
    m, p, v = micro_batches, pipeline, virtual
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == "1f1b":
        warm = min(p - rank - 1, m)
        steps = [("F", i, 0) for i in range(warm)]
        forward, backward = warm, 0
        while backward < m:
            if forward < m:
                steps.append(("F", forward, 0))
                forward += 1
            steps.append(("B", backward, 0))
            backward += 1
        return steps
    total = m * v  # Megatron's interleaved schedule (m a multiple of P)

    def forward_step(k):
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def backward_step(k):
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    warm = min((p - rank - 1) * 2 + (v - 1) * p, total)
    steps = [forward_step(k) for k in range(warm)]
    forward, backward = warm, 0
    while backward < total:
        if forward < total:
            steps.append(forward_step(forward))
            forward += 1
        steps.append(backward_step(backward))
        backward += 1
    return steps


def _simulated_bubble(schedule, pipeline, micro_batches, virtual=1, forward=1.0, backward=2.0):
    """The idle share of the makespan when every rank runs its steps as soon as it may."""
    f, b = forward / virtual, backward / virtual
    lists = [_schedule(schedule, rank, pipeline, micro_batches, virtual) for rank in range(pipeline)]
    done, position, free = {}, [0] * pipeline, [0.0] * pipeline
    last = pipeline * virtual - 1  # global chunk index: chunk c of rank r is c·P + r
    while any(position[r] < len(lists[r]) for r in range(pipeline)):
        moved = False
        for rank in range(pipeline):
            if position[rank] == len(lists[rank]):
                continue
            kind, batch, chunk = lists[rank][position[rank]]
            index = chunk * pipeline + rank
            if kind == "F":
                need = None if index == 0 else ("F", batch, index - 1)
            else:
                need = ("F", batch, last) if index == last else ("B", batch, index + 1)
            if need is not None and need not in done:
                continue
            start = max(free[rank], done[need] if need else 0.0)
            free[rank] = done[(kind, batch, index)] = start + (f if kind == "F" else b)
            position[rank] += 1
            moved = True
        assert moved, "the schedule deadlocked"
    makespan = max(free)
    return 1 - micro_batches * (forward + backward) / makespan


@pytest.mark.parametrize("schedule, pipeline, micro_batches, virtual", [
    ("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 8, 3, 1), ("1f1b", 2, 16, 1),
    ("interleaved-1f1b", 4, 8, 2), ("interleaved-1f1b", 2, 4, 3), ("interleaved-1f1b", 4, 4, 4),
])
def test_bubble_is_what_the_schedule_leaves_idle(schedule, pipeline, micro_batches, virtual):
    simulated = _simulated_bubble(schedule, pipeline, micro_batches, virtual)
    assert bubble_fraction(pipeline, micro_batches, virtual) == pytest.approx(simulated, rel=1e-12)


CONFIG = TransformerConfig(layers=16, width=2048, heads=16, kv_heads=8, sequence_length=4096, vocabulary=32000,
                           mlp="swiglu", norm="rmsnorm", bias=False, learned_positions=False, tied_embeddings=False)
H100 = plan_device("H100 SXM", "bfloat16")
LINKS = device_links("H100 SXM")


def _time(layout, links=LINKS, micro_batches=8, config=CONFIG, **settings):
    return layout_step_time(config, layout, H100, links, micro_batch=1, micro_batches=micro_batches, **settings)


def test_step_time_is_the_simulated_pipeline_plus_what_data_parallelism_leaves_exposed():
    """The bubble is the schedule's idle time at the stage's per-micro-batch time (compute and exposed
    tensor and pipeline communication): the simulated makespan, with the forward a third of it."""
    layout = ParallelLayout(devices=32, tensor=8, pipeline=4, schedule="interleaved-1f1b", virtual_stages=2)
    time = _time(layout)
    stage = time.compute + time.exposed["tensor"] + time.exposed["pipeline"]
    idle = _simulated_bubble("interleaved-1f1b", 4, 8, 2)
    assert time.total - time.exposed.get("data", 0.0) == pytest.approx(stage / (1 - idle), rel=1e-9)


def test_communication_is_its_bus_bytes_over_its_scopes_bandwidth():
    layout = ParallelLayout(devices=64, tensor=8, pipeline=4)
    time = _time(layout)
    rows = step_traffic(CONFIG, 1, layout, micro_batches=8)
    last = [row for row in rows if row.axis == "tensor" and row.stage in (None, time.stage)]
    assert time.communication["tensor"] == pytest.approx(sum(row.bytes for row in last) / 450e9)
    slow = Links(450e9, 12.5e9, "", "")  # a quarter of the network: pipeline and data cross nodes
    slower = _time(layout, slow)
    assert slower.exposed["pipeline"] == pytest.approx(4 * time.exposed["pipeline"])
    assert slower.exposed["tensor"] == time.exposed["tensor"] and slower.total > time.total


def test_data_parallelism_hides_behind_compute_until_it_cannot():
    """Under ZeRO-3 the gathers overlap the micro-batches' compute: nothing exposed on a fast network,
    the excess exposed on a slow one; DDP's single reduction overlaps only the last backward."""
    zero3 = ParallelLayout(devices=16, tensor=8, sharding="zero3")
    assert _time(zero3).exposed["data"] == 0.0
    crawl = Links(450e9, 0.1e9, "", "")
    assert _time(zero3, crawl).exposed["data"] > 0
    ddp = ParallelLayout(devices=16, tensor=8)
    assert _time(ddp, micro_batches=1).exposed["data"] <= _time(ddp, micro_batches=16).exposed["data"]


def test_ring_attention_hides_behind_long_sequences_attention():
    """The keys and values of s tokens take time ∝ s, their attention ∝ s²: long sequences hide the ring."""
    short = TransformerConfig(**{**CONFIG.__dict__, "sequence_length": 256})
    long = TransformerConfig(**{**CONFIG.__dict__, "sequence_length": 65536})
    layout = ParallelLayout(devices=16, tensor=8, context=2)
    assert _time(layout, config=short).exposed["context"] > 0
    assert _time(layout, config=long, micro_batches=1).exposed["context"] == 0.0


def test_compute_divides_over_devices_and_mfu():
    one = _time(ParallelLayout(devices=8, tensor=8), micro_batches=4)
    two = _time(ParallelLayout(devices=16, tensor=8), micro_batches=2)  # the same global batch on twice the devices
    assert two.compute == pytest.approx(one.compute / 2)
    assert _time(ParallelLayout(devices=8, tensor=8), micro_batches=4, mfu=0.2).compute == pytest.approx(
        2 * one.compute)
    assert one.tokens_per_second == pytest.approx(one.tokens_per_step / one.total)
    assert one.tokens_per_step == 4 * CONFIG.sequence_length


def test_a_steps_flops_are_its_sequences_times_one_sequences():
    moe = TransformerConfig(layers=4, width=128, heads=8, sequence_length=64, vocabulary=500, mlp="swiglu",
                            experts=8, experts_per_token=2, ffn_width=64, dense_layers=1, shared_experts=1)
    for config in (CONFIG, moe):
        assert training_flops_per_sequence(config) * 48 == transformer_flops(config, batch_size=48).training


def _fleet_record(host, scope, ranks, collective, nbytes, seconds):
    return {"identity": {"host": host}, "collectives": {scope: {"ranks": ranks, "results": [
        {"collective": collective, "bytes": nbytes, "count": nbytes // 4, "type": "float", "redop": "sum",
         "root": None, "seconds": seconds, "launch_seconds": None, "iterations": 20, "wrong": 0}]}}}


def test_links_read_the_fleets_own_rows():
    """A fleet document's rows as :func:`accounting.fleet.verdict.collective_rows` makes them from two ranks'
    timings: the intra-node figure is nccl-tests' busbw of the slowest collective, S/t·(n − 1)/n or 2(n − 1)/n."""
    from accounting.fleet.verdict import collective_rows

    size = 2**30
    records = [_fleet_record("a", "world", [0, 1], "all_reduce", size, 0.004),
               _fleet_record("a", "world", [0, 1], "all_reduce", size, 0.004)]
    for record in records:
        record["collectives"]["world"]["results"].append(
            {"collective": "all_gather", "bytes": size, "count": size // 4, "type": "float", "redop": None,
             "root": None, "seconds": 0.002, "launch_seconds": None, "iterations": 20, "wrong": 0})
    document = {"collectives": collective_rows(records)}
    links = read_links(document, LINKS)
    assert links.intra_node_bytes_per_s == pytest.approx(min(size / 0.004 * 1.0, size / 0.002 * 0.5))
    assert links.inter_node_bytes_per_s == LINKS.inter_node_bytes_per_s  # not measured: the datasheet's kept


def test_links_from_a_file_and_bad_input_named(tmp_path):
    path = tmp_path / "links.json"
    path.write_text(json.dumps({"intra_node_gbps": 300, "inter_node_gbps": 40}))
    links = read_links(str(path), LINKS)
    assert (links.intra_node_bytes_per_s, links.inter_node_bytes_per_s) == (300e9, 40e9)
    assert links.inter_source == str(path)
    with pytest.raises(AccountingError, match="inter_node_gbps must be a positive"):
        read_links({"inter_node_gbps": -1}, LINKS)
    with pytest.raises(AccountingError, match="unknown key 'intra_gbps'"):
        read_links({"intra_gbps": 300}, LINKS)
    path.write_text("{not json")
    with pytest.raises(AccountingError, match="is not JSON"):
        read_links(path, LINKS)
    with pytest.raises(AccountingError, match="no intra-node or inter-node"):
        read_links({"collectives": []}, LINKS)
    with pytest.raises(AccountingError, match="no link bandwidths known for 'V100 SXM2'"):
        device_links("V100 SXM2")
    assert known_links("V100 SXM2") is None
    alone = read_links({"intra_node_gbps": 100, "inter_node_gbps": 10})  # a device without datasheet figures
    assert (alone.intra_node_bytes_per_s, alone.inter_node_bytes_per_s) == (100e9, 10e9)
    with pytest.raises(AccountingError, match="must give inter_node_gbps"):
        read_links({"intra_node_gbps": 100})
