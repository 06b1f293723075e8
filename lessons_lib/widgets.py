"""One explorer for every lesson: sliders, dtype and device, Run, Sweep, Stop, and replay.

The lesson describes its parameters and variants (`lesson.Lesson`); this module turns that
into figures. Every action is a plain method (`estimate`, `run`, `sweep`, `replay`), so tests
and readers without widgets get the same figures; `explorer_ui.ExplorerUI` puts the controls
around them (a background thread, a Stop button, errors as one line of status).

Before anything allocates, a run or sweep is checked (shape, memory) and its time estimated
from the roofline floor; above the budget it is refused with a sentence saying what to change.
After a run it says which regime each variant is in (overhead-, memory- or compute-bound: the
largest of its three roofline bounds, `roofline.Peaks.regime`), and after a sweep where that changes.
"""
from __future__ import annotations

import math
import threading
from typing import Callable

import torch

from . import plots, results, roofline
from .device import describe, pick
from .display import text_table
from .explorer_ui import THIS_MACHINE, ExplorerUI, slider_values  # noqa: F401  (re-exported: public names)
from .lesson import Lesson, check_dtype, crossover
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
        """Predicted seconds for a run (or a sweep of `points` shapes); refuses bad input first."""
        dev = pick(device or self.device)
        return self.lesson.estimate_seconds(params, dev, _dtype(dtype), min_run_time=self.min_run_time,
                                            points=points)

    def run(self, dtype: str = "float32", device=None, stop=None, **params):
        """Time every variant at one shape; returns (Run, Figure). Raises ValueError if it can't run
        (bad input, does not fit, or predicted to take longer than `run_budget`)."""
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
                         f"{self.lesson.title}: {_shape_str(run.params)}, {dtype}, {describe(dev).name}")
        return run, fig

    def sweep(self, param: str, values: list[int] | None = None, dtype: str = "float32", device=None,
              on_step=None, stop=None, **params):
        """Time every variant across values of one parameter; returns (Sweep, Figure)."""
        dev = pick(device or self.device)
        base = {**self.lesson.defaults(dev), **params}
        self.lesson.param(param)
        values = values if values is not None else default_sweep_values(self.lesson, param, base[param])
        if values:
            worst = max(values)  # the largest point dominates; estimate it, times the number of points
            est = self.estimate(dtype, dev, points=len(values), **{**base, param: worst})
            self._check_budget(est, self.sweep_budget, "sweep")
            self._announce(est, f"sweep of {len(values)} points")
        sw = self.lesson.sweep(param, values, base, dev, _dtype(dtype), min_run_time=self.min_run_time,
                               progress=on_step is None, on_step=on_step, stop=stop,
                               max_time=MAX_TIME_PER_VARIANT)
        for r in sw.runs:
            self._amend_work(r)
        meds = sw.medians()
        cross = _crossover(self.lesson, sw.values, meds)
        fig = self._sweep_fig(sw.values, meds, sw.iqrs(), sw.metric_series(), self.lesson.param(param).label,
                              cross, f"{self.lesson.title} on {describe(dev).name}, {dtype}")
        return sw, fig

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

    def replay(self, recorded: results.Recorded):
        """Figures from a recorded file (measured, reported or model), each titled with its kind.
        A model file's figures are roofline floors: drawn as the bars, with no floor marks."""
        data = recorded.lesson(self.lesson.key) or {}
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
            if not meds:
                continue
            cross = _crossover(self.lesson, sw["values"], meds)
            figs.append(self._sweep_fig(sw["values"], meds, iqrs, sw.get("metrics", {}),
                                        self.lesson.param(sw["param"]).label, cross, f"{tag}\n{sw['dtype']}"))
        return figs

    def replay_regimes(self, recorded: results.Recorded) -> str:
        """The regime of each variant at a recorded headline, where the file names it (measured files
        with their peaks, model files); "" where it does not (reported figures)."""
        head = (recorded.lesson(self.lesson.key) or {}).get("headline") or {}
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
    def _check_budget(seconds: float, budget: float, what: str) -> None:
        if seconds > budget:
            raise ValueError(f"This {what} would take about {fmt_time(seconds)} (the budget is {fmt_time(budget)}): "
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


def _shape_str(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


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
