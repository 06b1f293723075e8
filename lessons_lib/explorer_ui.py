"""The explorer's face in Jupyter: sliders, buttons, a status line, and the actions behind them.

`widgets.Explorer` computes (run, sweep, replay); this mixin shows it with ipywidgets.

In a real kernel two things differ from a test calling methods directly:
- Button clicks arrive as comm messages, which the kernel handles only when it is idle. So the
  work runs on a background thread and the kernel stays free: the Stop click is seen at once,
  and the work checks its flag between measurements (`stop=` of `Lesson.run`/`sweep`).
- An exception inside `with output_widget:` is displayed and swallowed by ipywidgets, so
  every error is caught in `_work`, where it happens, and becomes one line of status.
"""
from __future__ import annotations

import html
import re
import threading
import time

import matplotlib.pyplot as plt

from .device import describe, has_cuda
from .explorer_replay import _png
from .explorer_status import _details, _first_line, _line, _noise_line, _parts  # noqa: F401
from .lesson import DTYPES, Stopped
from .timing import fmt_time

THIS_MACHINE = "this machine"


class OverBudget(ValueError):
    """A Run or Sweep estimated over its budget (`widgets.Explorer._check_budget`): refused before it runs."""


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


class ExplorerUI:
    """Mixin for `widgets.Explorer`; needs its run/sweep/replay/estimate, its regime_line/regime_table/
    sweep_regimes/replay_regimes, and `lesson`, `device`."""

    _ui = None
    _worker: threading.Thread | None = None
    _done_note = ""
    _following = False  # the menu is being set by the explorer itself, not the reader
    _was_showing: str | None = None  # the record shown before a Run or Sweep switched the menu back
    _stopped_note = ""
    _pending_replay = False  # the menu changed while busy: replay its choice when the work ends
    _bar_from_phases = False  # a Run: the progress bar follows "measuring X (k of n)"
    _points_note = ""  # a sweep's points so far, under the phase's line
    _phase_text = ""  # what runs now, for the status line (`_on_phase`); "" when nothing does
    _stop_pressed: float | None = None  # when Stop was pressed (perf_counter), while the action has not ended
    _before_replay: dict | None = None  # the sliders before a replay moved them, until the reader moves one
    TICK = 1.0  # seconds between status refreshes while a phase runs (its clock moves)

    def widget(self):
        if self._ui is None:
            self._ui = self._build()
        return self._ui

    # --- how it displays: the live widget, with a fallback for viewers without a kernel -------
    def _ipython_display_(self):
        from IPython.display import display

        ui = self.widget()
        if hasattr(ui, "_repr_mimebundle_"):  # ipywidgets 8: the widget and its static fallback
            display(self._repr_mimebundle_(), raw=True)
        else:  # ipywidgets 7 (Colab's): the widget as it displays itself
            display(ui)

    def _repr_mimebundle_(self, include=None, exclude=None):
        """The live widget, plus what a viewer without a kernel shows instead.

        JupyterLab with the kernel that made the widget renders the widget view (its renderer
        outranks images). nbconvert/nbviewer-style viewers (GitHub among them) skip a widget view
        whose state is not saved in the notebook and take the next type: the PNG, a replay of
        recorded results. With neither, the sentence in text/plain replaces `VBox(children=…)`."""
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

    # --- the controls ---------------------------------------------------------------------
    def _build(self):
        import ipywidgets as W

        # wide enough for the longest label ("group size (features per group)" was cut at 150 px), ~7 px a character
        label_px = max(150, 7 * max((len(p.label) for p in self.lesson.params), default=0))
        style = {"description_width": f"{label_px}px"}
        layout = W.Layout(width=f"{label_px + 330}px")
        self.sliders = {p.name: self._slider(W, p, style, layout) for p in self.lesson.params}
        for s in self.sliders.values():
            s.observe(self._on_slider, names="value")
        self.dtype_w = W.Dropdown(options=list(DTYPES), value="float32", description="dtype", style=style)
        devices = ["cuda", "cpu"] if has_cuda() else ["cpu"]
        self.device_w = W.Dropdown(options=devices, value=self.device.type, description="device", style=style)
        self._recorded = {}
        for r in self.records():  # a unique menu name each (two files may share a GPU and a kind)
            name, i = r.short(), 2
            while name in self._recorded:
                name, i = f"{r.short()} ({i})", i + 1
            self._recorded[name] = r
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
        self.run_b.on_click(lambda _b: self._act(self._do_run, measures=True))
        self.sweep_b.on_click(lambda _b: self._act(self._do_sweep, measures=True))
        self.stop_b.on_click(lambda _b: self._request_stop())
        self.source_w.observe(self._on_source, names="value")
        note = "" if has_cuda() else (
            "<i>No CUDA GPU here: runs use the CPU. Under “results from”, recorded GPU figures replay, each "
            "labelled measured, reported (from the forum thread) or model (datasheet roofline).</i>")
        missing = self.missing_note()
        budgets = (f"<i>Run and Sweep measure this machine ({html.escape(describe(self.device).name)}). "
                   f"Run refuses above about {fmt_time(self.run_budget)}, Sweep above {fmt_time(self.sweep_budget)} "
                   "(estimated on this machine first, from a few calls at this shape or a smaller one; the first "
                   "run in a dtype also measures this machine's peaks in it); Stop ends at the next timed call and "
                   "keeps a sweep's finished points."
                   + (f" {html.escape(missing)}" if missing else "") + "</i>")
        return W.VBox([
            W.HTML(f"<b>{self.lesson.title}</b> — {describe(self.device).line()}<br>{note}"),
            *self.sliders.values(),
            W.HBox([self.dtype_w, self.device_w]),
            W.HBox([self.source_w]),
            W.HBox([self.run_b, self.sweep_w, self.sweep_b, self.stop_b, self.progress]),
            W.HTML(budgets),
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

    # --- the actions ----------------------------------------------------------------------
    def _announce(self, seconds: float, what: str) -> None:
        """Called by run/sweep once the estimate passed the budget, before the timed part."""
        self._estimated = seconds
        self._estimate_line = (f"{what} on this machine ({describe(self.device).name}): about {fmt_time(seconds)} "
                               f"estimated here, now{_parts(self.estimate_parts)}")

    _estimate_line = ""

    def _on_phase(self, phase: str, detail: str) -> None:
        """The status names the phase running, what it does and for how long so far (`phases.Phases`); the
        plain API (no widget built) shows nothing."""
        self._phase_text = detail if phase in detail else f"{phase}: {detail}" if detail else phase
        counted = re.search(r"measuring .*\((\d+) of (\d+)\)$", detail) if self._bar_from_phases else None
        if counted and self._ui is not None:
            self.progress.max, self.progress.value = int(counted[2]), int(counted[1]) - 1
        self._show_phase()

    def _show_phase(self) -> None:
        if self._ui is None or not self._phase_text:
            return
        if self._stop_pressed is not None:  # stays until the action ends: a phase's next line must not hide it
            self.status.value = self._stopping_line()
            return
        ph = self.phases
        est = f"<br>{html.escape(self._estimate_line)}" if self._estimate_line else ""
        points = f"<br>{html.escape(self._points_note)}" if self._points_note else ""
        self.status.value = (f"<i>▶ {html.escape(self._phase_text)} — {ph.in_phase():.0f} s in this phase, "
                             f"{ph.elapsed():.0f} s in all{points}{est}. Stop ends it at the next timed call.</i>")

    def _stopping_line(self) -> str:
        waited = time.perf_counter() - self._stop_pressed
        if self.phases.current == "drawing":  # the measuring has ended: what is left is drawing its points
            return _line(f"■ stopping: Stop pressed {waited:.0f} s ago; nothing more is measured, drawing what "
                         "was…", "#b60")
        now = f" (now: {self._phase_text})" if self._phase_text else ""
        return _line(f"■ stopping: Stop pressed {waited:.0f} s ago; waiting for the call running now to "
                     f"return{now}…", "#b60")

    def _tick(self, worker: threading.Thread) -> None:
        """Refresh the status while `worker` runs, so a long phase's clock moves (a status unchanged for 25 s
        looked hung)."""
        while worker.is_alive():
            worker.join(self.TICK)
            if worker.is_alive() and self._phase_text:
                self._show_phase()

    def _request_stop(self):
        if self._worker is None or not self._worker.is_alive():
            return
        self._stop_pressed = time.perf_counter()
        self._stop.set()
        self.status.value = self._stopping_line()

    def _on_slider(self, _change) -> None:
        if not self._following:  # the reader moved a slider: a refusal no longer puts back the replay's
            self._before_replay = None

    def _on_source(self, _change):
        if self._following:
            return
        if self._worker is not None and self._worker.is_alive():  # shown once the current work ends
            self._pending_replay = True
            return
        self._act(self._do_replay)

    def _act(self, action, background: bool = True, measures: bool = False):
        """Run an action; returns its thread (or None when run in place). An action that measures
        (Run, Sweep) turns the "results from" menu back to this machine first, and says so."""
        if self._worker is not None and self._worker.is_alive():
            self.status.value = "<i>still working: press Stop first</i>"
            return None
        self._was_showing = None
        if measures and self.source_w.value != THIS_MACHINE:
            self._was_showing = self.source_w.value
            self._following = True  # not a replay: the observer ignores this change
            try:
                self.source_w.value = THIS_MACHINE
            finally:
                self._following = False
        self._stop.clear()
        self.status.value = "<i>working…</i>"
        self.run_b.disabled = self.sweep_b.disabled = True
        self.stop_b.disabled = False
        if not background:
            self._work(action)
            return None
        self._worker = threading.Thread(target=self._work, args=(action,), daemon=True)
        self._worker.start()
        threading.Thread(target=self._tick, args=(self._worker,), daemon=True).start()
        return self._worker

    def _work(self, action):
        """Everything inside one try block: a refusal (bad input, too big, over budget) or a stop
        becomes one line of status; an unexpected error one line naming it, its traceback folded
        under "details". Outputs go through `append_*`, which is safe from a thread."""
        self._estimated, self._done_note, self._stopped_note = None, "", ""
        self._phase_text, self._estimate_line, self._points_note = "", "", ""
        self._stop_pressed = None
        t0 = time.perf_counter()
        try:
            self.out.outputs = ()  # (clear_output would route through the kernel's current cell)
            for item in action():
                if isinstance(item, plt.Figure):
                    self.out.append_display_data(_png(item))
                else:
                    self.out.append_stdout(f"{item}\n")
            self._phase_text = ""
            self.status.value = self._done_line(time.perf_counter() - t0)
        except Stopped:
            self._stop_pressed = None
            self.status.value = _line("■ stopped: nothing after the last finished measurement ran", "#b60")
        except ValueError as err:  # includes DoesNotFit: refused before (or freed after) allocating
            back = self._back_from_replay() if isinstance(err, OverBudget) else ""
            self.status.value = _line(f"⚠ {_first_line(err)}{back}", "#b00")
        except Exception as err:  # a bug, not the reader's fault: one line, the traceback folded away
            self.status.value = _line(f"⚠ unexpected {type(err).__name__}: {_first_line(err)} (please report it)",
                                      "#b00") + _details(err)
        finally:
            self._phase_text, self._stop_pressed = "", None
            self.progress.value = 0
            self.run_b.disabled = self.sweep_b.disabled = False
            self.stop_b.disabled = True
        if self._pending_replay:  # the menu moved while this ran: what it shows now must be drawn
            self._pending_replay = False
            if threading.current_thread() is self._worker:
                self._worker = threading.Thread(target=self._work, args=(self._do_replay,), daemon=True)
                self._worker.start()
            else:
                self._work(self._do_replay)

    def _done_line(self, seconds: float) -> str:
        """How long it took in all, phase by phase beside what was estimated for each (`Phases.summary`)."""
        if self._estimated is None:  # a replay: nothing was timed
            return self._done_note
        when = f"took {fmt_time(seconds)} in all on this machine: {self.phases.summary()}"
        done = (_line(f"■ {self._stopped_note} ({when})", "#b60") if self._stopped_note
                else _line(f"✓ done: {when}", "#070"))
        return done + (f"<br>{self._done_note}" if self._done_note else "")

    def _measuring_line(self) -> str:
        """The first line a Run or Sweep prints: what it measures, and what the menu showed before."""
        line = f"Measuring this machine: {describe(self.device).line()}."
        if self._was_showing:
            line += f" (“results from” was showing {self._was_showing}; it now says “{THIS_MACHINE}”.)"
        return line

    def _do_run(self):
        self._bar_from_phases = True  # the bar counts the variants measured (`_on_phase`)
        self.progress.value = 0
        run, fig = self.run(self.dtype_w.value, self.device_w.value, stop=self._stop.is_set, **self._params())
        self._bar_from_phases = False
        notes = [_line(run.winner, "#333") if run.winner else "", _line(self.regime_line(run), "#333"),
                 _noise_line(list(run.timings.values()), run)]
        self._done_note = "<br>".join(n for n in notes if n)
        return ([self._measuring_line(), fig, run.table(self.lesson.baseline), self.regime_table(run)]
                + ([run.metrics_table()] if run.metrics else []))

    def _do_sweep(self):
        def step(i, n):  # the count stays in the status under each phase's line until the sweep ends
            self.progress.max, self.progress.value = n, i
            self._points_note = f"{i} of {n} points measured (Stop keeps them)" if i < n else f"all {n} points measured"
            self._show_phase()

        self.progress.value = 0
        sw, fig = self.sweep(self.sweep_w.value, dtype=self.dtype_w.value, device=self.device_w.value,
                             on_step=step, stop=self._stop.is_set, **self._params())
        if sw.stopped:
            self._stopped_note = (f"stopped after {len(sw.values)} of {len(sw.planned)} points: the figure shows "
                                  "the points measured")
        swept = "" if sw.stopped else _line(
            f"a sweep over {self.lesson.param(sw.param).label}: {len(sw.values)} points, each variant at each", "#333")
        self._done_note = "<br>".join(n for n in (swept, _noise_line([t for r in sw.runs for t in r.timings.values()]))
                                      if n)
        return [self._measuring_line(), fig, self.sweep_regimes(sw)]

    def _do_replay(self):
        if self.source_w.value == THIS_MACHINE:
            return ["Press Run or Sweep to measure on this machine."]
        rec = self._recorded[self.source_w.value]
        shape = self.replay_params(rec)
        moved = self._follow(shape)
        figs = self.replay(rec)
        regimes = self.replay_regimes(rec)
        other = rec.is_gpu != (self.device.type == "cuda")  # a GPU's shape on a CPU: Run may be over budget there
        where = (f"The sliders now show the record's shape: {', '.join(f'{k}={v}' for k, v in shape.items())}"
                 + ("" if moved else " (no slider moved)") + ". Run measures this machine at that shape"
                 + (" (if that is over Run's budget here, the sliders go back to where they were)." if other else ".")
                 if shape else "This record states no shape for its figures (the source gives none), so the "
                               "sliders stay where they were.")
        if not figs:
            figs = ["(this record holds no figure for this lesson)"]
        how = f"How it was recorded: {rec.conditions(self._key_of(rec))}."
        return [rec.label(), rec.figure_note(), how, where, *figs, *([regimes] if regimes else [])]

    def _follow(self, shape: dict) -> bool:
        """Move the sliders to a record's shape (a value a selection slider lacks is added to it), remembering
        where they were before the first replay that moved them (`_back_from_replay`)."""
        before, moved = self._params(), False
        self._following = True  # not the reader's move (`_on_slider`)
        try:
            for name, value in shape.items():
                s = self.sliders.get(name)
                if s is None or not isinstance(value, int) or s.value == value:
                    continue
                if hasattr(s, "options"):  # SelectionSlider of (label, value) pairs
                    values = [v for _label, v in s.options]
                    if value not in values:
                        s.options = [(str(v), v) for v in sorted({*values, value})]
                else:
                    s.max, s.min = max(s.max, value), min(s.min, value)
                s.value = value
                moved = True
        finally:
            self._following = False
        if moved and self._before_replay is None:
            self._before_replay = before
        return moved

    def _back_from_replay(self) -> str:
        """After a refusal over the budget at a shape a replay set (a GPU's, 125 s on a CPU: lesson 07), the sliders
        go back to where the reader had them, and the refusal says so: a replay never leaves them where Run refuses."""
        before, self._before_replay = self._before_replay, None
        if not before:
            return ""
        self._follow(before)
        self._before_replay = None
        return (f" That was the replayed record's shape; the sliders are back where they were before the replay: "
                f"{', '.join(f'{k}={v}' for k, v in before.items())}.")
