"""Telemetry's window arithmetic and the sampler's life cycle, on a scripted backend.

Written to close what mutation testing (issue 15) found unchecked in :mod:`accounting.telemetry`:
the energy rule's edges (snapshot, a window shorter than the counter's period, the counter's one-second
minimum, a counter that does not advance), how readings fold into a summary, and the sampler's errors.
The backend here is a script of readings, so every expected figure is worked out by hand from it.
"""

import os
import types

import pytest
import torch

from accounting.telemetry import sampler as telemetry
from accounting.errors import AccountingError
from accounting.telemetry.readings import CPU_INTERVAL_S, GPU_INTERVAL_S, NoBackend, Reading
from accounting.telemetry.sampler import Sampler, snapshot, summarise


class ScriptedBackend:
    """A backend that returns the readings it is given, in order (the last one repeated), and counts closes."""

    name = "scripted"
    default_interval_s = 0.001
    clock_source = "scripted clock"

    def __init__(self, readings=(), *, energy_source="counter", period=0.1, unavailable=None, fail_after=None):
        self.readings = list(readings) or [Reading(0.0)]
        self.energy_source = energy_source
        self.energy_update_period_s = period
        self.unavailable = dict(unavailable or {})
        self.fail_after = fail_after
        self.reads = []
        self.closed = 0

    def read(self, *, edge: bool) -> Reading:
        if self.fail_after is not None and len(self.reads) >= self.fail_after and not edge:
            raise RuntimeError("device lost")
        self.reads.append(edge)
        return self.readings[min(len(self.reads) - 1, len(self.readings) - 1)]

    def close(self) -> None:
        self.closed += 1


# ---- energy over a window ----------------------------------------------------------------------


def test_a_snapshot_has_no_energy_and_says_why():
    summary = summarise("cuda:0", ScriptedBackend(), [Reading(5.0, power_w=300.0, energy_j=10.0)])
    assert (summary.duration_s, summary.samples, summary.energy_j) == (0.0, 1, None)
    assert summary.unavailable["energy_j"] == "a snapshot has no window to integrate over"


def test_a_window_shorter_than_the_counters_period_is_named_in_milliseconds():
    backend = ScriptedBackend(period=0.1)
    readings = [Reading(0.0, power_w=300.0, energy_j=0.0), Reading(0.03, power_w=300.0, energy_j=9.0)]
    summary = summarise("cuda:0", backend, readings)
    assert summary.energy_j is None and summary.energy_source is None
    assert summary.unavailable["energy_j"] == ("window of 30.0 ms is shorter than the energy counter's update "
                                               "period (100 ms): flagged, not reported as 0 J")


def test_a_window_as_long_as_the_period_is_integrated():
    """A RAPL-like counter (not a GPU's "counter") needs only its period: 0.1 s of 30 J is 30 J."""
    backend = ScriptedBackend(energy_source="rapl", period=0.1)
    readings = [Reading(0.0, energy_j=100.0), Reading(0.1, energy_j=130.0)]
    summary = summarise("cpu", backend, readings)
    assert (summary.energy_j, summary.energy_source) == (pytest.approx(30.0), "rapl")
    assert "energy_j" not in summary.unavailable


def test_a_gpu_counter_needs_a_full_second_and_shorter_windows_use_power_times_time():
    readings = [Reading(0.0, power_w=200.0, energy_j=0.0), Reading(0.5, power_w=400.0, energy_j=500.0),
                Reading(0.999, power_w=300.0, energy_j=900.0)]
    short = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert (short.energy_j, short.energy_source) == (pytest.approx(300.0 * 0.999), "power×time")
    full = summarise("cuda:0", ScriptedBackend(period=0.1), [*readings[:2], Reading(1.0, power_w=300.0,
                                                                                    energy_j=950.0)])
    assert (full.energy_j, full.energy_source) == (pytest.approx(950.0), "counter")


def test_the_counter_is_read_at_the_window_edges_and_gaps_are_skipped():
    readings = [Reading(0.0, energy_j=1000.0), Reading(0.7, energy_j=None), Reading(1.2, energy_j=1500.0),
                Reading(2.0, energy_j=1800.0)]
    summary = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert summary.energy_j == pytest.approx(800.0)


def test_one_counter_reading_is_not_a_window_of_energy():
    readings = [Reading(0.0, power_w=100.0, energy_j=50.0), Reading(2.0, power_w=300.0)]
    summary = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert (summary.energy_j, summary.energy_source) == (pytest.approx(200.0 * 2.0), "power×time")


def test_a_counter_that_goes_backwards_is_flagged_not_negative():
    readings = [Reading(0.0, energy_j=500.0), Reading(1.5, energy_j=400.0)]
    summary = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert summary.energy_j is None
    assert summary.unavailable["energy_j"] == "the energy counter did not advance over 1.500 s: flagged, not reported as 0 J"


def test_without_counter_or_power_the_backends_reason_is_kept_or_a_plain_one_given():
    readings = [Reading(0.0), Reading(2.0)]
    said = summarise("cuda:0", ScriptedBackend(period=0.0, unavailable={"energy_j": "no RAPL here"}), readings)
    assert said.unavailable["energy_j"] == "no RAPL here"
    plain = summarise("cuda:0", ScriptedBackend(period=0.0), readings)
    assert plain.unavailable["energy_j"] == "no energy counter and no power readings"


# ---- folding readings --------------------------------------------------------------------------


def test_readings_fold_into_ranges_and_first_seen_lists_without_repeats():
    readings = [
        Reading(1.0, clock_mhz=1900.0, throttle_reasons=("sw_power_cap",), other_process_memory_bytes=2**30,
                busy_siblings=("GPU 1",)),
        Reading(1.5, throttle_reasons=("hw_slowdown", "sw_power_cap"), other_process_memory_bytes=3 * 2**30,
                busy_siblings=("GPU 2", "GPU 1")),
        Reading(3.0, clock_mhz=1500.0, throttle_reasons=("sw_power_cap",), other_process_memory_bytes=2**30),
    ]
    summary = summarise("cuda:0", ScriptedBackend(), readings)
    assert (summary.duration_s, summary.samples) == (2.0, 3)
    assert summary.throttle_reasons == ("sw_power_cap", "hw_slowdown") and summary.throttled
    assert summary.busy_siblings == ("GPU 1", "GPU 2")
    assert summary.other_process_memory_bytes == 3 * 2**30
    assert (summary.clock_mhz_min, summary.clock_mhz_max, summary.clock_source) == (1500.0, 1900.0, "scripted clock")
    assert (summary.backend, summary.device) == ("scripted", "cuda:0")


def test_a_reading_present_clears_the_backends_reason_and_an_absent_one_gets_a_reason():
    backend = ScriptedBackend(unavailable={"clock_mhz_mean": "not at first", "throttle_reasons": "no mask",
                                           "power_w_mean": "no sensor"})
    summary = summarise("cuda:0", backend, [Reading(0.0, clock_mhz=1000.0, throttle_reasons=("hw_slowdown",))],
                        extra_unavailable={"samples": "sampling stopped"})
    assert "clock_mhz_mean" not in summary.unavailable and "throttle_reasons" not in summary.unavailable
    assert summary.unavailable["power_w_mean"] == "no sensor", "the backend's own reason is kept"
    assert summary.unavailable["temperature_c_max"] == "no reading during the window"
    assert summary.unavailable["samples"] == "sampling stopped"
    assert backend.unavailable["clock_mhz_mean"] == "not at first", "the backend's reasons are not changed"


def test_no_clock_reading_means_no_clock_source():
    summary = summarise("cuda:0", ScriptedBackend(), [Reading(0.0, power_w=5.0)])
    assert summary.clock_source is None and summary.clock_mhz_mean is None


def test_a_backend_that_reads_nothing_names_every_device_reading_but_the_hosts():
    backend = NoBackend("no NVML")
    assert backend.unavailable == {name: "no NVML" for name in (
        "clock_mhz_min", "clock_mhz_mean", "clock_mhz_max", "power_w_mean", "power_w_max", "energy_j",
        "temperature_c_max", "other_process_memory_bytes", "throttle_reasons")}
    reading = backend.read(edge=True)
    assert reading == Reading(reading.time_s), "a reading with nothing read"
    assert (backend.name, backend.energy_source, backend.default_interval_s) == (None, None, GPU_INTERVAL_S)


def test_the_host_figures_come_from_the_operating_system(monkeypatch):
    summary = summarise("cpu", ScriptedBackend(), [Reading(0.0)])
    assert summary.logical_cpus == len(os.sched_getaffinity(0))
    assert summary.load_average_1m == pytest.approx(os.getloadavg()[0], abs=5)
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    monkeypatch.setattr(os, "getloadavg", lambda: (_ for _ in ()).throw(OSError("no loadavg")))
    bare = summarise("cpu", ScriptedBackend(), [Reading(0.0)])
    assert (bare.logical_cpus, bare.load_average_1m) == (1, None)
    assert bare.unavailable["load_average_1m"] == "no reading during the window"
    monkeypatch.setattr(os, "cpu_count", lambda: 48)
    assert summarise("cpu", ScriptedBackend(), [Reading(0.0)]).logical_cpus == 48


# ---- the sampler --------------------------------------------------------------------------------


@pytest.fixture
def scripted(monkeypatch):
    """Every sampler and snapshot reads a fresh ScriptedBackend; the list holds them with their options."""
    opened = []

    def open_backend(device_name, *, measure_clock):
        backend = ScriptedBackend([Reading(0.0, clock_mhz=1000.0), Reading(1.0, clock_mhz=2000.0)])
        opened.append((device_name, measure_clock, backend))
        return backend

    monkeypatch.setattr(telemetry, "_open_backend", open_backend)
    return opened


def test_a_sampler_reads_its_edges_on_the_calling_thread_and_closes_its_backend(scripted):
    sampler = Sampler("cpu", measure_clock=False)
    assert sampler.interval_s == GPU_INTERVAL_S, "before it starts there is no backend to ask"
    with sampler:
        assert sampler.interval_s == ScriptedBackend.default_interval_s
    ((device, measure_clock, backend),) = scripted
    assert (device, measure_clock) == ("cpu", False)
    assert backend.reads[0] is True and backend.reads[-1] is True and backend.closed == 1
    assert sampler.summary.samples == len(backend.reads)
    assert sampler.summary.clock_mhz_max == 2000.0


def test_an_explicit_interval_wins_and_measure_clock_defaults_on(scripted):
    sampler = Sampler(torch.device("cpu"), interval_s=0.5)
    assert sampler.interval_s == 0.5
    with sampler:
        pass
    assert scripted[0][1] is True


def test_a_sampler_cannot_start_twice_or_stop_before_it_starts(scripted):
    sampler = Sampler("cpu")
    with pytest.raises(AccountingError, match=r"^Sampler\('cpu'\) was not started$"):
        sampler.stop()
    sampler.start()
    with pytest.raises(AccountingError, match=r"^Sampler\('cpu'\) is already running$"):
        sampler.start()
    summary = sampler.stop()
    assert sampler.summary is summary
    sampler.start()  # a stopped sampler can run another window
    assert sampler.stop().samples >= 2


def test_a_failing_backend_ends_sampling_not_the_window(monkeypatch):
    backend = ScriptedBackend([Reading(0.0), Reading(0.5)], fail_after=1)
    monkeypatch.setattr(telemetry, "_open_backend", lambda name, *, measure_clock: backend)
    with Sampler("cpu", interval_s=0.001) as sampler:
        deadline = telemetry.time.monotonic() + 5
        while not sampler._sampling_error and telemetry.time.monotonic() < deadline:
            telemetry.time.sleep(0.001)
    assert sampler.summary.unavailable["samples"] == "sampling stopped: RuntimeError: device lost"
    assert backend.closed == 1


def test_the_with_block_does_not_swallow_an_error(scripted):
    with pytest.raises(KeyError):
        with Sampler("cpu"):
            raise KeyError("inside")
    assert scripted[0][2].closed == 1


def test_a_failing_edge_reading_still_closes_the_backend(monkeypatch):
    class FailsAfter(ScriptedBackend):
        def __init__(self, good_reads):
            super().__init__()
            self.good_reads = good_reads

        def read(self, *, edge):
            if len(self.reads) >= self.good_reads:
                raise RuntimeError("gone")
            return super().read(edge=edge)

    backends = [FailsAfter(0), FailsAfter(1)]
    monkeypatch.setattr(telemetry, "_open_backend", lambda name, *, measure_clock: backends.pop(0))
    first, second = backends
    with pytest.raises(RuntimeError, match="gone"):
        snapshot("cpu")
    assert first.closed == 1
    sampler = Sampler("cpu", interval_s=60.0).start()
    with pytest.raises(RuntimeError, match="gone"):
        sampler.stop()
    assert second.closed == 1


def test_snapshot_is_one_edge_reading(scripted):
    summary = snapshot(measure_clock=False)
    ((device, measure_clock, backend),) = scripted
    assert (device, measure_clock, backend.reads, backend.closed) == ("cpu", False, [True], 1)
    assert (summary.device, summary.samples, summary.duration_s, summary.clock_mhz_mean) == ("cpu", 1, 0.0, 1000.0)
    snapshot("cpu")
    assert scripted[1][1] is True, "the clock is measured unless asked not to"


def test_sample_cost_is_the_mean_time_of_a_background_read(monkeypatch):
    clock = types.SimpleNamespace(t=0.0)

    class Timed(ScriptedBackend):
        def read(self, *, edge):
            clock.t += 0.5 if edge else 0.002
            return super().read(edge=edge)

    backend = Timed()
    opened = []

    def open_backend(name, *, measure_clock):
        opened.append((name, measure_clock))
        return backend

    monkeypatch.setattr(telemetry, "_open_backend", open_backend)
    monkeypatch.setattr(telemetry, "time", types.SimpleNamespace(perf_counter=lambda: clock.t))
    assert telemetry.sample_cost_s(reads=7) == pytest.approx(0.002)
    assert backend.reads == [True] + [False] * 7 and backend.closed == 1
    # The CPU by default; its edge clock measurement (about 0.1 s a read) is no part of a background read.
    assert opened == [("cpu", False)]


@pytest.mark.parametrize("device, name", [("cpu", "cpu"), ("cuda:3", "cuda:3"), (torch.device("cuda", 1), "cuda:1")])
def test_devices_are_named_as_summaries_carry_them(device, name):
    assert telemetry._device_name(device) == name


def test_cuda_without_an_index_is_the_current_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    assert telemetry._device_name("cuda") == "cuda:2"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert telemetry._device_name("cuda") == "cuda:0"


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_a_device_without_telemetry_is_named(device):
    with pytest.raises(AccountingError, match=rf"^device '{device}' has no telemetry: only cpu and cuda have$"):
        telemetry._device_name(device)


def test_the_cpu_backend_samples_at_the_cpu_interval():
    """The CPU sampler shares the timed cores (module docstring): it samples at the CPU interval."""
    backend = telemetry._open_backend("cpu", measure_clock=False)
    try:
        assert backend.default_interval_s == CPU_INTERVAL_S and backend.name == "cpu"
    finally:
        backend.close()


# ---- second round (issue 15): what the full run of telemetry.py's mutants found unchecked ------------


def test_a_short_window_is_named_to_a_tenth_of_a_millisecond_and_its_period_to_one():
    """0.9 s against a 1 s counter: the figures in the reason are the window's and the period's own."""
    readings = [Reading(0.0, energy_j=0.0), Reading(0.9, energy_j=90.0)]
    summary = summarise("cuda:0", ScriptedBackend(period=1.0), readings)
    assert summary.unavailable["energy_j"] == ("window of 900.0 ms is shorter than the energy counter's update "
                                               "period (1000 ms): flagged, not reported as 0 J")


def test_a_counter_that_advances_by_less_than_a_joule_is_reported():
    """An idle device at 0.25 W for 2 s: the counter moves 0.5 J, which is energy, not a stuck counter."""
    readings = [Reading(0.0, energy_j=7000.0), Reading(2.0, energy_j=7000.5)]
    summary = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert (summary.energy_j, summary.energy_source) == (pytest.approx(0.5), "counter")


def test_no_readings_is_an_empty_window():
    summary = summarise("cpu", ScriptedBackend(), [])
    assert (summary.duration_s, summary.samples, summary.energy_j) == (0.0, 0, None)
    assert summary.unavailable["energy_j"] == "a snapshot has no window to integrate over"


def test_the_fold_keeps_the_hottest_reading_and_the_mean_and_peak_power():
    readings = [Reading(0.0, power_w=120.0, temperature_c=61.0), Reading(1.0, power_w=360.0, temperature_c=74.5),
                Reading(2.0, power_w=240.0, temperature_c=66.0)]
    summary = summarise("cuda:0", ScriptedBackend(), readings)
    assert (summary.power_w_mean, summary.power_w_max) == (pytest.approx(240.0), 360.0)
    assert summary.temperature_c_max == 74.5


def test_the_load_average_is_the_one_minute_figure(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 1.5, 2.5))
    assert summarise("cpu", ScriptedBackend(), [Reading(0.0)]).load_average_1m == 0.5


def test_logical_cpus_are_this_process_s_affinity_not_the_machine_s_count(monkeypatch):
    """A process pinned to 3 CPUs of a 64-CPU machine (taskset) has 3; os.sched_getaffinity(0) is this process."""
    asked = []

    def affinity(pid):
        asked.append(pid)
        return {0, 3, 5}

    monkeypatch.setattr(os, "sched_getaffinity", affinity)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert summarise("cpu", ScriptedBackend(), [Reading(0.0)]).logical_cpus == 3
    assert asked == [0]


def test_the_no_backend_reading_is_taken_now():
    before = telemetry.time.perf_counter()
    reading = NoBackend("no NVML").read(edge=False)
    assert before <= reading.time_s <= telemetry.time.perf_counter()


def test_the_sampler_thread_is_a_named_daemon_and_reads_background_samples_as_such(scripted):
    """A daemon thread never keeps the interpreter alive; its name tells a stack dump what it samples.
    Background readings are not edges (a CPU backend measures its clock only at edges)."""
    with Sampler("cpu", interval_s=0.001) as sampler:
        thread = sampler._thread
        assert (thread.name, thread.daemon) == ("telemetry-cpu", True)
        backend = scripted[0][2]
        deadline = telemetry.time.monotonic() + 5
        while len(backend.reads) < 3 and telemetry.time.monotonic() < deadline:
            telemetry.time.sleep(0.001)
    assert len(backend.reads) >= 4
    assert all(edge is False for edge in backend.reads[1:-1])
    assert "samples" not in sampler.summary.unavailable, "a window sampled without error has no 'samples' reason"


def test_a_sampler_samples_the_cpu_by_default(scripted):
    with Sampler(measure_clock=False) as sampler:
        pass
    assert sampler.device == "cpu" and scripted[0][0] == "cpu"
