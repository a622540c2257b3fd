"""Burst and sustained headlines on the report's plot: their markers, places, colours and legend (artists, not pixels)."""

import pytest

from accounting.report.headlines import Headline
from accounting.report.plot import draw_plot, headline_label, write_plot
from accounting.report.results import assemble, bandwidth_section, dtype_section
from tests.test_report_render import PNG_SIGNATURE, measured

pytest.importorskip("matplotlib")
import matplotlib.pyplot as pyplot  # noqa: E402 - after the skip


def headline(dtype, kind, tflops, shape, *, published=True, clock_mhz=1980.0, power_w=700.0):
    return Headline(dtype, kind, published, flops_per_s=tflops * 1e12, shape=shape, flops=2 * shape[0] * shape[1] * shape[2],
                    repeats=9, clock_mhz=clock_mhz, power_w=power_w,
                    reason=None if published else "clock 1700 MHz below 0.97 × the run's highest")


def report_with(headlines_by_dtype):
    curves = {"bfloat16": [(2048, 6.0e14), (4096, 7.4e14), (8192, 7.8e14)],
              "float32": [(2048, 4.1e13), (4096, 4.9e13), (8192, 5.0e13)]}
    dtypes = {}
    for dtype, points in curves.items():
        runs = [measured(dtype, size, size, size, rate) for size, rate in points]
        dtypes[dtype] = dtype_section(dtype, runs, peak=None, floor=None, bandwidth=None, spec_bandwidth=None,
                                      headlines=headlines_by_dtype.get(dtype))
    device = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "index": 0, "memory_bytes": 80 * 2**30}
    machine = {"platform": "Linux", "python": "3.11", "torch": "2.13.0", "accounting": "0.1.0", "device": device}
    return assemble(settings={"device": "cuda:0", "dtypes": list(dtypes), "budget_s": 60.0}, machine=machine,
                    bandwidth=bandwidth_section(None, None), dtypes=dtypes, elapsed_s=60.0, notes=[])


HEADLINES = {
    "bfloat16": {"burst": headline("bfloat16", "burst", 790.0, (8192, 8192, 8448)),
                 "sustained": headline("bfloat16", "sustained", 705.0, (4096, 4096, 4096), clock_mhz=1755.0)},
    "float32": {"burst": headline("float32", "burst", 51.0, (8192, 8192, 8192), published=False, clock_mhz=1700.0),
                "sustained": headline("float32", "sustained", 48.0, (8192, 4096, 8192), clock_mhz=None, power_w=None)},
}


@pytest.fixture
def drawn():
    report = report_with(HEADLINES)
    figure = draw_plot(report)
    yield report, figure
    pyplot.close(figure)


def markers(axes, symbol):
    return [line for line in axes.get_lines() if line.get_marker() == symbol]


def curve_colour(axes, dtype):
    """The colour of the ramp curve whose label starts with the dtype."""
    return next(line.get_color() for line in axes.get_lines() if line.get_label().split(" ")[0] == dtype)


def test_each_published_headline_is_a_marker_at_its_shape_in_its_dtypes_colour(drawn):
    _report, figure = drawn
    axes = figure.axes[0]
    expected = [(dtype, figure_.kind, figure_) for dtype, kinds in HEADLINES.items() for figure_ in kinds.values()
                if figure_.published]
    for dtype, kind, figure_ in expected:
        symbol = {"burst": "^", "sustained": "D"}[kind]
        m, k, n = figure_.shape
        found = [line for line in markers(axes, symbol)
                 if line.get_xdata()[0] == pytest.approx((m * k * n) ** (1 / 3))
                 and line.get_ydata()[0] == pytest.approx(figure_.flops_per_s / 1e12)]
        assert len(found) == 1, f"{dtype} {kind}"
        assert found[0].get_color() == curve_colour(axes, dtype)
    assert len(markers(axes, "^")) == 1, "the withheld float32 burst is not drawn"
    assert len(markers(axes, "D")) == 2


def test_the_headline_legend_lists_each_with_its_clock_and_the_figure_legend_does_not(drawn):
    report, figure = drawn
    legend = figure.axes[0].get_legend()
    assert legend.get_title().get_text() == "headlines"
    texts = [text.get_text() for text in legend.get_texts()]
    assert texts == ["bfloat16 burst 790 TFLOP/s at 1980 MHz, 700 W", "bfloat16 sustained 705 TFLOP/s at 1755 MHz, 700 W",
                     "float32 sustained 48 TFLOP/s (clock unknown)"]
    assert texts == [headline_label(dtype, report["dtypes"][dtype]["headlines"][kind])
                     for dtype, kind in (("bfloat16", "burst"), ("bfloat16", "sustained"), ("float32", "sustained"))]
    below = [text.get_text() for text in figure.legends[0].get_texts()]
    assert below == ["bfloat16 (best 780 TFLOP/s)", "float32 (best 50 TFLOP/s)"]
    assert "▲ burst, ◆ sustained" in figure.axes[0].get_xlabel()


def test_without_headlines_there_is_no_headline_legend():
    figure = draw_plot(report_with({}))
    try:
        axes = figure.axes[0]
        assert axes.get_legend() is None
        assert not markers(axes, "^") and not markers(axes, "D")
        assert "burst" not in axes.get_xlabel()
    finally:
        pyplot.close(figure)


def test_the_png_is_written_with_headlines(tmp_path):
    path = tmp_path / "report.png"
    write_plot(report_with(HEADLINES), str(path))
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert not pyplot.get_fignums(), "the figure is closed after writing"
