"""Lesson 05's reported figures: the thread's eager and graphed tables (read from the recorded file)
beside the launch model's predictions: tables, the figure, the fit per preset, the rise graphs give,
and where the reported rise exceeds the model's cap."""
from __future__ import annotations

import math

from .. import launch_queue, plots, results
from ..display import text_table
from .evidence import dispatch_estimate, graph_gain_cap, host_dispatch, speedup_curve
from .lessons import MODEL_BATCH, MODEL_LAYERS, REPORTED_WIDTHS, SEED_KEY


def reported_tables() -> tuple[str, dict[str, dict[int, float]]]:
    """(label, {table: {width: PseudoLinear speed-up over Linear}}) as reported in the thread,
    read from the recorded file (kind: reported)."""
    for rec in results.for_lesson(SEED_KEY, kinds="reported"):
        tables = (rec.lessons[SEED_KEY].get("speedups") or {}).get("tables")
        if tables:
            return rec.label(), {name: dict(zip(t["values"], t["speedup"])) for name, t in tables.items()}
    return "", {}


def _graphed_pair() -> tuple[str, str]:
    """The names of the thread's eager and graphed tables from the same GPU."""
    _label, tables = reported_tables()
    graphed = next(n for n in tables if "graph" in n.lower())
    eager = next(n for n in tables if n != graphed and set(tables[n]) == set(tables[graphed]))
    return eager, graphed


def reported_table() -> str:
    """The thread's tables from the GPU it ran with and without graphs (reported figures)."""
    label, tables = reported_tables()
    eager, graphed = _graphed_pair()
    rows = [("width", "eager", "make_graphed_callables")]
    rows += [(str(w), f"{tables[eager][w]:.2f}×", f"{tables[graphed][w]:.2f}×") for w in sorted(tables[eager])]
    return (f"PseudoLinear speed-up over Linear, {label}\n" + text_table(rows, numbers=True) +
            "\nThe GPU is not named and the batch is not stated in the thread.")


def model_vs_reported(gpu: str = "T4", batch: int = MODEL_BATCH, layers: int = MODEL_LAYERS,
                      dispatch: float | None = None) -> tuple[list[int], dict[str, list[float]]]:
    """Widths and series: the thread's eager and graphed tables (reported) and the model's (predicted)."""
    label, tables = reported_tables()
    eager, graphed = _graphed_pair()
    curve = speedup_curve(REPORTED_WIDTHS, batch, layers, gpu, dispatch)
    return REPORTED_WIDTHS, {
        "reported, eager": [tables[eager][w] for w in REPORTED_WIDTHS],
        "reported, make_graphed_callables": [tables[graphed][w] for w in REPORTED_WIDTHS],
        f"model ({gpu}, batch {batch}), eager": curve["Linear ÷ PseudoLinear, eager"],
        f"model ({gpu}, batch {batch}), graphed": curve["Linear ÷ PseudoLinear, graphed"],
    }


def fit_to_reported(batch: int = MODEL_BATCH, dispatch: float | None = None) -> dict[str, float]:
    """{preset: mean |log(model / reported)|} over both tables: how far each preset's curve lies from
    the thread's figures (0 = on them). The thread names no GPU, so this is a comparison, not evidence."""
    dispatch = host_dispatch() if dispatch is None else dispatch
    out = {}
    for gpu in launch_queue.PRESETS:
        _w, s = model_vs_reported(gpu, batch, dispatch=dispatch)
        rep, mod = list(s.values())[:2], list(s.values())[2:]
        pairs = [(m, r) for ms, rs in zip(mod, rep) for m, r in zip(ms, rs)]
        out[gpu] = sum(abs(math.log(m / r)) for m, r in pairs) / len(pairs)
    return out


def closest_preset() -> tuple[str | None, str]:
    """(preset, sentence): the preset whose model curve lies closest to the thread's, stated only when it is
    the same at both ends of the measured dispatch's spread (the noise rule); (None, not decided) otherwise."""
    est = dispatch_estimate()
    best = {min(f, key=f.get) for f in (fit_to_reported(dispatch=d) for d in (est.low, est.median, est.high))}
    if len(best) == 1 and est.decided:
        name = best.pop()
        return name, f"closest to the reported curves with this host's dispatch: {name} (a comparison, not evidence)"
    return None, "closest preset: " + est.not_decided()


def model_vs_reported_table(gpu: str = "T4", batch: int = MODEL_BATCH, dispatch: float | None = None) -> str:
    widths, series = model_vs_reported(gpu, batch, dispatch=dispatch)
    rows = [("width", *series)]
    rows += [(str(w), *(f"{s[i]:.2f}×" for s in series.values())) for i, w in enumerate(widths)]
    label, _t = reported_tables()
    return (text_table(rows, numbers=True) + f"\nreported: {label} (GPU not named; batch not stated)."
            f"\nmodel: launch model, {gpu} datasheet peaks, batch {batch} assumed, dispatch measured on this host.")


def graph_gain(gpu: str = "T4", batch: int = MODEL_BATCH, dispatch: float | None = None) -> dict[str, list[float]]:
    """How much graphs raise PseudoLinear's speed-up over Linear at each reported width (graphed
    ratio ÷ eager ratio): the thread's (reported) and the model's (predicted)."""
    _w, s = model_vs_reported(gpu, batch, dispatch=dispatch)
    (_re, rep_e), (_rg, rep_g), (_me, mod_e), (_mg, mod_g) = s.items()
    return {"reported": [g / e for e, g in zip(rep_e, rep_g)],
            f"model ({gpu}, batch {batch})": [g / e for e, g in zip(mod_e, mod_g)]}


def graph_gain_table(gpu: str = "T4", batch: int = MODEL_BATCH, dispatch: float | None = None) -> str:
    """graph_gain as a table, with one sentence each on where the rise is largest (computed)."""
    gain = graph_gain(gpu, batch, dispatch)
    rows = [("width", *(f"graphs raise the ratio, {k}" for k in gain))]
    rows += [(str(w), *(f"×{v[i]:.2f}" for v in gain.values())) for i, w in enumerate(REPORTED_WIDTHS)]
    lines = [text_table(rows, numbers=True)]
    for k, v in gain.items():
        i = max(range(len(v)), key=v.__getitem__)
        lines.append(f"{k}: at or above ×1 at {sum(x >= 0.995 for x in v)} of {len(v)} widths; largest "
                     f"×{v[i]:.2f} at width {REPORTED_WIDTHS[i]}")
    return "\n".join(lines)


def model_vs_reported_figure(gpu: str = "T4", batch: int = MODEL_BATCH, dispatch: float | None = None):
    import matplotlib.pyplot as plt

    widths, series = model_vs_reported(gpu, batch, dispatch=dispatch)
    fig = plots.lines(widths, series, xlabel="width (features)",
                      ylabel="PseudoLinear speed-up over Linear (×, log)",
                      title="Seed 003: reported (their GPU) next to the launch model (predicted)")
    ax = fig.axes[0]
    for line in ax.get_lines():
        if line.get_label().startswith("reported"):
            line.set_linestyle("--")
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _pos: f"{v:g}"))
    return fig


def widths_above_cap(gpu: str = "T4") -> str:
    """Where the thread's reported rise from graphs exceeds the model's cap, with the measured dispatch's
    spread: stated only when both ends of its inter-quartile range give the same widths (the noise rule)."""
    est = dispatch_estimate()
    reported = graph_gain(gpu, dispatch=est.median)["reported"]
    found = [tuple(w for w, g in zip(REPORTED_WIDTHS, reported) if g > graph_gain_cap(d, gpu))
             for d in (est.low, est.median, est.high)]
    caps = [graph_gain_cap(d, gpu) for d in (est.low, est.high)]
    if not est.decided or found[0] != found[2]:
        return f"the model's cap on any step's gain from graphs: ×{caps[0]:.2f} to ×{caps[1]:.2f}; " + est.not_decided()
    above = found[1]
    where = f"width {above[0]}" if len(above) == 1 else f"widths {', '.join(map(str, above))}" if above else "no width"
    return (f"the model's cap on any step's gain from graphs, with this host's dispatch: ×{graph_gain_cap(est.median, gpu):.2f}"
            f" (×{caps[0]:.2f} to ×{caps[1]:.2f} over the measurement's spread); reported rises above it at {where}")
