"""Lesson 05 (CUDA graphs, seed 003): the explorer (the model beside a run, refusals, a GPU run with its capture cost),
record and targets (explore.py)."""
import dataclasses

import matplotlib.pyplot as plt
import pytest

from lessons_lib.lesson05_cuda_graphs import explore, lessons
from .helpers import CUDA


# --- the explorer -----------------------------------------------------------------------------------
def test_an_unknown_gpu_preset_is_refused():
    with pytest.raises(ValueError, match="T4"):
        explore.explorer("cpu", gpu="Voodoo2")


def test_the_explorer_shows_the_model_beside_a_cpu_run(one_thread):
    ex = explore.explorer("cpu")
    run, fig = ex.run(width=16, batch=8, layers=2)
    assert set(run.metrics["eager"]) == {"T4 model: eager ÷ graphed (×, predicted)",
                                         "T4 model: GPU idle in eager (%, predicted)"}
    plt.close(fig)


def test_the_explorer_refuses_a_shape_that_does_not_fit_before_allocating(monkeypatch):
    monkeypatch.setattr(lessons.LESSON, "make_inputs", lambda *a: pytest.fail("allocated"))
    with pytest.raises(ValueError):
        explore.explorer("cpu").run(width=16384, batch=1 << 20, layers=64)


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_the_gpu_explorer_times_eager_and_the_graph_with_its_capture_cost(one_thread, monkeypatch):
    from lessons_lib import roofline

    # the peaks only feed the estimate and the floors; measuring them (an 8192² matmul) is slow on a simulated GPU
    monkeypatch.setattr(roofline, "measure_peaks", lambda *a, **k: roofline.Peaks(1e12, 1e11, 1e-5, "test"))
    run, fig = explore.explorer("cuda").run(width=16, batch=8, layers=2)
    assert {"eager", "CUDA graph"} <= set(run.timings)
    assert run.prepare_seconds["CUDA graph"] > 0
    assert run.work["CUDA graph"].launches == 1 and run.work["eager"].launches > 1  # a replay is one launch
    plt.close(fig)


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_the_gpu_explorer_counts_capture_and_compile_before_it_has_seen_them():
    import torch
    from lessons_lib import compiling
    from lessons_lib.lesson05_cuda_graphs import on_gpu

    ex = explore.explorer("cuda")
    budgets = {v.name: v.prepare_budget for v in ex.lesson.variants if v.prepare is not None}
    assert budgets["CUDA graph"] == on_gpu.CAPTURE_BUDGET_S
    assert budgets.get("reduce-overhead", compiling.COMPILE_BUDGET_S) == compiling.COMPILE_BUDGET_S
    assert ex._prepare_estimate(torch.float32, torch.device("cuda")) == pytest.approx(sum(budgets.values()))


def test_a_replayed_graph_is_one_launch_of_the_eager_steps_work():
    # The H200's recorded file drew a floor of 38 launches (272 µs) beside a replay measured at 82 µs
    p = {"width": 512, "batch": 64, "layers": 4}
    eager, work = lessons.LESSON.work(p)["eager"], explore.replayed_work(p)
    assert set(work) == set(explore.REPLAYED) and eager.launches == 38
    for w in work.values():
        assert w.launches == 1 and (w.flops, w.bytes) == (eager.flops, eager.bytes)
    assert explore.explorer("cpu").work_of is explore.replayed_work


# --- recorded results --------------------------------------------------------------------------------
def test_record_quick_on_cpu_measures_eager_only(monkeypatch, one_thread):
    monkeypatch.setattr(explore, "OVERHEAD_BOUND", {"width": 16, "batch": 8, "layers": 2})
    monkeypatch.setattr(lessons.LESSON, "params", [dataclasses.replace(p, cpu=8) for p in lessons.LESSON.params])
    out = explore.record("cpu", quick=True)
    assert set(out["overhead_bound"]["variants"]) == {"eager"}
    assert out["dispatch_s"] > 0
    assert explore.targets("cpu", out) == []  # no graphed figure on a CPU: no bar to speak to


def test_targets_read_a_gpu_section():
    sec = {"overhead_bound": {"variants": {"eager": {"median": 3.0}, "CUDA graph": {"median": 1.0}}},
           "kernel_bound": {"variants": {"eager": {"median": 1.0}, "CUDA graph": {"median": 1.14}},
                            "parts": {"replay": 1.02, "with_copies": 0.88, "copies_model": 0.846}}}
    assert [(t["name"], t["ok"]) for t in explore.targets("cuda", sec)] == [
        ("graph speed-up, overhead-bound step", True), ("graph replay, kernel-bound step", True),
        ("graph replay + input copies, kernel-bound step", True)]
    sec["kernel_bound"]["parts"]["replay"] = 0.88  # the H200's figure with the copies counted: not the replay's bar
    assert [t["ok"] for t in explore.targets("cuda", sec)] == [True, False, True]


def test_recorded_graph_rows_have_one_launch_and_a_floor_below_the_measurement():
    from lessons_lib import results

    rows = [(rec.label(), name, row) for rec in results.for_lesson(lessons.KEY, kinds="measured")
            for key in ("headline", "overhead_bound", "kernel_bound")
            for name, row in rec.lessons[lessons.KEY].get(key, {}).get("variants", {}).items()
            if name in explore.REPLAYED]
    for label, name, row in rows:  # the H200 file drew 272 µs (38 launches) beside an 82 µs replay
        assert row["launches"] == 1 and row["floor"] <= row["median"], (label, name, row)
