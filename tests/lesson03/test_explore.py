"""Lesson 03 (many small Linear layers in parallel, forum seed 002): the explorer, record and targets (explore.py)."""

import dataclasses

import pytest

from lessons_lib import roofline
from lessons_lib import grouped_linear as GL
from lessons_lib.grouped_linear import tuning as GL_tuning  # where tuning reads _CACHE and TUNE_BUDGET_S
from lessons_lib import lesson03_grouped_linear as L
from lessons_lib.lesson03_grouped_linear import crossover, explore, lessons
from .helpers import _boom


@pytest.mark.parametrize("kwargs, message", [
    ({"groups": 0}, "groups"),
    ({"groups": 1024, "group_size": 1024}, "65536"),
    ({"batch": 1.5}, "whole number"),
])
def test_explorer_refuses_bad_input_before_allocating(monkeypatch, kwargs, message):
    ex = L.explorer("cpu")
    monkeypatch.setattr(ex.lesson, "make_inputs", _boom)
    with pytest.raises(ValueError, match=message):
        ex.run(**kwargs)


def test_targets_read_a_recorded_section():
    grid = crossover.Grid([4], [8], {}, True, {"loop (SlowGroups)": [[2.0]], "grouped Conv1d": [[1.0]],
                                       "GroupedLinear(auto)": [[1.05]]}, "cpu")
    section = {"grids": {"training": grid.as_dict()}, "tuning_seconds": [0.7, 1.2],
               "headline_train": {"variants": {"grouped Conv1d": {"median": 3.0}, "einsum": {"median": 1.5}}}}
    out = {t["name"]: t for t in explore.targets("cpu", section)}
    auto = next(t for n, t in out.items() if "auto) / fastest" in n)
    assert auto["value"] == pytest.approx(1.05) and auto["ok"] is True
    tune = next(t for n, t in out.items() if "tuning" in n)
    assert tune["value"] == 1.2 and tune["ok"] is True
    conv = next(t for n, t in out.items() if "Conv1d" in n)
    assert conv["value"] == pytest.approx(2.0) and conv["ok"] is None  # a GPU claim: n/a on a CPU


def test_targets_judge_the_paired_re_timing_and_show_the_single_pass_beside_it():
    grid = crossover.Grid([4], [8, 16], {}, False, {"grouped Conv1d": [[1.0, 1.0]], lessons.AUTO: [[1.3, 0.9]]}, "cpu")
    section = {"grids": {"forward": grid.as_dict()},
               "paired": {"forward": {"ratios": [[1.04, 1.02]], "forum": [[0.98, 1.1]], "decided": [[True, True]],
                                      "against": [["grouped Conv1d"] * 2], "rounds": 5}}}
    out = explore.targets("cpu", section)
    paired = next(t for t in out if "fastest variant, median" in t["name"])
    forum = next(t for t in out if "forum baddbmm" in t["name"])
    single = next(t for t in out if "single pass" in t["name"])
    assert paired["value"] == pytest.approx(1.04) and paired["ok"] is True and paired["bar"] == "<= 1.15"
    assert forum["value"] == pytest.approx(1.1) and forum["ok"] is True
    assert single["value"] == pytest.approx(1.3) and single["ok"] is None and single["bar"].startswith("info")
    section["paired"]["forward"]["forum"] = [[1.04, 1.2]]
    assert next(t for t in explore.targets("cpu", section) if "forum baddbmm" in t["name"])["ok"] is False


def test_auto_is_tuned_before_its_timed_calls_and_its_floor_is_the_strategy_it_runs(monkeypatch):
    p = {"batch": 1, "groups": 2, "group_size": 4, "length": 3}
    lesson = L.with_variants(L.TRAIN_LESSON, auto=True, forum=True)
    tuned = []
    real = GL.tune
    monkeypatch.setattr(GL, "tune", lambda *a, **k: (tuned.append(a[0].device.type), real(*a, **k))[1])
    run = lesson.run(p, "cpu", variants=[lessons.AUTO, lessons.FORUM], min_run_time=0.001, max_time=0.05)
    assert lessons.AUTO in run.prepare_seconds and tuned[0] == "cpu"  # tuned in prepare, before the clock
    chosen = GL.cached_strategies("cpu", 2, 4, True)[0]
    work = lesson.work(p)
    assert work[lessons.AUTO].launches < 100  # its strategy's trace, not a tuning run's (thousands of ops)
    rows = lesson.check_correct(device="cpu")
    assert all(r.ok for r in rows if r.variant in (lessons.AUTO, lessons.FORUM)), chosen


def test_the_estimate_counts_auto_tuning_and_a_compile_before_it_has_seen_them():
    """Before a run, the explorer counts GroupedLinear(auto)'s tuning budget and the compiled loop's compile budget
    (the H200's first run was estimated without either); after one, what preparing took here."""
    import torch
    from lessons_lib import compiling

    ex = explore.explorer("cpu", compiled=True)
    budgets = {v.name: v.prepare_budget for v in ex.lesson.variants if v.prepare is not None}
    assert budgets == {lessons.AUTO: GL_tuning.TUNE_BUDGET_S, "compiled loop": compiling.COMPILE_BUDGET_S}
    cpu = torch.device("cpu")
    assert ex._prepare_estimate(torch.float32, cpu) == pytest.approx(GL_tuning.TUNE_BUDGET_S + compiling.COMPILE_BUDGET_S)
    ex._prepared_seen[(lessons.AUTO, torch.float32, "cpu")] = 0.1
    assert ex._prepare_estimate(torch.float32, cpu) == pytest.approx(0.1 + compiling.COMPILE_BUDGET_S)
    quick = GL_tuning.TUNE_BUDGET_S
    try:  # a quick record's lower tuning budget is what its variants declare
        GL_tuning.TUNE_BUDGET_S = 0.25
        assert L.with_variants(L.LESSON, auto=True).variant(lessons.AUTO).prepare_budget == 0.25
    finally:
        GL_tuning.TUNE_BUDGET_S = quick


def test_record_quick_on_cpu(monkeypatch, one_thread):
    monkeypatch.setattr(GL_tuning, "TUNE_BUDGET_S", 0.2)
    monkeypatch.setattr(roofline, "measure_peaks", lambda *a, **k: roofline.Peaks(1e10, 1e10, 1e-5, "test"))
    small = dataclasses.replace(L.LESSON, params=[
        dataclasses.replace(p, cpu={"batch": 1, "groups": 4, "group_size": 8, "length": 4}[p.name])
        for p in L.LESSON.params])
    for where in (explore, crossover):  # record reads the lessons in both
        monkeypatch.setattr(where, "LESSON", small)
        monkeypatch.setattr(where, "TRAIN_LESSON", dataclasses.replace(L.TRAIN_LESSON, params=small.params))
    section = explore.record("cpu", quick=True)
    assert set(section) >= {"headline", "headline_train", "sweeps", "grids", "tuning_seconds"}
    assert "GroupedLinear(auto)" in section["headline_train"]["variants"]
    assert set(section["grids"]) == {"forward", "training"} == set(section["paired"])
    assert lessons.FORUM in section["grids"]["forward"]["medians"]
    assert explore.targets("cpu", section)


def test_a_quick_record_tunes_within_its_own_budget_and_restores_it(monkeypatch):
    """The H200's `record --quick` spent over 90 s in this lesson, most of it auto-tuning ~10 shapes at 1.5 s."""
    seen = []
    monkeypatch.setattr(explore, "_record", lambda dev, quick: seen.append(GL_tuning.TUNE_BUDGET_S) or {})
    before = GL_tuning.TUNE_BUDGET_S
    explore.record("cpu", quick=True)
    explore.record("cpu")
    assert seen == [min(before, explore.QUICK_TUNE_BUDGET_S), before] and GL_tuning.TUNE_BUDGET_S == before


def test_a_quick_record_on_a_gpu_asks_for_bounded_work(monkeypatch):
    """`record --quick` ran past its 25 s cap on the H200, twice, still in the headline: at min_run_time 50 ms a
    GPU measurement's blocks grew to 50-500 ms, 7 of them a variant. Counted here on the simulated GPU at tiny
    shapes (the work asked for, never the seconds): every measurement takes samples of one call (min_run_time
    1 ms); the headline's and the sweep's are capped at QUICK_MEASURE_S, the grid's at 0.03 s; 2 headline runs,
    2 sweep points, 4 grid points and 3 paired rounds at each; 8 shapes tuned, each within QUICK_TUNE_BUDGET_S.
    explore.py's comment turns that into seconds from the H200's timings: about 10 s, 15 s at worst."""
    import torch

    from lessons_lib.lesson import Lesson

    if not torch.cuda.is_available():
        pytest.skip("needs the simulated GPU (-p tests.simgpu --simulate-gpu=h100) or a GPU")
    monkeypatch.setattr(explore, "THREAD_SHAPE", {"batch": 1, "groups": 2, "group_size": 4, "length": 4})
    monkeypatch.setattr(explore, "GRID_GPU", {"groups": [2, 4], "group_size": [4, 8, 16]})
    monkeypatch.setattr(explore, "SWEEP_SIZES", {"cpu": [], "cuda": [4, 8, 16]})
    monkeypatch.setattr(roofline, "measure_peaks", lambda *a, **k: roofline.Peaks(1e10, 1e10, 1e-5, "test"))
    runs, budgets = [], []
    real_run, real_tune = Lesson.run, GL_tuning._time_strategies

    def counting_run(self, params, device=None, dtype=None, variants=None, min_run_time=0.2, **kwargs):
        runs.append((min_run_time, kwargs.get("max_time")))
        return real_run(self, params, device, dtype or torch.float32, variants, min_run_time, **kwargs)

    def counting_tune(names, x, *args, ordered=False, **kwargs):
        if not ordered:  # a new shape's first look
            budgets.append(GL_tuning.TUNE_BUDGET_S)
        return real_tune(names, x, *args, ordered=ordered, **kwargs)

    monkeypatch.setattr(Lesson, "run", counting_run)
    monkeypatch.setattr(GL_tuning, "_time_strategies", counting_tune)
    section = explore.record("cuda", quick=True)
    assert all(mrt <= 1e-3 for mrt, _cap in runs)
    first = [cap for _mrt, cap in runs if cap in (0.03, explore.QUICK_MEASURE_S)]
    paired = [cap for _mrt, cap in runs if cap not in (0.03, explore.QUICK_MEASURE_S)]
    assert sorted(first) == [0.03] * 4 + [explore.QUICK_MEASURE_S] * 4  # 4 grid points; 2 headline + 2 sweep runs
    # the noise rule's minimum of paired rounds at each grid point (one look), each round's measurements within
    # the rounds' limit (noise._paired shares QUICK_PAIRED's max_time among the rounds the rule needs)
    assert 0 < len(paired) <= 4 * explore.QUICK_PAIRED["max_rounds"]
    assert all(cap is not None and cap <= explore.QUICK_PAIRED["max_time"] for cap in paired), paired
    assert len(budgets) <= 8 and set(budgets) == {explore.QUICK_TUNE_BUDGET_S}
    assert section["sweeps"]["group_size"]["values"] == [4, 8]
