"""The terminal text and the PNG, drawn from a crafted report document."""

import json

import pytest

from accounting.report.plot import write_plot
from accounting.report.render import render
from accounting.report.results import BandwidthMeasurement, assemble, bandwidth_section, dtype_section, write_json
from accounting.report.sweep import MatmulMeasurement

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def measured(dtype, m, k, n, flops_per_second, phase="ramp"):
    flops = 2 * m * k * n
    return MatmulMeasurement(dtype, m, k, n, flops, flops / flops_per_second, 0.0, 5, phase=phase)


@pytest.fixture
def crafted_report():
    """An H100-like report: bf16 healthy, float32 short of its floor."""
    bandwidth = BandwidthMeasurement(bytes_moved=2 * 2**31, seconds=1.6e-3, iqr_s=1e-5, repeats=10)
    curves = {
        "bfloat16": (989.4e12, 0.6, [(1024, 3.1e14), (2048, 6.0e14), (4096, 7.4e14), (8192, 7.8e14)]),
        "float32": (66.9e12, 0.8, [(1024, 2.0e13), (2048, 4.1e13), (4096, 4.9e13), (8192, 5.0e13)]),
    }
    dtypes = {}
    for dtype, (peak, floor, points) in curves.items():
        runs = [measured(dtype, size, size, size, rate) for size, rate in points]
        runs.append(measured(dtype, 8192, 8192, 8448, points[-1][1] * 1.01, phase="refine"))
        dtypes[dtype] = dtype_section(dtype, runs, peak=peak, floor=floor, bandwidth=bandwidth.bytes_per_second, spec_bandwidth=3.35e12)
    device = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "index": 0, "memory_bytes": 80 * 2**30,
              "compute_capability": [9, 0], "cpu_flags": None, "cores": 132}
    machine = {"platform": "Linux", "python": "3.11", "torch": "2.13.0", "accounting": "0.1.0", "device": device}
    return assemble(settings={"device": "cuda:0", "dtypes": list(dtypes), "budget_s": 30.0}, machine=machine,
                    bandwidth=bandwidth_section(bandwidth, 3.35e12), dtypes=dtypes, elapsed_s=31.0,
                    notes=["float8_e4m3fn skipped: crafted"])


def test_text_has_every_dtype_its_best_and_its_verdict(crafted_report):
    text = render(crafted_report)
    assert "NVIDIA H100 80GB HBM3" in text and "compute capability 9.0" in text
    assert "8192×8192×8448" in text  # the best bf16 shape
    assert "bfloat16  healthy: MFU 0.796" in text
    assert "float32   below floor: MFU 0.755 < floor 0.800" in text
    assert "machine: below floor" in text
    assert "of spec 3350 GB/s" in text
    assert "memory 80.00 GiB" in text and "(device copy, 2.00 GiB read + written" in text
    assert "float8_e4m3fn skipped" in text


def test_json_round_trips(crafted_report, tmp_path):
    path = tmp_path / "report.json"
    write_json(crafted_report, str(path))
    loaded = json.loads(path.read_text())
    assert loaded == json.loads(json.dumps(crafted_report))
    assert loaded["dtypes"]["bfloat16"]["best"]["n"] == 8448
    assert not list(tmp_path.glob("*.tmp-*")), "no temporary file is left behind"


def test_plot_is_a_real_png(crafted_report, tmp_path):
    import matplotlib.image

    path = tmp_path / "report.png"
    write_plot(crafted_report, str(path))
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    height, width, _ = matplotlib.image.imread(str(path)).shape
    assert (width, height) == (1080, 720)
    assert len(data) > 20_000, "a plot with curves, lines and a legend, not a blank canvas"


def test_plot_of_one_shape_per_dtype(crafted_report, tmp_path):
    """A tiny budget may measure one shape per dtype: the plot still has an axis to read."""
    import matplotlib.image

    for section in crafted_report["dtypes"].values():
        section["measurements"] = section["measurements"][:1]
        section["best"] = section["measurements"][0]
    path = tmp_path / "one.png"
    write_plot(crafted_report, str(path))
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    assert matplotlib.image.imread(str(path)).std() > 0, "not a blank image"
