"""The toolkit's figures (lessons_lib/plots.py)."""
import matplotlib.pyplot as plt
import numpy as np
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


# --- issue 28 §2: figures a reader can read --------------------------------------------------------
def _t(name, med, iqr=0.0):
    return timing.Timing(name, med, iqr, [med, med + iqr], 1, "m", "cpu")


def test_bars_spanning_more_than_twenty_times_get_a_log_axis():
    # lesson 03's block-diagonal (233 ms) flattened seven bars of 2-6 ms into slivers
    wide = plots.bars([_t("block-diagonal", 0.233), *(_t(f"v{i}", (2 + i / 2) * 1e-3) for i in range(7))])
    narrow = plots.bars([_t("a", 2e-3), _t("b", 30e-3)])
    try:
        assert wide.axes[0].get_xscale() == "log" and "log scale" in wide.axes[0].get_xlabel()
        assert narrow.axes[0].get_xscale() == "linear"
    finally:
        plt.close(wide)
        plt.close(narrow)


def test_a_floor_its_own_bar_beats_is_not_drawn_and_the_label_says_so():
    # lesson 03 in float16 on a CPU: floors of ~25 ms drawn above bars of 5-9 ms
    fig = plots.bars([_t("conv", 5e-3), _t("bmm", 9e-3)], {"conv": 25e-3, "bmm": 1e-3})
    try:
        ax = fig.axes[0]
        (ticks,) = ax.collections
        xs = np.ma.filled(np.ma.asarray(ticks.get_offsets())[:, 0], np.nan)
        assert np.isnan(xs[0]) and xs[1] == pytest.approx(1.0)  # none for conv; bmm's 1 ms drawn
        assert "no floor for conv: measured under it" in ax.get_xlabel()
    finally:
        plt.close(fig)


def test_a_one_point_sweep_sits_on_its_whole_number():
    # a stopped sweep of one point drew an axis "3.80 ... 4.20 groups"
    fig = plots.sweep([4], {"a": [1e-3], "b": [2e-3]}, xlabel="groups")
    try:
        ax = fig.axes[0]
        assert list(ax.get_xticks()) == [4]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["4"]
    finally:
        plt.close(fig)


def test_a_short_sweep_has_its_values_as_ticks():
    fig = plots.sweep([3, 5, 7], {"a": [1e-3, 2e-3, 3e-3]})
    try:
        assert list(fig.axes[0].get_xticks()) == [3, 5, 7]
    finally:
        plt.close(fig)


def test_a_sweep_with_a_metric_panel_has_one_legend_below_and_unit_labels():
    # lesson 07: the left legend covered the right panel's label, which ran into its title
    from lessons_lib import lesson07_capstone as L7

    ex = L7.explorer("cpu")
    names = [v.name for v in ex.lesson.variants]
    fig = ex._sweep_fig([16, 32, 64], {n: [1e-3, 2e-3, 4e-3] for n in names}, {n: [0, 0, 0] for n in names},
                        {"peak memory, forward + backward (MiB)": {n: [1.0, 2.0, 4.0] for n in names}},
                        "batch", None, "t")
    try:
        assert all(ax.get_legend() is None for ax in fig.axes)
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == names
        assert fig.axes[1].get_ylabel() == "MiB" and fig.axes[1].get_title().startswith("peak memory")
        fig.canvas.draw()  # the figure legend sits below every panel, overlapping none
        box = legend.get_window_extent()
        assert all(box.y1 <= ax.get_tightbbox().y0 + 1 for ax in fig.axes)
    finally:
        plt.close(fig)


def test_winner_map_marks_cells_the_noise_rule_did_not_decide():
    # lesson 03's heatmaps coloured a firm winner where its table said "not decided"
    fig = plots.winner_map([2, 4], [8, 16], [["loop", "bmm"], ["bmm", "bmm"]], ["loop", "bmm"],
                           decided=[[True, False], [False, False]])
    try:
        ax = fig.axes[0]
        hatched = [p for p in ax.patches if p.get_hatch()]
        assert len(hatched) == 3
        assert any("not decided" in t.get_text() for t in ax.get_legend().get_texts())
    finally:
        plt.close(fig)


def test_machines_keep_the_declared_order_and_print_the_caption():
    rows = {"H200 · measured": {"+ fused": 1e-3, "original": 8e-3, "+ gemm": 2e-3}}
    fig = plots.machines(rows, order=["original", "+ gemm", "+ fused"], caption="recorded at load 6")
    try:
        assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["original", "+ gemm", "+ fused"]
        assert any("recorded at load 6" in t.get_text() for t in fig.texts)
    finally:
        plt.close(fig)


# --- the floor's model: a CPU's peak in the faster memory order ------------------------------------------
def test_the_peak_matmul_takes_the_faster_memory_order(monkeypatch):
    # float16 on a CPU without a BLAS kernel for it: a @ b (row-major b) ran 15x slower than b column-major
    import time

    import torch

    real = torch.mm

    def mm(a, b):
        if b.is_contiguous():
            time.sleep(0.02)  # the slow path
        return real(a, b)

    monkeypatch.setattr(torch, "mm", mm)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    chosen = roofline._faster_order(a, b, torch.device("cpu"))
    assert not chosen.is_contiguous() and chosen.t().is_contiguous()
    assert torch.equal(chosen, b)  # the same matrix, stored the other way


def test_a_figure_made_off_the_main_thread_is_unknown_to_pyplot():
    # An explorer builds its figures on a worker thread. Made through pyplot there, in a kernel with pyplot's
    # interactive auto-draw, replayed figures came out corrupted at random in JupyterLab (bars over the title,
    # blank plots); the browser test replays one record twice and compares the images.
    import threading

    ts = [timing.Timing("a", 1e-3, 1e-4, [1e-3], 1, "", "cpu"), timing.Timing("b", 2e-3, 1e-4, [2e-3], 1, "", "cpu")]
    made = {}
    before = plt.get_fignums()
    worker = threading.Thread(target=lambda: made.update(fig=plots.bars(ts, title="off the main thread")))
    worker.start()
    worker.join()
    fig = made["fig"]
    assert plt.get_fignums() == before and fig.stale_callback is None  # no pyplot manager, no auto-draw
    assert fig.axes[0].get_xlabel() and fig.get_size_inches()[0] > 0
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")  # it renders like any other
    assert buf.getvalue()[:4] == b"\x89PNG"
    on_main = plots.bars(ts)
    assert on_main.number in plt.get_fignums()  # a notebook cell's figure is pyplot's: the cell shows it
    plt.close(on_main)


def test_machines_says_what_its_bars_are_measured_or_model():
    measured = {"H200 · measured 2026-11-26": {"a": 1e-3, "b": 2e-3}}
    model = {"T4 · model": {"a": 2e-3, "b": 3e-3}, "H100 · model": {"a": 1e-3, "b": 2e-3}}
    labels = {}
    for name, rows in (("measured", measured), ("model", model), ("both", {**measured, **model})):
        fig = plots.machines(rows)
        labels[name] = fig.axes[0].get_ylabel()
        plt.close(fig)
    assert labels["measured"].startswith("median time per call (ms")
    assert labels["model"].startswith("roofline floor per call (model)")  # a floor is not a median
    assert "median where measured, floor where model" in labels["both"]


# --- every figure fits: a long y label wraps to its axes, a caption goes under the legend (issue 34) -------------
def _drawn_extents(fig, artists: dict) -> dict:
    """Each artist's window extent as it was drawn the last time (savefig's cropped draw, for a saved PNG)."""
    seen = {}
    for name, artist in artists.items():
        def draw(renderer, _orig=artist.draw, _name=name, _artist=artist):
            seen[_name] = _artist.get_window_extent(renderer)
            return _orig(renderer)
        artist.draw = draw
    return seen


def test_a_y_label_longer_than_its_axes_is_wrapped_to_their_height():
    """07 §7: 'time per call: median where measured, floor where model (ms, log)' ran over the title and caption."""
    import io

    rows = {"H200 · measured 2026-11-26": {"original": 8e-3, "+ gemm": 2e-3},
            "T4 · model": {"original": 3e-3, "+ gemm": 1e-3}}
    fig = plots.machines(rows, title="One training step per stage", caption="recorded somewhere, " * 12)
    try:
        ax = fig.axes[0]
        seen = _drawn_extents(fig, {"label": ax.yaxis.label, "axes": ax.patch})
        fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")
        assert "\n" in ax.get_ylabel()
        assert seen["label"].height <= seen["axes"].height
        assert ax.get_ylabel().replace("\n", " ") == ax.yaxis.label._course_full  # the words kept, only wrapped
        ax.set_ylabel("short")  # a label set anew is wrapped (or not) afresh
        fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")
        assert ax.get_ylabel() == "short"
    finally:
        plt.close(fig)


def test_a_legend_under_the_panels_stays_above_the_caption_in_the_saved_picture():
    """02's recorded sweep: savefig(bbox_inches='tight') moved the figure's legend to the cropped picture's bottom,
    onto the caption."""
    import io

    fig, axes = plots.panels(2)
    for ax in axes:
        for name in ("broadcast matmul", "einsum", "3-D bmm", "custom Function", "checkpointed"):
            ax.plot([1, 2], [1, 2], label=name)
    plots.shared_legend(fig, axes[0])
    plots.caption_below(fig, "Intel(R) Xeon(R) Processor · measured: recorded with 1 thread, load 2.8-3.0. " * 3)
    try:
        seen = _drawn_extents(fig, {"legend": fig.legends[0], "caption": fig._course_caption})
        fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")
        assert seen["legend"].y0 > seen["caption"].y1  # the legend wholly above the caption
        assert seen["caption"].y0 >= 0  # and the caption inside the picture
    finally:
        plt.close(fig)
