"""One explorer for every lesson: sliders, dtype and device, Run, Sweep, Stop, and replay.

The lesson describes its parameters and variants (`lesson.Lesson`); this module turns that
into an interface. Every action is also a plain method (`run`, `sweep`, `replay`) so
tests and readers without widgets get the same figures.

In a real kernel the widget's work runs on a background thread: the kernel stays free to
receive the Stop button's click, and every error is caught where it happens (an exception
inside `with output_widget:` would otherwise be printed and swallowed by ipywidgets).
"""
from __future__ import annotations

import threading

import matplotlib.pyplot as plt
import torch

from . import plots, results, roofline
from .device import describe, has_cuda, pick
from .lesson import DTYPES, Lesson, Stopped, check_dtype, crossover
from .timing import Timing, fmt_time

THIS_MACHINE = "this machine"
RUN_BUDGET = 30.0  # seconds a Run may be predicted to take before the explorer refuses it
SWEEP_BUDGET = 120.0
MAX_TIME_PER_VARIANT = 10.0  # an upper bound on one measurement, whatever the estimate said


def default_sweep_values(lesson: Lesson, param: str, current: int) -> list[int]:
    """Powers of two around the current value, clipped to the parameter's range."""
    p = lesson.param(param)
    vals = {min(max(int(current * f), p.lo), p.hi) for f in (1 / 8, 1 / 4, 1 / 2, 1, 2, 4)}
    return sorted(vals)


def slider_values(lo: int, hi: int, default: int) -> list[int] | None:
    """Powers of two from lo to hi (plus the default) for a wide range; None for a narrow one,
    where a linear slider is usable. A linear slider over 1…65536 cannot pick 16."""
    if hi / max(lo, 1) <= 64:
        return None
    vals = {lo, hi, default}
    v = 1
    while v <= hi:
        if v >= lo:
            vals.add(v)
        v *= 2
    return sorted(vals)


class Explorer:
    def __init__(self, lesson: Lesson, device=None, min_run_time: float = 0.1, run_budget: float = RUN_BUDGET,
                 sweep_budget: float = SWEEP_BUDGET):
        self.lesson = lesson
        self.device = pick(device)
        self.min_run_time = min_run_time
        self.run_budget, self.sweep_budget = run_budget, sweep_budget
        self.colors = plots.variant_colors([v.name for v in lesson.variants])
        self._ui = None
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None

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
        self._check_budget(self.estimate(dtype, dev, **params), self.run_budget, "run")
        run = self.lesson.run(params, dev, dt, min_run_time=self.min_run_time, stop=stop,
                              max_time=MAX_TIME_PER_VARIANT)
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
        sw = self.lesson.sweep(param, values, base, dev, _dtype(dtype), min_run_time=self.min_run_time,
                               progress=on_step is None, on_step=on_step, stop=stop,
                               max_time=MAX_TIME_PER_VARIANT)
        meds = sw.medians()
        cross = _crossover(self.lesson, sw.values, meds)
        fig = self._sweep_fig(sw.values, meds, sw.iqrs(), sw.metric_series(), self.lesson.param(param).label,
                              cross, f"{self.lesson.title} on {describe(dev).name}, {dtype}")
        return sw, fig

    def replay(self, recorded: results.Recorded):
        """Figures from a recorded file (measured, reported or model), each titled with its kind."""
        data = recorded.lesson(self.lesson.key) or {}
        figs = []
        head = data.get("headline")
        tag = recorded.short()
        if head:
            rows = self._ordered(head["variants"])
            ts = [Timing(n, v.get("median", float("nan")), v.get("iqr", 0.0), [], v.get("calls_per_sample", 1),
                         v.get("method", ""), "recorded") for n, v in rows.items()]
            floors = {n: v["floor"] for n, v in rows.items() if "floor" in v}
            if all(t.median != t.median for t in ts):  # a model file: floors only, drawn as the bars
                ts = [Timing(t.label, floors.get(t.label, float("nan")), 0.0, [], 1, "model", "model") for t in ts]
            label = {"model": "roofline floor (model, not a measurement)",
                     "reported": "as reported (no spread given)"}.get(recorded.kind, "median, whiskers ± IQR/2")
            figs.append(self._bars(ts, floors, head.get("metrics", {}),
                                   f"{tag}: {_shape_str(head['params'])}, {head['dtype']}", bar_label=label))
        for sw in data.get("sweeps", {}).values():
            rows = self._ordered(sw["variants"])
            meds = {n: v["median"] for n, v in rows.items() if "median" in v}
            iqrs = {n: v.get("iqr", [0.0] * len(sw["values"])) for n, v in rows.items() if "median" in v}
            if not meds:
                continue
            cross = _crossover(self.lesson, sw["values"], meds)
            figs.append(self._sweep_fig(sw["values"], meds, iqrs, sw.get("metrics", {}),
                                        self.lesson.param(sw["param"]).label, cross, f"{tag}, {sw['dtype']}"))
        return figs

    def _ordered(self, per_variant: dict) -> dict:
        """Variants in the lesson's order (then any others), so every figure lists them alike."""
        order = [v.name for v in self.lesson.variants]
        return {n: per_variant[n] for n in sorted(per_variant, key=lambda n: order.index(n) if n in order else 99)}

    @staticmethod
    def _check_budget(seconds: float, budget: float, what: str) -> None:
        if seconds > budget:
            raise ValueError(f"This {what} would take about {fmt_time(seconds)} (the budget is {fmt_time(budget)}): "
                             "make a dimension smaller, or pass a larger budget to the Explorer.")

    # --- the widget ----------------------------------------------------------------------
    def widget(self):
        if self._ui is None:
            self._ui = self._build()
        return self._ui

    def _ipython_display_(self):
        from IPython.display import display

        ui = self.widget()
        if hasattr(ui, "_repr_mimebundle_"):  # ipywidgets 8: the widget and its static fallback
            display(self._repr_mimebundle_(), raw=True)
        else:  # ipywidgets 7 (Colab's): the widget as it displays itself
            display(ui)

    def _repr_mimebundle_(self, include=None, exclude=None):
        """The live widget, plus what a viewer without a kernel shows instead (GitHub, a closed
        notebook): a sentence, and a picture of recorded results when the course has some."""
        ui = self.widget()
        data = ui._repr_mimebundle_(include=include, exclude=exclude) if hasattr(ui, "_repr_mimebundle_") else {}
        if isinstance(data, tuple):
            data = data[0]
        data = dict(data or {})
        data["text/plain"] = (f"Explorer: {self.lesson.title}. Run this notebook in Jupyter to move the sliders "
                              "and press Run or Sweep.")
        png = self._preview_png()
        if png:
            data["image/png"] = png
        return data

    def _preview_png(self) -> str | None:
        """A static picture for viewers without a kernel: the first recorded result's replay."""
        import base64

        recs = results.for_lesson(self.lesson.key)
        figs = self.replay(recs[0]) if recs else []
        if not figs:
            return None
        png = _png(figs[0]).data
        for f in figs:
            plt.close(f)
        return base64.b64encode(png).decode()

    def _build(self):
        import ipywidgets as W

        style = {"description_width": "150px"}
        layout = W.Layout(width="480px")
        self.sliders = {p.name: self._slider(W, p, style, layout) for p in self.lesson.params}
        self.dtype_w = W.Dropdown(options=list(DTYPES), value="float32", description="dtype", style=style)
        devices = ["cuda", "cpu"] if has_cuda() else ["cpu"]
        self.device_w = W.Dropdown(options=devices, value=self.device.type, description="device", style=style)
        recs = results.for_lesson(self.lesson.key)
        self._recorded = {r.short(): r for r in recs}
        self.source_w = W.Dropdown(options=[THIS_MACHINE, *self._recorded], value=THIS_MACHINE,
                                   description="results from", style=style, layout=W.Layout(width="620px"))
        self.sweep_w = W.Dropdown(options=[(p.label, p.name) for p in self.lesson.params], description="sweep over",
                                  style=style)
        self.run_b = W.Button(description="Run", button_style="primary", icon="play")
        self.sweep_b = W.Button(description="Sweep", icon="line-chart")
        self.stop_b = W.Button(description="Stop", icon="stop", disabled=True)
        self.progress = W.IntProgress(value=0, min=0, max=1, description="", layout=W.Layout(width="300px"))
        self.status = W.HTML("")
        self.out = W.Output()
        self.run_b.on_click(lambda _b: self._act(self._do_run))
        self.sweep_b.on_click(lambda _b: self._act(self._do_sweep))
        self.stop_b.on_click(lambda _b: self._request_stop())
        self.source_w.observe(lambda _c: self._act(self._do_replay), names="value")
        note = "" if has_cuda() else (
            "<i>No CUDA GPU here: runs use the CPU. Under “results from”, recorded GPU figures replay, each "
            "labelled measured, reported (from the forum thread) or model (datasheet roofline).</i>")
        return W.VBox([
            W.HTML(f"<b>{self.lesson.title}</b> — {describe(self.device).line()}<br>{note}"),
            *self.sliders.values(),
            W.HBox([self.dtype_w, self.device_w]),
            W.HBox([self.source_w]),
            W.HBox([self.run_b, self.sweep_w, self.sweep_b, self.stop_b, self.progress]),
            self.status,
            self.out,
        ])

    def _slider(self, W, p, style, layout):
        default = p.default(self.device)
        values = slider_values(p.lo, p.hi, default)
        if values is None:
            return W.IntSlider(value=default, min=p.lo, max=p.hi, description=p.label, style=style, layout=layout,
                               continuous_update=False)
        return W.SelectionSlider(options=[(str(v), v) for v in values], value=default, description=p.label,
                                 style=style, layout=layout, continuous_update=False)

    def _params(self) -> dict:
        return {k: s.value for k, s in self.sliders.items()}

    def _request_stop(self):
        self._stop.set()
        self.status.value = "<i>stopping after the current measurement…</i>"

    def _act(self, action, background: bool = True):
        """Run an action; returns its thread (or None when run in place).

        Everything happens inside one try block: a refusal (bad input, too big, over budget,
        stopped) becomes one line of status; an unexpected error becomes one line naming it.
        Outputs go through `append_display_data`, which is safe from a thread."""
        if self._worker is not None and self._worker.is_alive():
            self.status.value = "<i>still working: press Stop first</i>"
            return None
        self._stop.clear()
        self.status.value = "<i>working…</i>"
        self.run_b.disabled = self.sweep_b.disabled = True
        self.stop_b.disabled = False
        if not background:
            self._work(action)
            return None
        self._worker = threading.Thread(target=self._work, args=(action,), daemon=True)
        self._worker.start()
        return self._worker

    def _work(self, action):
        try:
            self.out.outputs = ()  # (clear_output would route through the kernel's current cell)
            for item in action():
                if isinstance(item, plt.Figure):
                    self.out.append_display_data(_png(item))
                else:
                    self.out.append_stdout(f"{item}\n")
            self.status.value = getattr(self, "_done_note", "")
        except Stopped:
            self.status.value = "<span style='color:#b60'>■ stopped: nothing after the last finished measurement ran</span>"
        except ValueError as err:  # includes DoesNotFit: refused before (or freed after) allocating
            self.status.value = f"<span style='color:#b00'>⚠ {_html(err)}</span>"
        except Exception as err:  # a bug, not the reader's fault: one line, not a traceback
            self.status.value = (f"<span style='color:#b00'>⚠ unexpected {type(err).__name__}: {_html(err)} "
                                 "(please report it)</span>")
        finally:
            self._done_note = ""
            self.progress.value = 0
            self.run_b.disabled = self.sweep_b.disabled = False
            self.stop_b.disabled = True

    def _do_run(self):
        run, fig = self.run(self.dtype_w.value, self.device_w.value, stop=self._stop.is_set, **self._params())
        notes = [t.noise_note() for t in run.timings.values() if t.noise_note()]
        self._done_note = f"<span style='color:#b60'>⚠ {_html(notes[0])}</span>" if notes else ""
        return [fig, run.table(self.lesson.baseline)] + ([run.metrics_table()] if run.metrics else [])

    def _do_sweep(self):
        def step(i, n):
            self.progress.max, self.progress.value = n, i

        self.progress.value = 0
        _sw, fig = self.sweep(self.sweep_w.value, dtype=self.dtype_w.value, device=self.device_w.value,
                              on_step=step, stop=self._stop.is_set, **self._params())
        return [fig]

    def _do_replay(self):
        if self.source_w.value == THIS_MACHINE:
            return ["Press Run or Sweep to measure on this machine."]
        rec = self._recorded[self.source_w.value]
        return [rec.label(), *self.replay(rec)]

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


def _png(fig):
    """A figure as a PNG image object (closed afterwards): the same in any kernel and any thread."""
    import io

    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight")
    plt.close(fig)
    return Image(data=buf.getvalue(), format="png")


def _dtype(name) -> torch.dtype:
    return check_dtype(name)


def _html(err) -> str:
    import html

    return html.escape(str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__)


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
