"""The toolkit's figures (lessons_lib/plots.py)."""
import matplotlib.pyplot as plt
import pytest

from lessons_lib import plots, roofline, timing
from lessons_lib.lesson import Run, Sweep


# --- sweep_floors: a sweep on log-log axes with each variant's roofline floor -------------------------
def _sweep(values, per_point, param="width"):
    """A Sweep of two variants; per_point(v) -> {variant: (median s, Work)}."""
    runs = []
    for v in values:
        rows = per_point(v)
        runs.append(Run("toy", {param: v, "batch": 4 * v}, "float32", "cpu",
                        {n: timing.Timing(n, m, m / 10, [m], 1, "", "cpu") for n, (m, _w) in rows.items()},
                        {n: w for n, (_m, w) in rows.items()}))
    return Sweep("toy", param, list(values), runs)


PEAKS = roofline.Peaks(flops=1e9, bandwidth=1e9, launch=1e-6, source="test")


def _points(v):
    return {"gemm": (2 * v**2 / 1e9, roofline.Work(flops=v**2, bytes=v, launches=1)),  # compute past v=1
            "tiny": (2e-6, roofline.Work(flops=0, bytes=0, launches=1))}  # overhead everywhere


@pytest.fixture
def fig():
    f = plots.sweep_floors(_sweep([16, 32, 64, 128], _points), PEAKS, title="t")
    yield f
    plt.close(f)


def test_sweep_floors_uses_log_log_axes_base_two_for_powers_of_two(fig):
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert ax.xaxis.get_transform().base == 2


def test_sweep_floors_draws_each_floor_dashed_in_its_variants_colour(fig):
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    for name in ("gemm", "tiny"):
        measured, floor = lines[f"{name} (measured)"], lines[f"{name} floor"]
        assert floor.get_linestyle() == "--"
        assert floor.get_color() == measured.get_color()


def test_sweep_floors_floor_values_are_the_roofline_floors(fig):
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    unit, scale = plots.time_unit([2 * 128**2 / 1e9])
    want = [PEAKS.floor(roofline.Work(flops=v**2, bytes=v, launches=1)) / scale for v in (16, 32, 64, 128)]
    assert list(lines["gemm floor"].get_ydata()) == pytest.approx(want)


def test_sweep_floors_legend_names_the_regimes_that_occur(fig):
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "floor: compute-bound" in labels
    assert "floor: overhead-bound" in labels
    assert "floor: memory-bound" not in labels


def test_sweep_floors_per_row_divides_by_the_parameter():
    sw = _sweep([16, 32], _points)
    f = plots.sweep_floors(sw, PEAKS, per="batch", per_label="row")
    try:
        ax = f.axes[0]
        assert ax.get_ylabel().startswith("time per row")
        tiny = next(ln for ln in ax.get_lines() if ln.get_label() == "tiny (measured)")
        ys = list(tiny.get_ydata())
        assert ys[0] == pytest.approx(2 * ys[1])  # same time per call, twice the rows
    finally:
        plt.close(f)


def test_sweep_floors_other_values_get_a_base_ten_axis_and_the_param_as_label():
    f = plots.sweep_floors(_sweep([10, 30, 100], _points), PEAKS)
    try:
        assert f.axes[0].xaxis.get_transform().base == 10
        assert f.axes[0].get_xlabel() == "width"
    finally:
        plt.close(f)


# --- winner_map: which variant won at each cell --------------------------------------------------------
def test_winner_map_colours_each_cell_by_its_winner_and_lists_only_winners():
    order = ["loop", "bmm", "conv"]
    fig = plots.winner_map([2, 4], [8, 16, 32], [["loop", "bmm", "bmm"], ["bmm", "bmm", "bmm"]], order,
                           notes=[["a", "b", "c"], ["d", "e", "f"]], xlabel="size", ylabel="groups")
    ax = fig.axes[0]
    assert ax.images[0].get_array().tolist() == [[0, 1, 1], [1, 1, 1]]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["loop", "bmm"]  # conv never won
    assert [t.get_text() for t in ax.texts] == list("abcdef")
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("size", "groups")
    plt.close(fig)


# --- moved from test_toolkit.py ------------------------------------------------------------------
# --- plots and grading ------------------------------------------------------------------------
def test_plots_label_their_axes():
    t = [timing.Timing("a", 2e-3, 1e-4, [2e-3, 2.1e-3], 1, "m", "cpu")]
    for fig in (plots.bars(t, {"a": 1e-3}), plots.samples(t), plots.machines({"cpu": {"a": 1e-3}, "gpu": {"a": 1e-5}})):
        ax = fig.axes[0]
        assert "(" in (ax.get_xlabel() + ax.get_ylabel())  # a unit in parentheses
        plt.close(fig)
