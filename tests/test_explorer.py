"""The explorer (widgets.Explorer, explorer_ui): runs, sweeps, replays, the widget and its errors."""
import matplotlib.pyplot as plt
import pytest
import torch

from lessons_lib import device, results, roofline
from lessons_lib.lesson import Lesson, Param, Variant
from lessons_lib.widgets import Explorer, default_sweep_values


# --- a tiny lesson to drive the generic machinery --------------------------------------------
def _toy():
    return Lesson(
        key="toy", title="toy",
        params=[Param("n", "n", cpu=8, gpu=8, lo=1, hi=1 << 20)],
        variants=[Variant("mm", lambda a, b: a @ b), Variant("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b))],
        make_inputs=lambda p, d, dt: (torch.randn(p["n"], p["n"], device=d, dtype=dt),) * 2,
        peak_bytes=lambda p, dt: 3 * p["n"] ** 2 * 4,
        reduction=lambda p: p["n"], baseline="mm",
    )


def test_explorer_runs_sweeps_and_replays(tmp_path):
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    run, fig = ex.run(n=16)
    assert set(run.timings) == {"mm", "einsum"}
    assert fig.axes[0].get_xlabel().startswith("time per call")
    plt.close(fig)
    sw, fig = ex.sweep("n", [4, 8, 16], on_step=lambda i, n: None)
    assert sw.values == [4, 8, 16]
    assert len(sw.medians()["mm"]) == 3
    assert fig.axes[0].get_xlabel() == "n"
    assert "time per call" in fig.axes[0].get_ylabel()
    plt.close(fig)
    with pytest.raises(ValueError, match="dtype"):
        ex.run(dtype="float8")
    # a recorded file (as a GPU run would write it) replays without running anything
    info = device.describe("cpu")
    info.kind, info.name = "cuda", "NVIDIA Test GPU"
    results.save(info, {"toy": {"headline": results.run_to_dict(run, roofline.Peaks(1e12, 1e11, 5e-6, "t")),
                                "sweeps": {"n": results.sweep_to_dict(sw)}}}, tmp_path)
    (rec,) = results.for_lesson("toy", gpu_only=True, directory=tmp_path)
    figs = ex.replay(rec)
    assert len(figs) == 2
    assert "Test GPU" in figs[0].axes[0].get_title()
    for f in figs:
        plt.close(f)


def test_explorer_widget_builds_and_reports_errors_in_place():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ui = ex.widget()
    assert ex.sliders["n"].value == 8
    assert ex.run_b.description == "Run"
    ex.sliders["n"].value = 1 << 20  # too big: refused with a message, nothing raised
    ex._act(ex._do_run, background=False)
    assert "needs about" in ex.status.value
    assert not ex.run_b.disabled
    ex.sliders["n"].value = 8
    ex._act(ex._do_run, background=False)
    assert "needs about" not in ex.status.value
    assert "unexpected" not in ex.status.value
    assert any("image/png" in o.get("data", {}) for o in ex.out.outputs)  # the figure, in the widget
    assert ui is ex.widget()


def test_default_sweep_values_stay_in_range():
    vals = default_sweep_values(_toy(), "n", 8)
    assert vals == sorted(set(vals))
    assert vals[0] >= 1
    assert 8 in vals
