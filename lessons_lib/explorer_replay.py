"""The explorer's "results from" menu: the recorded files it lists and the figures each replays.

A mixin for `widgets.Explorer` (it draws with the explorer's `_bars` and `_sweep_fig`, in the lesson's
order and colours). Every replayed figure says what its numbers are (measured, reported or model), on
what hardware, at what shape, and how they were recorded (`results.Recorded.conditions`: a CPU file made
at load 6 beside two busy loops reads 4x this machine's own idle run).
"""
from __future__ import annotations

import math

from . import plots, results, roofline
from .runs import crossover
from .posted_figures import _posted_figure, _shape_str
from .timing import Timing

_BAR_LABELS = {"measured": "median, whiskers ± IQR/2", "model": "roofline floor (model, not a measurement)",
               "reported": "as reported (no spread given)"}


class Replaying:
    """records, replay, replay_params, replay_regimes (`widgets.Explorer` inherits them)."""

    def records(self) -> list[results.Recorded]:
        """Every recorded file the menu lists: those holding this lesson, and the reported figures
        of its thread when another lesson stores them (`Lesson.reported_from`); with `sections`, the files
        where it finds this explorer's figures."""
        if self._sections() is not None:
            return [r for r in results.load_all() if self._sections()(r)]
        recs = results.for_lesson(self.lesson.key)
        extra = self.lesson.reported_from
        if extra:
            recs += [r for r in results.for_lesson(extra, kinds="reported") if r not in recs]
        return recs

    def missing_records(self) -> list[results.Recorded]:
        """Measured files that hold other lessons but not this one (the H200's has no lesson 03: its
        recording ran past its cap): the explorer says so instead of listing a record with nothing in it."""
        listed = self.records()
        return [r for r in results.load_all() if r.kind == "measured" and r not in listed and r.lessons]

    def missing_note(self) -> str:
        missing = self.missing_records()
        if not missing:
            return ""
        names = ", ".join(r.short() for r in missing)
        return f"Not in “results from” (they hold no figures for this explorer): {names}."

    def _sections(self):
        """The explorer's `sections(recorded) -> (key, section) | None`: a lesson whose record keeps this
        explorer's figures inside another section (lesson 03's training step in the CPU files' 03 section,
        lesson 06's copies in its own) says where they are, in `Recorded.lesson`'s form; None: its key."""
        return getattr(self, "sections", None)

    def _section(self, recorded: results.Recorded) -> dict:
        if self._sections() is not None:
            found = self._sections()(recorded)
            return found[1] if found else {}
        data = recorded.lesson(self.lesson.key)
        if not data and self.lesson.reported_from:
            data = recorded.lesson(self.lesson.reported_from)
        return data if isinstance(data, dict) else {}

    def _key_of(self, recorded: results.Recorded) -> str:
        if self._sections() is not None:
            found = self._sections()(recorded)
            return found[0] if found else self.lesson.key
        return self.lesson.key if recorded.lessons.get(self.lesson.key) else (self.lesson.reported_from or "")

    def replay_params(self, recorded: results.Recorded) -> dict:
        """The shape a record's figures are at (its headline's, or its first sweep's base), for the
        sliders to follow; {} when the source does not state one (a thread's totals without a shape)."""
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
        hardware and its shape, and captioned with how it was recorded. A model file's figures are
        roofline floors: drawn as the bars, with no floor marks. A record's sweeps replay as sweeps; a
        thread's other figures (totals, speed-ups, memory as posted) as what they are, in their own units."""
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
            cross = crossover_of(self.lesson, sw["values"], meds)
            base = _shape_str(sw.get("base", {}))
            figs.append(self._sweep_fig(sw["values"], meds, iqrs, sw.get("metrics", {}),
                                        self.lesson.param(sw["param"]).label, cross,
                                        f"{tag}\nsweep over {sw['param']} at {base}, {sw['dtype']}"))
        for key, sec in data.items():
            if key not in ("headline", "sweeps") and isinstance(sec, dict) and not key.endswith("_params"):
                fig = _posted_figure(sec, data.get(f"{key}_unit"), data.get(f"{key}_params"), tag)
                if fig is not None:
                    figs.append(fig)
        conditions = recorded.conditions(self._key_of(recorded))
        for fig in figs:
            plots.caption_below(fig, f"{recorded.short()}: {conditions}.")
        return figs

    def _preview_png(self) -> str | None:
        """A static picture for viewers without a kernel: the first recorded result that replays
        (a file may hold only tables for this lesson, such as a thread's speed-ups)."""
        import base64

        import matplotlib.pyplot as plt

        figs = []
        for rec in self.records():
            figs = self.replay(rec)
            if figs:
                break
        if not figs:
            return None
        plots.caption_below(figs[0], "A picture of recorded results, not the explorer: run this notebook to use it.")
        png = _png(figs[0]).data
        for f in figs[1:]:
            plt.close(f)
        return base64.b64encode(png).decode()

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


def crossover_of(lesson, values: list[int], meds: dict[str, list[float]]) -> int | None:
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


def _png(fig):
    """A figure as a PNG image object (closed afterwards): the same in any kernel and any thread."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight")
    plt.close(fig)
    return Image(data=buf.getvalue(), format="png")
