"""Lesson 07's explorer declaration, record and targets (no clock in any assertion)."""
import pytest
import torch

from lessons_lib.lesson07_capstone import explore as X
from lessons_lib.lesson07_capstone import model as M


def test_lesson_has_a_variant_per_stage_and_traces_on_meta_at_the_gpu_shape():
    L = X.LESSON
    assert [v.name for v in L.variants] == X.STAGES and L.baseline == "original"
    gpu = {p.name: p.gpu for p in L.params}
    assert gpu == M.SHAPE["cuda"] and L.defaults("cpu") == M.SHAPE["cpu"]
    work = L.work(gpu)  # meta: the loops' host reads and boolean mask trace there too
    assert work["original"].launches > 5 * work["+ loop"].launches
    assert work["original"].bytes > 2 * work["+ loop"].bytes


def test_shapes_are_checked_before_anything_runs():
    with pytest.raises(ValueError, match="divisible"):
        X.LESSON.check({**M.SHAPE["cpu"], "H": 3}, "cpu", torch.float32)
    with pytest.raises(ValueError):
        X.LESSON.check({**M.SHAPE["cpu"], "batch": 0}, "cpu", torch.float32)


def test_a_run_reports_each_stages_peak_memory():
    small = {"C": 32, "H": 4, "E": 4, "T": 4, "batch": 8}
    run = X.LESSON.run(small, "cpu", min_run_time=0.01)
    peaks = {n: m["peak memory, forward + backward (MiB)"] for n, m in run.metrics.items()}
    assert peaks["original"] > peaks["+ loop"] > 0


def test_explorer_builds():
    assert X.explorer("cpu").lesson is X.LESSON


def _section(total, decided=True, peaks=(50e6, 2e6)):
    stages = {n: {"median_per_step": 0.01, "peak_bytes": None} for n in X.STAGES}
    stages["original"]["peak_bytes"], stages["+ loop"]["peak_bytes"] = peaks
    return {"waterfall": {"shape": M.SHAPE["cpu"], "stages": stages,
                          "total": {"median": total, "low": total, "high": total, "decided": decided}}}


def test_targets_hold_the_bars():
    ok = X.targets("cpu", _section(4.3))
    assert [t["ok"] for t in ok] == [True, True]
    assert X.targets("cpu", _section(2.9))[0]["ok"] is False
    assert X.targets("cpu", _section(4.3, decided=False))[0]["ok"] is False
    # a GPU's file: its targets are the GPU's (the shipped step's bar at the GPU shape), never the CPU's "n/a"
    assert [t["bar"] for t in X.targets("cuda", _section(4.3))] == ["< 1"]
    assert X.targets("cpu", _section(4.3, peaks=(2e6, 3e6)))[1]["ok"] is False
    assert X.targets("cpu", {}) == []


def test_record_quick_on_cpu_has_what_targets_and_the_explorer_read(monkeypatch):
    monkeypatch.setitem(M.SHAPE, "cpu", {"C": 32, "H": 4, "E": 4, "T": 4, "batch": 8})
    monkeypatch.setattr(X.LESSON.params[0], "cpu", 32)
    for p in X.LESSON.params[1:]:
        monkeypatch.setattr(p, "cpu", M.SHAPE["cpu"][p.name])
    rec = X.record("cpu", quick=True)
    assert set(rec["waterfall"]["stages"]) == set(X.STAGES)
    assert set(rec["headline"]["variants"]) == set(X.STAGES)
    assert len(X.targets("cpu", rec)) == 2


def _shipped(ratio, decided=True):
    r = {"median": ratio, "low": ratio, "high": ratio, "decided": decided}
    return {"shape": M.SHAPE["cuda"], "steps_per_call": 4, "rounds": 3, "median_per_step": {},
            "ratios": {"original -> fixed, eager": r, f"original -> {X.SHIPPED}": r}}


def test_a_gpus_target_is_the_shipped_step_at_the_gpu_shape_with_the_claims_bar():
    # The H200 (2026-11-26) recorded "07 fully fixed / original ... T=4, batch=32 ... (CPU): n/a on this device"
    sec = {**_section(4.3), "shipped": _shipped(14.5)}
    sec["waterfall"]["shape"] = M.SHAPE["cuda"]
    first = X.targets("cuda", sec)[0]
    assert first["ok"] is True and "one CUDA graph" in first["name"] and "T=16, batch=64" in first["name"]
    assert first["bar"].startswith(f">= {X.SPEEDUP_BAR_GPU:g}") and "(CPU)" not in first["bar"]
    assert X.targets("cuda", {**sec, "shipped": _shipped(4.0)})[0]["ok"] is False
    assert X.targets("cuda", {**sec, "shipped": _shipped(9.0, decided=False)})[0]["ok"] is False
    assert all("CUDA graph" not in t["name"] for t in X.targets("cpu", sec))


def test_targets_read_the_stages_by_name_not_by_order():
    # A saved file's keys are sorted ("+ fused" before "original"): record recomputes targets from it.
    sec = _section(4.3)
    sec["waterfall"]["stages"] = dict(sorted(sec["waterfall"]["stages"].items()))
    assert X.targets("cpu", sec)[1]["value"] == 2e6 / 50e6


def test_model_files_take_each_stages_work_as_cuda_runs_it():
    """record --model uses LESSON.model_work: each stage's launches as CUDA runs it (gpu.step_work), fewer than
    the op trace's count on meta, which takes the loop's reads of a CPU index for launches."""
    small = {"C": 32, "H": 4, "E": 4, "T": 4, "batch": 8}
    cuda = X.LESSON.model_work(small, torch.float32)
    traced = X.LESSON.work(small)
    assert set(cuda) == set(X.STAGES)
    assert cuda["original"].launches < traced["original"].launches - 2 * small["batch"]
    assert cuda["original"].launches > 3 * cuda["+ loop"].launches


def test_the_explorers_steps_keep_their_optimizer():
    small = {"C": 32, "H": 4, "E": 4, "T": 4, "batch": 8}
    x, y, models = X.make_inputs(small, torch.device("cpu"), torch.float32)
    step = X.LESSON.variant("original").fn
    step(x, y, models)
    opt = X._OPTS[models["original"]]
    step(x, y, models)
    assert X._OPTS[models["original"]] is opt and len(opt.state) == len(list(models["original"].parameters()))


def test_the_explorers_estimate_of_deciding_stops_where_deciding_does(monkeypatch):
    """Lesson 07's Run at its default shape beside two busy loops was refused (estimated 42 s against the 30 s
    budget): 34 s of it were ten full rounds of the contenders, where `decide` stops at DECIDE_MAX_TIME (it took
    1.8 s). Each variant predicted at 1 s a measurement here: no clock."""
    from lessons_lib.explorer_verdict import DECIDE_MAX_ROUNDS, DECIDE_MAX_TIME

    ex = X.explorer("cpu")
    monkeypatch.setattr(ex.lesson, "predict", lambda cal, params, variants=None, **kw: float(len(variants)))
    one_round = len(X.STAGES)  # every stage predicted alike: all are contenders
    assert one_round < ex._decide_estimate(None, X.LESSON.defaults("cpu")) <= DECIDE_MAX_TIME + one_round
    monkeypatch.setattr(ex.lesson, "predict", lambda cal, params, variants=None, **kw: 0.01 * len(variants))
    fast = ex._decide_estimate(None, X.LESSON.defaults("cpu"))
    assert fast == pytest.approx(DECIDE_MAX_ROUNDS * 0.06)  # fast rounds: up to the last look
