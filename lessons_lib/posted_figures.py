"""A forum thread's posted figure that is not per-call timings, drawn in its own units.

The explorer's replay (`widgets.Explorer.replay`) calls `_posted_figure` for the sections of a
reported record it cannot draw as timings. Split from widgets.py (issue 21), which re-exports it.
"""
from __future__ import annotations

from . import plots


def _posted_figure(sec: dict, unit: str | None, params: dict | None, tag: str):
    """A thread's figure that is not per-call timings, in its own units; None for a shape we do not know.

    {"tables": {source: {"values", <quantity>}}, "param", "quantity"}: the quantity against the
        parameter, one line per source (each with its own x values);
    {"totals_s": {name: s}, "quantity"}: one bar each, in seconds as posted;
    {"runs": [{"<name>_s": s, <shape>...}]}: each run's seconds as posted, labelled with its shape;
    {label: number} (with "<key>_unit" beside it, say "bytes"): one bar each.
    The shape is "<key>_params" beside it, or the section's "params"."""
    params = params or sec.get("params")
    shape = "shape: " + (_shape_str(params) if isinstance(params, dict) else
                         "as posted; the thread does not state all of it")
    title = f"{tag}\n{shape}"
    if isinstance(sec.get("tables"), dict):
        curves = {}
        for name, t in sec["tables"].items():
            ys = next((v for k, v in t.items() if k != "values" and isinstance(v, list)), None)
            if ys is not None and isinstance(t.get("values"), list):
                curves[name] = (t["values"], ys)
        ylabel = sec.get("quantity", "as posted")
        return plots.curves(curves, xlabel=sec.get("param", ""), ylabel=_wrap(ylabel, 40), title=title) if curves else None
    if isinstance(sec.get("totals_s"), dict):
        return plots.quantity_bars(sec["totals_s"], "total seconds, as posted (s; not per call)", title=title)
    if isinstance(sec.get("runs"), list):
        bars = {}
        for r in sec["runs"]:
            label = ", ".join(f"{k} {v}" for k, v in r.items() if not k.endswith("_s"))
            bars.update({f"{k[:-2]} ({label})": v for k, v in r.items() if k.endswith("_s")})
        return plots.quantity_bars(bars, "total seconds, as posted (s; not per call)", title=title) if bars else None
    numbers = {k: v for k, v in sec.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if numbers and len(numbers) == len(sec):
        if unit == "bytes":
            return plots.quantity_bars({k: v / 2**20 for k, v in numbers.items()}, "MiB, as posted", title=title)
        return plots.quantity_bars(numbers, f"as posted ({unit})" if unit else "as posted", title=title)
    return None


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _shape_str(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())

