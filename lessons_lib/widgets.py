"""One explorer for every lesson: sliders, dtype and device, Run, Sweep, Stop, and replay.

The lesson describes its parameters and variants (`lesson.Lesson`); this module turns that
into figures. Every action is a plain method (`estimate`, `run`, `sweep`, `replay`), so tests
and readers without widgets get the same figures; `explorer_ui.ExplorerUI` puts the controls
around them (a background thread, a Stop button, errors as one line of status).

Before anything big allocates, a run or sweep is checked (shape, memory) and refused when even
its roofline floor is over the budget. Then its time is estimated on this machine, now: each
variant is timed at a small shape, then at larger ones toward the asked one while a call there is
predicted cheap, and scaled the rest of the way by the roofline's work ratio, through the harness's
own schedule (`Lesson.calibrate` / `Lesson.predict`; a sweep calibrates each of its points); above
the budget it is refused with a sentence saying what to change. After it ran, the estimate is shown
beside the time it took.
After a run it says which regime each variant is in (overhead-, memory- or compute-bound: the
largest of its three roofline bounds, `roofline.Peaks.regime`), and after a sweep where that changes.
"""
from __future__ import annotations

import math
import threading
from typing import Callable

import torch

from . import noise, plots, results, roofline
from .device import describe, pick
from .display import text_table
from .explorer_ui import THIS_MACHINE, ExplorerUI, slider_values  # noqa: F401  (re-exported: public names)
from .lesson import Lesson, check_dtype, crossover
from .posted_figures import _posted_figure, _shape_str, _wrap  # noqa: F401  (re-exported)
from .timing import Timing, fmt_time

RUN_BUDGET = 30.0  # seconds a Run may be predicted to take before the explorer refuses it
SWEEP_BUDGET = 120.0
MAX_TIME_PER_VARIANT = 10.0  # an upper bound on one measurement, whatever the estimate said
_BAR_LABELS = {"measured": "median, whiskers ± IQR/2", "model": "roofline floor (model, not a measurement)",
               "reported": "as reported (no spread given)"}


def default_sweep_values(lesson: Lesson, param: str, current: int) -> list[int]:
    """Powers of two around the current value, clipped to the parameter's range."""
    p = lesson.param(param)
    vals = {min(max(int(current * f), p.lo), p.hi) for f in (1 / 8, 1 / 4, 1 / 2, 1, 2, 4)}
    return sorted(vals)


class Explorer(ExplorerUI):
    def __init__(self, lesson: Lesson, device=None, min_run_time: float = 0.1, run_budget: float = RUN_BUDGET,
                 sweep_budget: float = SWEEP_BUDGET,
                 work_of: Callable[[dict, torch.dtype], dict[str, roofline.Work]] | None = None):
        """run_budget, sweep_budget: seconds a Run or a Sweep may be estimated to take; above
        that it is refused before anything runs (raise them for a patient reader).

        work_of(params, dtype) -> {variant: Work}: the work of variants whose timed callable is not
        what the op trace of their `fn` sees (a compiled or graph-replayed variant launches fewer
        kernels); their floors and regimes use it. Variants it leaves out keep their traced work."""
        self.lesson = lesson
        self.work_of = work_of
        self.device = pick(device)
        self.min_run_time = min_run_time
        self.run_budget = _check_budget_value(run_budget, "run_budget")
        self.sweep_budget = _check_budget_value(sweep_budget, "sweep_budget")
        self.colors = plots.variant_colors([v.name for v in lesson.variants])
        self._stop = threading.Event()
        self._estimated: float | None = None

    # --- the plain API (no widgets needed) ------------------------------------------------
    def estimate(self, dtype: str = "float32", device=None, points: int = 1, **params) -> float:
        """Predicted seconds for a run (times `points`), calibrated on this machine now: each variant
        timed at a small shape and up toward the asked one, scaled by the roofline's work ratio the
        rest of the way (`Lesson.calibrate`). Refuses bad
        input, shapes that do not fit, and runs whose floor alone is over the budget, before that."""
        dev = pick(device or self.device)
        dt = _dtype(dtype)
        self._check_budget(self._floor_estimate(params, dev, dt) * points, self.run_budget * points, "run")
        cal = self.lesson.calibrate(params, dev, dt)
        return self.lesson.predict(cal, params, min_run_time=self.min_run_time,
                                   max_time=MAX_TIME_PER_VARIANT) * points

    def _floor_estimate(self, params, dev, dt) -> float:
        """A lower bound from the floor alone: nothing allocated (refuses what does not fit)."""
        return self.lesson.estimate_seconds(params, dev, dt, min_run_time=self.min_run_time)

    def run(self, dtype: str = "float32", device=None, stop=None, **params):
        """Time every variant at one shape on this machine; returns (Run, Figure). Raises ValueError
        if it can't run (bad input, does not fit, or estimated over `run_budget`)."""
        dev = pick(device or self.device)
        dt = _dtype(dtype)
        est = self.estimate(dtype, dev, **params)
        self._check_budget(est, self.run_budget, "run")
        self._announce(est, "run")
        run = self.lesson.run(params, dev, dt, min_run_time=self.min_run_time, stop=stop,
                              max_time=MAX_TIME_PER_VARIANT)
        self._amend_work(run)
        floors = run.floors(roofline.measure_peaks(dev, dt))
        fig = self._bars(list(run.timings.values()), floors, run.metrics,
                         f"{self.lesson.title}\nmeasured on this machine ({describe(dev).name}): "
                         f"{_shape_str(run.params)}, {dtype}")
        return run, fig

    def sweep(self, param: str, values: list[int] | None = None, dtype: str = "float32", device=None,
              on_step=None, stop=None, **params):
        """Time every variant across values of one parameter on this machine; returns (Sweep, Figure).
        A sweep that Stop ends keeps its finished points: the figure shows them, marked stopped."""
        dev = pick(device or self.device)
        dt = _dtype(dtype)
        base = {**self.lesson.defaults(dev), **params}
        self.lesson.param(param)
        values = values if values is not None else default_sweep_values(self.lesson, param, base[param])
        if values:
            shapes = [{**base, param: v} for v in values]
            low = sum(self._floor_estimate(s, dev, dt) for s in shapes)  # nothing allocated yet
            self._check_budget(low, self.sweep_budget, "sweep")
            # every point calibrated, smallest first (a shape timed once, `calibrate`'s cache), refused as
            # soon as the points so far are over the budget. Scaling from the two ends missed the middle:
            # with torch's 2 threads on a loaded 2-core CPU, lesson 04's width 160 took 64 ms a call,
            # as its width 640 did (each parallel op waits a time slice at its barrier), not 1/4 of it
            est, cache = 0.0, {}
            shapes_sorted = sorted(shapes, key=lambda s: s[param])
            for s in shapes_sorted:
                cal = self.lesson.calibrate(s, dev, dt, cache=cache)
                est += self.lesson.predict(cal, s, min_run_time=self.min_run_time, max_time=MAX_TIME_PER_VARIANT)
                self._check_budget(est, self.sweep_budget, "sweep", so_far=s is not shapes_sorted[-1])
            self._announce(est, f"sweep of {len(values)} points")
        sw = self.lesson.sweep(param, values, base, dev, dt, min_run_time=self.min_run_time,
                               progress=on_step is None, on_step=on_step, stop=stop,
                               max_time=MAX_TIME_PER_VARIANT, keep_partial=True)
        for r in sw.runs:
            self._amend_work(r)
        meds = sw.medians()
        cross = self.decided_crossover(sw)
        title = f"{self.lesson.title}\nmeasured on this machine ({describe(dev).name}), {dtype}"
        if sw.stopped:
            title += f": STOPPED after {len(sw.values)} of {len(sw.planned)} points"
        fig = self._sweep_fig(sw.values, meds, sw.iqrs(), sw.metric_series(), self.lesson.param(param).label,
                              cross, title)
        return sw, fig

    # --- conclusions through the noise rule ----------------------------------------------------
    def winner_line(self, run) -> str:
        """Which variant was fastest (of those that do not run another: `Variant.runs_another`), and by how
        much over the runner-up: said only when the measurement decides it (`noise`): from the run's own
        spreads, else re-measured in paired, alternating rounds of the two (a few seconds at most), else
        "not decided on this run"."""
        order = sorted((n for n in run.timings if not self.lesson.variant(n).runs_another),
                       key=lambda n: run.timings[n].median)
        if len(order) < 2:
            return ""
        a, b = order[0], order[1]
        ratio = noise.from_timings(run.timings[b], run.timings[a])
        if not ratio.decided and run.device in ("cpu", "cuda"):
            cmp = noise.compare_lesson(self.lesson, run.params, run.device, _dtype(run.dtype), variants=[a, b],
                                       rounds=3, max_rounds=7, max_time=3.0, min_run_time=0.01)
            ratio, (a, b) = cmp.ratio(b, a), (a, b)
            if ratio.decided and ratio.median < 1:  # the re-measure put them the other way round
                ratio, a, b = cmp.ratio(a, b), b, a
        return "fastest: " + ratio.say(f"{a}, {{r:.2f}}× ahead of {b}",
                                       tie=f"{a} and {b} tie (within {noise.TIE:.0%})")

    def decided_crossover(self, sw) -> int | None:
        """The lesson's crossover in a sweep, kept only where the two points either side of it are
        decided by the noise rule (their spreads do not overlap the swap); None otherwise."""
        cross = _crossover(self.lesson, sw.values, sw.medians())
        if cross is None:
            return None
        i = sw.values.index(cross)
        a, b = self.lesson.compare or (self.lesson.baseline, None)
        for run in (sw.runs[i - 1], sw.runs[i]):
            other = b or min((n for n in run.timings if n != a), key=lambda n: run.timings[n].median)
            if a not in run.timings or other not in run.timings:
                return None
            r = noise.from_timings(run.timings[a], run.timings[other])
            if not r.decided or r.tie:
                return None
        return cross

    def _amend_work(self, run) -> None:
        if self.work_of is not None:
            extra = self.work_of(run.params, _dtype(run.dtype))
            run.work.update({n: w for n, w in extra.items() if n in run.timings})

    # --- regimes: which bound each variant sits on --------------------------------------------
    @staticmethod
    def _peaks(run) -> roofline.Peaks:
        return roofline.measure_peaks(torch.device(run.device), _dtype(run.dtype))  # cached: measured once

    def regimes(self, run) -> dict[str, str]:
        """{variant: "overhead" | "memory" | "compute"} for a run, from its traced work and this
        device's measured peaks (the toolkit's classifier, `roofline.Peaks.regime`)."""
        pk = self._peaks(run)
        return {n: pk.regime(run.work[n]) for n in run.timings}

    def regime_line(self, run) -> str:
        """One line for the status: each variant's regime in words."""
        pk = self._peaks(run)
        return "regime: " + "; ".join(f"{n} {roofline.REGIME_WORDS[pk.regime(run.work[n])]}" for n in run.timings)

    def regime_table(self, run) -> str:
        """Per variant: its regime in words (the runner-up named when close), the three bounds, its
        measured time over its floor; then what helps in each regime that occurs."""
        pk = self._peaks(run)
        rows = [("variant", "regime (largest bound)", "compute", "memory", "overhead", "measured / floor")]
        for n, t in run.timings.items():
            w = run.work[n]
            terms = pk.terms(w)
            rows.append((n, pk.regime_words(w), *(fmt_time(terms[k]) for k in ("compute", "memory", "overhead")),
                         f"{t.median / pk.floor(w):.1f}×" if pk.floor(w) > 0 else "-"))
        found = list(dict.fromkeys(pk.regime(run.work[n]) for n in run.timings))
        helps = "\n".join(f"{roofline.REGIME_WORDS[r]}: {roofline.REGIME_REMEDY[r]}" for r in found)
        return (f"Regimes at {_shape_str(run.params)}, {run.dtype} ({pk.source}; "
                f"{fmt_time(pk.launch)} per op):\n" + text_table(rows) + "\n" + helps)

    def sweep_regimes(self, sw) -> str:
        """Per variant, where its regime changes across a sweep ("overhead-bound at 16–32, ...")."""
        if not sw.runs:
            return ""
        pk = self._peaks(sw.runs[0])
        label = self.lesson.param(sw.param).label
        lines = [f"Regimes across {label} ({pk.source}):"]
        for n in sw.runs[0].timings:
            lines.append(f"  {n}: " + roofline.regime_spans(sw.values, [pk.regime(r.work[n]) for r in sw.runs]))
        return "\n".join(lines)

    def records(self) -> list[results.Recorded]:
        """Every recorded file the menu lists: those holding this lesson, and the reported figures
        of its thread when another lesson stores them (`Lesson.reported_from`)."""
        recs = results.for_lesson(self.lesson.key)
        extra = self.lesson.reported_from
        if extra:
            recs += [r for r in results.for_lesson(extra, kinds="reported") if r not in recs]
        return recs

    def _section(self, recorded: results.Recorded) -> dict:
        data = recorded.lesson(self.lesson.key)
        if not data and self.lesson.reported_from:
            data = recorded.lesson(self.lesson.reported_from)
        return data if isinstance(data, dict) else {}

    def replay_params(self, recorded: results.Recorded) -> dict:
        """The shape a record's figures are at (its headline's, or its first sweep's base), for the
        sliders to follow; {} when the source does not state one."""
        data = self._section(recorded)
        if data.get("headline"):
            return dict(data["headline"].get("params", {}))
        for sw in data.get("sweeps", {}).values():
            return {**sw.get("base", {}), sw["param"]: sw["values"][len(sw["values"]) // 2]}
        for key, sec in data.items():
            params = data.get(f"{key}_params") or (sec.get("params") if isinstance(sec, dict) else None)
            if isinstance(params, dict):
                return dict(params)
        return {}

    def replay(self, recorded: results.Recorded):
        """Figures from a recorded file (measured, reported or model), each titled with its kind, its
        hardware and its shape. A model file's figures are roofline floors: drawn as the bars, with no
        floor marks. A record's sweeps replay as sweeps; a thread's other figures (totals, speed-ups,
        memory as posted) as what they are, in their own units."""
        data = self._section(recorded)
        figs = []
        tag = recorded.label() + (", not a measurement" if recorded.kind == "model" else "")
        head = data.get("headline")
        if head:
            rows = self._ordered(head["variants"])
            ts = [Timing(n, v.get("median", math.nan), v.get("iqr", 0.0), [], v.get("calls_per_sample", 1),
                         v.get("method", ""), "recorded") for n, v in rows.items()]
            floors = {} if recorded.kind == "model" else {n: v["floor"] for n, v in rows.items() if "floor" in v}
            figs.append(self._bars(ts, floors, head.get("metrics", {}),
                                   f"{tag}\n{_shape_str(head['params'])}, {head['dtype']}",
                                   bar_label=_BAR_LABELS.get(recorded.kind, recorded.kind)))
        for sw in data.get("sweeps", {}).values():
            rows = self._ordered(sw["variants"])
            meds = {n: v["median"] for n, v in rows.items() if "median" in v}
            iqrs = {n: v.get("iqr", [0.0] * len(sw["values"])) for n, v in rows.items() if "median" in v}
            if not meds or sw["param"] not in {p.name for p in self.lesson.params}:
                continue
            cross = _crossover(self.lesson, sw["values"], meds)
            base = _shape_str(sw.get("base", {}))
            figs.append(self._sweep_fig(sw["values"], meds, iqrs, sw.get("metrics", {}),
                                        self.lesson.param(sw["param"]).label, cross,
                                        f"{tag}\nsweep over {sw['param']} at {base}, {sw['dtype']}"))
        for key, sec in data.items():
            if key not in ("headline", "sweeps") and isinstance(sec, dict) and not key.endswith("_params"):
                fig = _posted_figure(sec, data.get(f"{key}_unit"), data.get(f"{key}_params"), tag)
                if fig is not None:
                    figs.append(fig)
        return figs

    def replay_regimes(self, recorded: results.Recorded) -> str:
        """The regime of each variant at a recorded headline, where the file names it (measured files
        with their peaks, model files); "" where it does not (reported figures)."""
        head = self._section(recorded).get("headline") or {}
        rows = {n: v["regime"] for n, v in self._ordered(head.get("variants", {})).items() if "regime" in v}
        if not rows:
            return ""
        return (f"regime at {_shape_str(head.get('params', {}))} ({recorded.short()}): "
                + "; ".join(f"{n} {roofline.REGIME_WORDS.get(r, r)}" for n, r in rows.items()))

    def _ordered(self, per_variant: dict) -> dict:
        """Variants in the lesson's order (then any others), so every figure lists them alike."""
        order = [v.name for v in self.lesson.variants]
        names = sorted(per_variant, key=lambda n: order.index(n) if n in order else len(order))
        self._add_colors(names)
        return {n: per_variant[n] for n in names}

    def _add_colors(self, names) -> None:
        """Variants a recorded file has but the lesson lacks get colours after the lesson's own,
        so they never borrow one (a reported "broadcast matmul (views made once)" is not C0)."""
        extra = [n for n in names if n not in self.colors]
        if extra:
            self.colors = plots.variant_colors([*self.colors, *extra])

    @staticmethod
    def _check_budget(seconds: float, budget: float, what: str, so_far: bool = False) -> None:
        """Refuse over the budget; `so_far`: `seconds` covers only part of it (a sweep's first points)."""
        if seconds > budget:
            about = "more than" if so_far else "about"
            raise ValueError(f"This {what} would take {about} {fmt_time(seconds)} (the budget is {fmt_time(budget)}): "
                             f"make a dimension smaller, or raise the budget (ex.{what}_budget = {2 * budget:g}).")

    def _bars(self, timings, floors, metrics: dict, title: str, bar_label: str = "median, whiskers ± IQR/2"):
        """The timing bars; beside them, one panel per lesson metric ({variant: {metric: value}})."""
        if not metrics:
            return plots.bars(timings, floors, title=title, colors=self.colors, bar_label=bar_label)
        names = list(dict.fromkeys(m for per in metrics.values() for m in per))
        fig, axes = plots.panels(1 + len(names))
        plots.bars(timings, floors, title="time per call", ax=axes[0], colors=self.colors, bar_label=bar_label)
        for ax, m in zip(axes[1:], names):
            plots.quantity_bars({v: per[m] for v, per in self._ordered(metrics).items() if m in per}, m, title=m,
                                ax=ax, colors=self.colors)
        fig.suptitle(title)
        return fig

    def _sweep_fig(self, values, meds, iqrs, series: dict, xlabel: str, cross, title: str):
        """The timing sweep; beside it, one panel per lesson metric ({metric: {variant: [values]}})."""
        if not series:
            return plots.sweep(values, meds, iqrs, xlabel=xlabel, crossover=cross, title=title, colors=self.colors)
        fig, axes = plots.panels(1 + len(series))
        plots.sweep(values, meds, iqrs, xlabel=xlabel, crossover=cross, title="time per call", ax=axes[0],
                    colors=self.colors)
        for ax, (m, per_variant) in zip(axes[1:], series.items()):
            plots.lines(values, self._ordered(per_variant), xlabel=xlabel, ylabel=m, title=m, ax=ax,
                        colors=self.colors)
        fig.suptitle(title)
        return fig


def _dtype(name) -> torch.dtype:
    return check_dtype(name)


def _check_budget_value(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {x!r}.")
    return float(x)



def _crossover(lesson: Lesson, values: list[int], meds: dict[str, list[float]]) -> int | None:
    """Where the lesson's compared pair swap order (default: baseline vs the best other)."""
    a, b = lesson.compare or (lesson.baseline, None)
    if a not in meds or (b is not None and b not in meds):
        return None
    if b is None:
        others = [v for k, v in meds.items() if k != a]
        if not others:
            return None
        return crossover(values, meds[a], [min(col) for col in zip(*others)])
    return crossover(values, meds[a], meds[b])
