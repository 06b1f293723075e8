"""Lesson 00's recorded results: the plots' rows, the recorded GPU figures, `record` and `targets`.

Lesson 00 has no explorer widget: its demos are the experiments. `python -m lessons_lib.record`
imports this module and reads KEY, `record` and `targets`.
"""
from __future__ import annotations

from dataclasses import asdict

from .. import noise, results, timing
from ..device import pick
from ..timing import Timing, fmt_time
from .demos import (Demo, demo_first_call, demo_hot_cache, demo_mean, demo_no_sync, demo_one_thread,
                    demo_random_data, demo_single_run, sizes)
from .pretend_gpu import SIM_KERNEL, SIM_LAUNCH, SIM_SYNC, sim_estimates

KEY = "00_timing"


# --- plots' data, recorded results, and the record command ------------------------------


SHORT = {"no_sync": "no sync", "first_call": "first call", "data_in_timed_region": "randn inside",
         "single_run": "one run", "mean_with_cold_start": "mean of 20", "one_thread": "1 thread (CPU)",
         "hot_cache": "hot cache"}  # axis labels for the demos


def rows_for_plot(demos: list[Demo], prefix: str = "") -> dict[str, dict[str, float]]:
    """{series: {mistake: seconds}} for plots.machines: the wrong way next to the harness."""
    return {f"{prefix}wrong way": {SHORT.get(d.key, d.key): d.wrong.median for d in demos},
            f"{prefix}harness": {SHORT.get(d.key, d.key): d.honest.median for d in demos}}


def recorded_rows(rec: results.Recorded) -> dict[str, dict[str, float]]:
    """The same rows from a recorded results file."""
    demos = rec.lesson(KEY)["demos"]
    name = rec.meta["name"].replace("NVIDIA ", "")
    return {f"{name}: wrong way": {SHORT.get(k, k): d["wrong"]["median"] for k, d in demos.items()},
            f"{name}: harness": {SHORT.get(k, k): d["honest"]["median"] for k, d in demos.items()}}


def recorded_gpu_summary(demo: str | None = None) -> str:
    """What recorded GPU results say about each mistake (or only `demo`), or that none exist yet."""
    recs = results.for_lesson(KEY, gpu_only=True)
    if not recs:
        return ("No GPU results are recorded for this lesson yet, so none are shown (we never make them up).\n"
                "On a machine with a CUDA GPU, run `python -m lessons_lib.record` to record them; "
                "this cell then shows them.")
    lines = []
    for rec in recs:
        lines.append(f"{rec.label()} ({rec.conditions(KEY)})")
        rows = []
        for k, d in rec.lesson(KEY)["demos"].items():
            if demo is not None and k != demo:
                continue
            name = k.replace("_", " ")
            if k == "one_thread":  # the one-thread demo times CPU tensors on every machine: the GPU's host
                name = f"one thread (host CPU, {d.get('shape', {}).get('threads', '?')} threads)"
            w, h = (Timing(d[side]["label"], d[side]["median"], d[side]["iqr"], [], 1, "recorded", "recorded")
                    for side in ("wrong", "honest"))
            ratio = noise.Ratio(d["paired_ratios"]) if d.get("paired_ratios") else noise.from_timings(w, h)
            rows.append((name, w, h, ratio))
        width = max((len(r[0]) for r in rows), default=0)
        lines += [f"  {name:{width}s} wrong {fmt_time(w.median):>9}   harness {fmt_time(h.median):>9}"
                  f"   ({ratio.say('{r:.3g}×', recorded=True)})" for name, w, h, ratio in rows]
    return "\n".join(lines)


def run_all(device=None, min_run_time: float = 0.2, flush: bool = True) -> list[Demo]:
    """Every mistake that times real torch code on `device`, at the default shapes."""
    dev = timing.timing_device(device)
    return [
        demo_no_sync(dev, min_run_time=min_run_time),
        demo_first_call(dev, min_run_time=min_run_time),
        demo_random_data(dev, min_run_time=min_run_time),
        demo_single_run(dev, min_run_time=min_run_time),
        demo_mean(dev, min_run_time=min_run_time),
        demo_one_thread(min_run_time=min_run_time),
        demo_hot_cache(dev, min_run_time=min_run_time, flush=flush),
    ]


def record(device=None, quick: bool = False) -> dict:
    """This lesson's section of the recorded results (key "00_timing").

    {"quick": bool, "device": "cuda" | "cpu", "sizes": {Sizes fields},
     "demos": {key: {"mistake", "shape", "wrong": T, "honest": T[, "flushed": T][, "paired_ratios": [r, ...]]}},
     "sim": {"wrong" | "harness" | "order": [one ratio per round]}}
    with T = {"label", "median", "iqr", "samples", "calls_per_sample", "method"} (seconds).
    Demo keys: no_sync, first_call, data_in_timed_region, single_run,
    mean_with_cold_start, one_thread, hot_cache. "sim" holds `sim_estimates` (the pretend GPU's traps).
    """
    dev = pick(device)
    demos = run_all(dev, min_run_time=0.02 if quick else 0.2, flush=not quick)
    sim = sim_estimates(max_time=2.0 if quick else 6.0)
    return {"quick": bool(quick), "device": dev.type, "sizes": asdict(sizes(dev)),
            "demos": {d.key: d.as_dict() for d in demos}, "sim": {k: list(e.values) for k, e in sim.ratios.items()}}


def targets(device, section: dict) -> list[dict]:
    """This lesson's bars, judged on its recorded section (the timing comparisons unit tests must not make).

    Each value is the median of paired rounds. Bars: fresh random data costs more than the op it feeds
    (> 1.2×, on any device); on the pretend GPU, trap 1's wrong way ranks 'no sync' faster (model 5.2×,
    bar 1.67×), trap 2's sync inside costs at least 80% of its launch and sync (model 1.30×, bar 1.24×),
    and trap 3's second-timed variant reports more than the first (model 2.0×, bar 1.5×)."""
    import statistics

    out = []
    rand = section.get("demos", {}).get("data_in_timed_region")
    if rand:
        r = statistics.median(rand.get("paired_ratios") or [rand["wrong"]["median"] / rand["honest"]["median"]])
        out.append({"name": "00 randn inside the timed call / the op alone", "value": r, "bar": "> 1.2 (any device)",
                    "ok": r > 1.2})
    sim = section.get("sim", {})
    bars = {"wrong": ("00 pretend GPU, trap 1: wrong way's 'syncs inside' / 'no sync'", 1 / 0.6),
            "harness": ("00 pretend GPU, trap 2: harness's 'syncs inside' / 'no sync'",
                        1 + 0.8 * (SIM_LAUNCH + SIM_SYNC) / SIM_KERNEL),
            "order": ("00 pretend GPU, trap 3: second-timed total / first, thread's order", 1.5)}
    for key, (name, bar) in bars.items():
        if sim.get(key):
            v = statistics.median(sim[key])
            out.append({"name": name, "value": v, "bar": f">= {bar:.3g} (any machine)", "ok": v >= bar})
    return out
