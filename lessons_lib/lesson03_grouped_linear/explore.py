"""Lesson 03's explorer and recorded results: explorer(), record and targets (read by `python -m lessons_lib.record`)."""
from __future__ import annotations

import dataclasses
import os

import torch

from .. import compiling, noise, results, roofline, trace
from .. import device as _device
from .. import grouped_linear as GL
from ..grouped_linear import tuning as GL_tuning
from ..display import count
from ..widgets import Explorer
from .crossover import crossover_grid, Grid, GRID_CPU, GRID_GPU, GRID_VARIANTS, paired_check
from .evidence import tf32_note
from .lessons import (  # noqa: F401 (KEY, the Lessons: read by record)
    AUTO, FORUM, KEY, LESSON, THREAD_SHAPE, TRAIN_LESSON, with_variants,
)


def explorer(device=None, training: bool = False, compiled: bool | None = None) -> Explorer:
    """The toolkit's explorer: batch, groups, group size and length, and dtype (float32, float16,
    bfloat16: the replier ran fp16). The explorer has no forward/training control of its own, so one
    explorer explores one of them: `training=True` for the training step. GroupedLinear(auto) is
    tuned before its timed calls (the tuning is not in its bar); grouped_mm joins where it runs for
    float32 here; a compiled loop on a GPU (on a CPU each shape would cost seconds of compiling)."""
    dev = _device.pick(device)
    lesson = TRAIN_LESSON if training else LESSON
    if compiled is None:
        compiled = dev.type == "cuda" and compiling.problem(dev) is None
    grouped = GL.grouped_mm_problem(dev, torch.float32, training=training) is None and dev.type == "cuda"
    lesson = with_variants(lesson, auto=True, grouped=grouped, compiled=compiled)
    if tf32_note(dev):  # every figure's title says which float32 timings are TF32 on this GPU
        lesson = dataclasses.replace(lesson, title=f"{lesson.title} ({_tf32_title()})")
    return Explorer(lesson, dev, sections=training_sections if training else forward_sections)


def forward_sections(rec: results.Recorded) -> tuple[str, dict] | None:
    """The forward explorer's figures in a recorded file: its section, less the sweep where `record` below
    wrote it (that sweep times the training step; a file with "headline_train" is one of `record`'s)."""
    data = rec.lesson(KEY)
    if not data:
        return None
    if "headline_train" in data:
        data = {k: v for k, v in data.items() if k != "sweeps"}
    return KEY, data


def training_sections(rec: results.Recorded) -> tuple[str, dict] | None:
    """The training explorer's figures: a model file's own section, or, in a file `record` wrote, its
    training headline and its group-size sweep (both the training step's), inside the 03 section."""
    data = rec.lesson(TRAIN_LESSON.key)
    if data:
        return TRAIN_LESSON.key, data
    data = rec.lesson(KEY) or {}
    if data.get("headline_train"):
        return KEY, {"headline": data["headline_train"], "sweeps": data.get("sweeps", {})}
    return None


def _tf32_title() -> str:
    conv, gemm = trace.tf32_enabled("conv"), trace.tf32_enabled("matmul")
    if conv and gemm:
        return "float32: every variant in TF32"
    return ("float32: grouped Conv1d in TF32 (cuDNN's default), GEMMs in full float32" if conv else
            "float32: GEMMs in TF32, grouped Conv1d in full float32")


# --- recorded results and targets -------------------------------------------------------------------------


# `record --quick` on a GPU must fit ~15 s (GPU validation gives a lesson 25 s; the H200 ran past it twice, still in
# the headline: at min_run_time 50 ms a GPU measurement's blocks grow to 50-500 ms, times 7 samples, 1-3.5 s a
# variant). Quick: samples of one call on a GPU (min_run_time 1 ms: about 11 calls a measurement), each measurement
# of the headline and the sweep within QUICK_MEASURE_S, tuning within QUICK_TUNE_BUDGET_S a shape, 3 paired rounds.
# Estimated from the H200's notebook timings (two notebooks at a time, so about twice the probe's): headline
# forward 1.2 s and training step 2.1 s (the 110 ms block-diagonal step capped at ~6 calls), the sweep's two sizes
# 2.4 s, the grids' four points 2.7 s, their paired rounds 1.2 s (4 s at worst): about 10 s, 15 s at worst, plus
# the device's peaks where no lesson before measured them. tests/lesson03/test_explore.py counts that work.
QUICK_TUNE_BUDGET_S = 0.25
QUICK_MEASURE_S = 0.25  # each measurement of the headline and the sweep, warm-up included
QUICK_PAIRED = {"rounds": noise.MIN_ROUNDS, "max_rounds": noise.MIN_ROUNDS, "max_time": 1.5}  # one look: the rule's minimum
SWEEP_SIZES = {"cpu": [8, 16, 32, 64, 128], "cuda": [16, 32, 64, 100, 128, 256]}


def _min_run_time(dev: torch.device, quick: bool, cpu_quick: float, full: float) -> float:
    """A measurement's min_run_time: on a GPU in a quick run 1 ms, so that blocked_autorange's block is one
    call (or ~1 ms of calls) and not the 10-100 ms blocks the timer's overhead rule asks for."""
    if not quick:
        return full
    return 1e-3 if dev.type == "cuda" else cpu_quick


def record(device, quick: bool = False) -> dict:
    """Headline runs (forward and training step, GroupedLinear(auto) included), a group-size sweep,
    the crossover grids (forward and training step, ≥ 12 points with auto), and tuning costs. quick: a smoke
    run (short timings, 2 sweep points, 2 grid points a grid, auto tuning within QUICK_TUNE_BUDGET_S a shape)."""
    budget = GL_tuning.TUNE_BUDGET_S
    if quick:
        GL_tuning.TUNE_BUDGET_S = min(budget, QUICK_TUNE_BUDGET_S)
    try:
        return _record(torch.device(device), quick)
    finally:
        GL_tuning.TUNE_BUDGET_S = budget


def _record(dev: torch.device, quick: bool) -> dict:
    t = _min_run_time(dev, quick, 0.05, 0.2)
    cap = QUICK_MEASURE_S if quick else None
    pk = roofline.measure_peaks(dev)
    fwd, train = with_variants(LESSON, auto=True), with_variants(TRAIN_LESSON, auto=True)
    shape = THREAD_SHAPE if dev.type == "cuda" else LESSON.defaults(dev)
    GL.clear_cache()
    out = {"headline": results.run_to_dict(fwd.run(shape, dev, min_run_time=t, max_time=cap), pk),
           "headline_train": results.run_to_dict(train.run(shape, dev, min_run_time=t, max_time=cap), pk)}
    sizes = SWEEP_SIZES["cpu" if dev.type == "cpu" else "cuda"]
    if quick:
        sizes = sizes[:2]
    sw = train.sweep("group_size", sizes, None if dev.type == "cpu" else THREAD_SHAPE, dev,
                     min_run_time=max(t / 2, 1e-3), progress=False, max_time=cap)
    out["sweeps"] = {"group_size": results.sweep_to_dict(sw)}
    grid = GRID_GPU if dev.type == "cuda" else GRID_CPU
    if quick:
        grid = {"groups": grid["groups"][:1], "group_size": grid["group_size"][:2]}
    names = [*GRID_VARIANTS, FORUM, AUTO]
    paired = QUICK_PAIRED if quick else {"rounds": noise.MIN_ROUNDS, "max_rounds": noise.MIN_ROUNDS, "max_time": 20.0}
    out["grids"] = {}
    for kind, training in (("forward", False), ("training", True)):
        GL.clear_cache()
        g = crossover_grid(dev, grid["groups"], grid["group_size"], training=training, variants=names,
                           max_time=0.6 if not quick else 0.03,
                           min_run_time=_min_run_time(dev, quick, 0.03, 0.1))
        out["grids"][kind] = g.as_dict()
        if AUTO in g.medians:
            out.setdefault("paired", {})[kind] = paired_check(g, min_run_time=_min_run_time(dev, quick, 0.01, 0.05),
                                                               **paired)
    out["tuning_seconds"] = [c.seconds for c in GL.cache().values()]
    out["busy"] = sorted({c.busy for c in GL.cache().values() if c.busy})
    try:
        out["load_average"] = os.getloadavg()[0]
    except (AttributeError, OSError):
        pass
    return out


BAR = 1.15  # auto / fastest and auto / forum baddbmm, at every point of the grid (issue 20 §3)


def targets(device, section: dict) -> list[dict]:
    """The issue's bars as measured here: auto within 1.15× of the fastest contender and of the forum
    baddbmm at every grid point (paired rounds); tuning ≤ 2 s a shape on a quiet CPU; on a GPU, the best
    training step ≥ 1.5× faster than grouped Conv1d."""
    gpu = torch.device(device).type == "cuda"
    out = []
    for kind, data in section.get("grids", {}).items():
        grid = Grid(**data)
        if AUTO not in grid.medians:
            continue
        points = len(grid.groups) * len(grid.sizes)
        single = max(grid.medians[AUTO][i][j] / min(grid.medians[n][i][j] for n in grid.contenders())
                     for i in range(len(grid.groups)) for j in range(len(grid.sizes)))
        paired = (section.get("paired") or {}).get(kind)
        if paired:  # the bar is judged on the paired re-timing; the single pass is shown beside it
            undecided = sum(not d for row in paired.get("decided", []) for d in row)
            note = f" ({undecided} of {count(points, 'point')} not decided: a busy machine)" if undecided else ""
            worst = max(max(row) for row in paired["ratios"])
            out.append({"name": f"03 GroupedLinear(auto) / fastest variant, median of ≥ {paired['rounds']} alternating "
                                f"rounds, worst of {count(points, 'grid point')} ({kind}){note}",
                        "value": worst, "bar": f"<= {BAR}", "ok": worst <= BAR})
            if paired.get("forum"):
                worst = max(max(row) for row in paired["forum"])
                out.append({"name": f"03 GroupedLinear(auto) / forum baddbmm over a (G, in, out) weight, median of ≥ "
                                    f"{paired['rounds']} alternating rounds, worst of {count(points, 'grid point')} ({kind})",
                            "value": worst, "bar": f"<= {BAR}", "ok": worst <= BAR})
        out.append({"name": f"03 GroupedLinear(auto) / fastest variant, the grid's single pass, worst of "
                            f"{count(points, 'grid point')} ({kind})", "value": single,
                    "bar": f"<= {BAR}" if not paired else "info (noise included)",
                    "ok": (single <= BAR) if not paired else None})
    tune = section.get("tuning_seconds") or []
    if tune:
        busy = bool(section.get("busy"))
        out.append({"name": "03 GroupedLinear auto-tuning seconds per new shape (worst)"
                            + (" — tuned on a busy machine" if busy else ""), "value": max(tune),
                    "bar": "<= 2 (quiet CPU)" if not busy else "info (busy machine)",
                    "ok": max(tune) <= 2.0 if not gpu and not busy else None})
    head = (section.get("headline_train") or {}).get("variants", {})
    if "grouped Conv1d" in head:
        best = min(v["median"] for n, v in head.items() if n != "grouped Conv1d")
        speedup = head["grouped Conv1d"]["median"] / best
        out.append({"name": "03 best training step vs grouped Conv1d at the headline shape", "value": speedup,
                    "bar": ">= 1.5 (GPU claim: the thread's reported 1.52x; the Conv1d in TF32, cuDNN's default)",
                    "ok": speedup >= 1.5 if gpu else None})
    return out
