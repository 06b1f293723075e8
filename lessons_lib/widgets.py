"""One explorer for every lesson: sliders, dtype and device, Run, Sweep, and replay.

The lesson describes its parameters and variants (`lesson.Lesson`); this module turns that
into an interface. Every action is also a plain method (`run`, `sweep`, `replay`) so
tests and readers without widgets get the same figures.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from . import plots, results, roofline
from .device import describe, has_cuda, pick
from .lesson import DTYPES, Lesson, crossover
from .timing import Timing

THIS_MACHINE = "this machine"


def default_sweep_values(lesson: Lesson, param: str, current: int) -> list[int]:
    """Powers of two around the current value, clipped to the parameter's range."""
    p = lesson.param(param)
    vals = {min(max(int(current * f), p.lo), p.hi) for f in (1 / 8, 1 / 4, 1 / 2, 1, 2, 4)}
    return sorted(vals)


class Explorer:
    def __init__(self, lesson: Lesson, device=None, min_run_time: float = 0.1):
        self.lesson = lesson
        self.device = pick(device)
        self.min_run_time = min_run_time
        self._ui = None

    # --- the plain API (no widgets needed) ------------------------------------------------
    def run(self, dtype: str = "float32", device=None, **params):
        """Time every variant at one shape; returns (Run, Figure). Raises ValueError if it can't run."""
        dev = pick(device or self.device)
        dt = _dtype(dtype)
        run = self.lesson.run(params, dev, dt, min_run_time=self.min_run_time)
        floors = run.floors(roofline.measure_peaks(dev, dt))
        fig = _bars_with_metrics(list(run.timings.values()), floors, run.metrics,
                                 f"{self.lesson.title}: {_shape_str(run.params)}, {dtype}, {describe(dev).name}")
        return run, fig

    def sweep(self, param: str, values: list[int] | None = None, dtype: str = "float32", device=None,
              on_step=None, **params):
        """Time every variant across values of one parameter; returns (Sweep, Figure)."""
        dev = pick(device or self.device)
        base = {**self.lesson.defaults(dev), **params}
        values = values or default_sweep_values(self.lesson, param, base[param])
        sw = self.lesson.sweep(param, values, base, dev, _dtype(dtype), min_run_time=self.min_run_time,
                               progress=on_step is None, on_step=on_step)
        meds = sw.medians()
        cross = _crossover(self.lesson, values, meds)
        fig = _sweep_with_metrics(values, meds, sw.iqrs(), sw.metric_series(), self.lesson.param(param).label,
                                  cross, f"{self.lesson.title} on {describe(dev).name}, {dtype}")
        return sw, fig

    def replay(self, recorded: results.Recorded):
        """Figures from a recorded file: the headline bars and each recorded sweep."""
        data = recorded.lesson(self.lesson.key) or {}
        figs = []
        head = data.get("headline")
        if head:
            ts = [Timing(n, v["median"], v["iqr"], [], v.get("calls_per_sample", 1), v.get("method", ""), "recorded")
                  for n, v in head["variants"].items()]
            floors = {n: v["floor"] for n, v in head["variants"].items() if "floor" in v}
            figs.append(_bars_with_metrics(ts, floors, head.get("metrics", {}),
                                           f"{recorded.short()}: {_shape_str(head['params'])}, {head['dtype']}"))
        for sw in data.get("sweeps", {}).values():
            meds = {n: v["median"] for n, v in sw["variants"].items()}
            iqrs = {n: v["iqr"] for n, v in sw["variants"].items()}
            cross = _crossover(self.lesson, sw["values"], meds)
            figs.append(_sweep_with_metrics(sw["values"], meds, iqrs, sw.get("metrics", {}),
                                            self.lesson.param(sw["param"]).label, cross,
                                            f"{recorded.short()}, {sw['dtype']}"))
        return figs

    # --- the widget ----------------------------------------------------------------------
    def widget(self):
        if self._ui is None:
            self._ui = self._build()
        return self._ui

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget())

    def _build(self):
        import ipywidgets as W

        style = {"description_width": "150px"}
        layout = W.Layout(width="480px")
        self.sliders = {
            p.name: W.IntSlider(value=p.default(self.device), min=p.lo, max=p.hi, description=p.label,
                                style=style, layout=layout, continuous_update=False)
            for p in self.lesson.params
        }
        self.dtype_w = W.Dropdown(options=list(DTYPES), value="float32", description="dtype", style=style)
        devices = ["cuda", "cpu"] if has_cuda() else ["cpu"]
        self.device_w = W.Dropdown(options=devices, value=self.device.type, description="device", style=style)
        recs = results.for_lesson(self.lesson.key)
        self._recorded = {r.short(): r for r in recs}
        self.source_w = W.Dropdown(options=[THIS_MACHINE, *self._recorded], value=THIS_MACHINE,
                                   description="results from", style=style)
        self.sweep_w = W.Dropdown(options=[p.name for p in self.lesson.params], description="sweep over", style=style)
        self.run_b = W.Button(description="Run", button_style="primary", icon="play")
        self.sweep_b = W.Button(description="Sweep", icon="line-chart")
        self.progress = W.IntProgress(value=0, min=0, max=1, description="", layout=W.Layout(width="300px"))
        self.status = W.HTML("")
        self.out = W.Output()
        self.run_b.on_click(lambda _b: self._act(self._do_run))
        self.sweep_b.on_click(lambda _b: self._act(self._do_sweep))
        self.source_w.observe(lambda _c: self._act(self._do_replay), names="value")
        note = "" if has_cuda() else (
            "<i>No CUDA GPU here: runs use the CPU. Pick a recorded GPU under “results from” to replay its numbers.</i>")
        return W.VBox([
            W.HTML(f"<b>{self.lesson.title}</b> — {describe(self.device).line()}<br>{note}"),
            *self.sliders.values(),
            W.HBox([self.dtype_w, self.device_w]),
            W.HBox([self.source_w]),
            W.HBox([self.run_b, self.sweep_w, self.sweep_b, self.progress]),
            self.status,
            self.out,
        ])

    def _params(self) -> dict:
        return {k: s.value for k, s in self.sliders.items()}

    def _act(self, action):
        """Run an action; bad input or an OOM becomes a message, never a traceback."""
        from IPython.display import clear_output, display

        self.status.value = "<i>working…</i>"
        self.run_b.disabled = self.sweep_b.disabled = True
        try:
            with self.out:
                clear_output(wait=True)
                for item in action():
                    if isinstance(item, plt.Figure):
                        display(item)
                        plt.close(item)
                    else:
                        print(item)
            self.status.value = ""
        except ValueError as err:  # includes DoesNotFit: refused before (or freed after) allocating
            self.status.value = f"<span style='color:#b00'>⚠ {err}</span>"
        finally:
            self.run_b.disabled = self.sweep_b.disabled = False

    def _do_run(self):
        run, fig = self.run(self.dtype_w.value, self.device_w.value, **self._params())
        return [fig, run.table(self.lesson.baseline)] + ([run.metrics_table()] if run.metrics else [])

    def _do_sweep(self):
        def step(i, n):
            self.progress.max, self.progress.value = n, i

        self.progress.value = 0
        sw, fig = self.sweep(self.sweep_w.value, dtype=self.dtype_w.value, device=self.device_w.value,
                             on_step=step, **self._params())
        return [fig]

    def _do_replay(self):
        if self.source_w.value == THIS_MACHINE:
            return ["Press Run or Sweep to measure on this machine."]
        rec = self._recorded[self.source_w.value]
        return [rec.label(), *self.replay(rec)]


def _bars_with_metrics(timings, floors, metrics: dict, title: str):
    """The timing bars; beside them, one panel per lesson metric (recorded as {variant: {metric: value}})."""
    if not metrics:
        return plots.bars(timings, floors, title=title)
    names = list(dict.fromkeys(m for per in metrics.values() for m in per))
    fig, axes = plots.panels(1 + len(names))
    plots.bars(timings, floors, title="time per call", ax=axes[0])
    for ax, m in zip(axes[1:], names):
        plots.quantity_bars({v: per[m] for v, per in metrics.items() if m in per}, m, title=m, ax=ax)
    fig.suptitle(title)
    return fig


def _sweep_with_metrics(values, meds, iqrs, series: dict, xlabel: str, cross, title: str):
    """The timing sweep; beside it, one panel per lesson metric ({metric: {variant: [values]}})."""
    if not series:
        return plots.sweep(values, meds, iqrs, xlabel=xlabel, crossover=cross, title=title)
    fig, axes = plots.panels(1 + len(series))
    plots.sweep(values, meds, iqrs, xlabel=xlabel, crossover=cross, title="time per call", ax=axes[0])
    for ax, (m, per_variant) in zip(axes[1:], series.items()):
        plots.lines(values, per_variant, xlabel=xlabel, ylabel=m, title=m, ax=ax)
    fig.suptitle(title)
    return fig


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {name!r}.")
    return DTYPES[name]


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
