"""Per-round readings on the simulated H200 (:mod:`tests.support.simulated_gpu`): the package's own
:class:`~accounting.bench.round_telemetry.RoundReadings` and NVML backend, driven in the GPU's virtual time.

The truth: the simulated GPU's own state (its power limiter's clock and whether it holds the clock below the
boost clock), calibrated on the recorded H200; the rounds are the gate's, back to back with an L2 flush each.
"""

import pytest

from accounting.bench.round_telemetry import ROUND_INTERVAL_S, RoundReadings
from accounting.gate.gpu_rounds import rounds_disturbances, rounds_telemetry

simulated_gpu = pytest.importorskip("tests.support.simulated_gpu")

FLOPS = 2 * 8192**3
"""The gate's bf16 8192x8192x8192 matmul (about 1.5 ms a call at the capped clock)."""


class InVirtualTime:
    """Takes the recorder's reading every ``ROUND_INTERVAL_S`` of the simulated GPU's time (its samplers' hook),
    as the recorder's thread does in wall time."""

    def __init__(self, gpu, recorder):
        self.gpu, self.recorder = gpu, recorder
        self.next_read = gpu.now() + ROUND_INTERVAL_S

    def take(self, *, edge):
        self.recorder.sample()
        self.next_read = self.gpu.now() + ROUND_INTERVAL_S


def test_per_round_readings_carry_the_power_cap_while_the_simulated_gpu_is_capped():
    gpu = simulated_gpu.SimulatedH200()
    for _ in range(1500):  # about 2 s back to back: the limiter holds the clock at the 700 W cap
        gpu.product(FLOPS)
    gpu.synchronize()
    assert gpu.throttled
    rounds = 200
    recorder = RoundReadings(gpu.backend(), warmup_rounds=1, rounds=rounds, thread=False, now=gpu.now)
    gpu._samplers.append(InVirtualTime(gpu, recorder))
    clocks = []
    for _ in range(rounds + 1):
        gpu.flush()  # the round's setup: an L2 flush, then a synchronize
        gpu.synchronize()
        gpu.product(FLOPS)  # the timed call: the product and its synchronize
        gpu.synchronize()
        clocks.append(gpu.clock_mhz)
        assert gpu.throttled
        recorder.teardown()
    record = recorder.record()
    assert len(record["throttle_reasons"]) == rounds
    assert all("sw_power_cap" in reasons for reasons in record["throttle_reasons"])
    assert min(clocks) <= min(record["clock_mhz"]) <= max(record["clock_mhz"]) <= max(clocks) < 1980.0
    assert sum(record["samples"]) >= rounds * 1.5e-3 / ROUND_INTERVAL_S, "the rounds' own readings, most borrowed"
    capped = rounds_telemetry({"telemetry_rounds": record}, rounds)
    cool = rounds_telemetry({"telemetry_rounds": {"clock_mhz": [1980.0] * 3, "throttle_reasons": [[]] * 3}}, 3)
    assert rounds_disturbances(capped, [cool]) == [], "below the cool baselines' clock, explained by the cap"
