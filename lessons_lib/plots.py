"""The course's figures. Every axis says what it measures and in which unit."""
from __future__ import annotations

import threading

import matplotlib.pyplot as plt

from matplotlib.figure import Figure

from .plot_axes import (  # noqa: F401  (re-exported: plots.is_powers_of_two and the rest)
    _log_y, _wide, _x_axis, caption_below, fit_to_figure, is_powers_of_two, pinned_legends, shared_legend, unit_of,
)

_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def time_unit(values) -> tuple[str, float]:
    """The unit that makes the largest of `values` (seconds) read between 1 and 1000."""
    top = max((v for v in values if v == v and v > 0), default=1e-3)
    for unit, scale in _UNITS:
        if top >= scale:
            return unit, scale
    return "ns", 1e-9


def variant_colors(names) -> dict[str, str]:
    """One colour per variant, fixed by the lesson's order, so live runs and replays match."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    return {n: cycle[i % len(cycle)] for i, n in enumerate(names)}


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


_SUBPLOTS_KW = ("nrows", "ncols", "sharex", "sharey", "squeeze", "width_ratios", "height_ratios", "subplot_kw",
                "gridspec_kw")


class CourseFigure(Figure):
    """Every course figure: before each draw its long y labels are wrapped to their axes and its caption put under
    everything else (`plot_axes.fit_to_figure`), whatever size a cell gives it. savefig(bbox_inches="tight"), as
    notebooks and explorers save, draws twice: laid out, then cropped; in the cropped draw a legend anchored to the
    figure would follow the crop's bottom edge onto the caption, so it keeps the place the layout gave it."""

    def draw(self, renderer):
        if self.bbox is self.figbbox:  # not cropped
            fit_to_figure(self, renderer)
            return super().draw(renderer)
        with pinned_legends(self):
            return super().draw(renderer)


def subplots(*args, **kwargs):
    """Every course figure is made here, a `CourseFigure`. On the main thread (a notebook cell), `plt.subplots`:
    the cell shows the figure. Off it (an explorer's worker thread), a figure pyplot does not know: pyplot's
    interactive auto-draw (a figure redrawn on every change while it is built), run from a worker thread of a
    kernel, corrupted replayed figures at random in JupyterLab: bars off their labels, over the title, blank plots."""
    if threading.current_thread() is threading.main_thread():
        return plt.subplots(*args, FigureClass=CourseFigure, **kwargs)
    fig = CourseFigure(**{k: v for k, v in kwargs.items() if k not in _SUBPLOTS_KW})
    return fig, fig.subplots(*args, **{k: v for k, v in kwargs.items() if k in _SUBPLOTS_KW})


def _axes(ax, figsize=(7, 3.2)):
    if ax is None:
        fig, ax = subplots(figsize=figsize, layout="constrained")
    return ax.figure, ax


LOG_RANGE = 20  # bars whose largest is over this many times the smallest get a log axis: one 233 ms bar
# flattened seven of 2-6 ms into slivers on a linear one (lesson 03's block-diagonal)


def bars(timings, floors: dict[str, float] | None = None, title: str = "", ax=None,
         colors: dict[str, str] | None = None, bar_label: str = "median, whiskers ± IQR/2"):
    """Median time per call of each variant with its IQR, and the hardware floor if given.

    A floor that its own bar beats is not drawn (a lower bound under a measurement is a wrong model on this
    machine: its measured peak is not the op's); the axis label names those variants. Bars spanning more
    than LOG_RANGE× get a log axis, said in the label."""
    fig, ax = _axes(ax, (7, 1.4 + 0.45 * len(timings)))  # room for a two-line title, axis and legend
    floors = dict(floors or {})
    beaten = [t.label for t in timings if t.label in floors and t.median == t.median and floors[t.label] > t.median]
    for name in beaten:
        floors.pop(name)
    unit, scale = time_unit([t.median + t.iqr for t in timings] + list(floors.values()))
    ys = range(len(timings))
    color = [(colors or {}).get(t.label, "tab:blue") for t in timings]
    spread = [t.iqr / 2 / scale for t in timings]
    meds = [t.median / scale for t in timings]
    ax.barh(ys, meds, xerr=spread if any(spread) else None,  # a model has none
            color=color, alpha=0.8, capsize=3, label=bar_label)
    what = bar_label
    if floors:
        fl = [floors.get(t.label, float("nan")) / scale for t in timings]
        ax.scatter(fl, ys, marker="|", s=400, color="black", zorder=3, label="floor (roofline)")
        what += "; black tick: roofline floor"
    if beaten:
        what += f"\nno floor for {', '.join(beaten)}: measured under it (this machine's measured peak is not that op's)"
    positive = [m for m in meds if m == m and m > 0]
    log = bool(positive) and max(positive) / min(positive) > LOG_RANGE
    if log:
        from matplotlib.ticker import FuncFormatter

        ax.set_xscale("log")
        ax.set_xlim(left=min(positive) / 2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))  # 1, 10, 100: not 10⁰, 10¹, 10²
    ax.set_yticks(list(ys), [t.label for t in timings])
    ax.invert_yaxis()
    # what the bars are goes under the axis, not in a legend: a legend box covers the longest bar
    ax.set_xlabel(f"time per call ({unit}{', log scale' if log else ''})\n{what}", fontsize=9)
    ax.set_title(title)
    return fig


def sweep(values, medians: dict[str, list[float]], iqrs: dict[str, list[float]] | None = None,
          xlabel: str = "", title: str = "", crossover=None, ax=None, logy: bool = True,
          colors: dict[str, str] | None = None, legend: bool = True):
    """Median time per call against one shape parameter, IQR as a band, crossover marked.

    Powers of two get a base-2 logarithmic x axis; the swept values are the ticks (whole numbers: a
    one-point sweep is drawn at its value, not on an axis of 3.8…4.2). legend=False: the caller draws one
    for several panels (`shared_legend`)."""
    fig, ax = _axes(ax)
    unit, scale = time_unit([v for series in medians.values() for v in series])
    for i, (name, meds) in enumerate(medians.items()):
        ys = [m / scale for m in meds]
        # a marker and size each: equal floors (a model's) would otherwise hide a line under another
        (line,) = ax.plot(values, ys, marker=_MARKERS[i % len(_MARKERS)], ms=7 - 4 * i / max(len(medians), 1),
                          mfc="none", label=name, color=(colors or {}).get(name))
        if iqrs:
            half = [q / 2 / scale for q in iqrs[name]]
            ax.fill_between(values, [y - h for y, h in zip(ys, half)], [y + h for y, h in zip(ys, half)],
                            color=line.get_color(), alpha=0.2, lw=0)
    if crossover is not None:
        ax.axvline(crossover, color="gray", ls="--", lw=1)
        at_right_end = crossover >= max(values)  # label inside the axes, not cut off at the edge
        ax.annotate(f" crossover at {crossover} ", (crossover, 0.95), xycoords=("data", "axes fraction"),
                    ha="right" if at_right_end else "left", va="top", fontsize=8, color="gray")
    if logy:
        _log_y(ax)
    _x_axis(ax, values)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"time per call ({unit})")
    ax.set_title(title)
    if legend:
        _legend_outside(ax)
    return fig


def _legend_outside(ax, fontsize=8, **kw):
    """The legend right of the axes: lines cross every corner of a log plot, so inside it covers data."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, **kw)


_REGIME_MARKERS = {"overhead": "s", "memory": "^", "compute": "D"}


def sweep_floors(sweep, peaks, per: str | None = None, per_label: str = "", xlabel: str = "", title: str = "",
                 ax=None, colors: dict[str, str] | None = None):
    """A sweep of variants on log-log axes, each measured median (IQR as a band) with its roofline
    floor dashed in the same colour; the floor's markers show its regime (square: overhead, triangle:
    memory, diamond: compute). Where a line runs along its floor, that bound is what it pays: flat
    for overhead, slope 1 where bytes grow with the swept size, slope 2 for a GEMM's FLOPs over width.

    sweep: a `lesson.Sweep` (its values, and runs with timings and traced work); peaks: the
    `roofline.Peaks` the floors use. per: a parameter to divide by, per_label what one unit of it
    is (per="batch", per_label="row": time per row). xlabel: default, the swept parameter's name."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    fig, ax = _axes(ax, (7, 3.6))
    values = list(sweep.values)
    div = [r.params[per] if per else 1 for r in sweep.runs]
    names = list(sweep.runs[0].timings) if sweep.runs else []
    meds = {n: [r.timings[n].median / d for r, d in zip(sweep.runs, div)] for n in names}
    iqrs = {n: [r.timings[n].iqr / d for r, d in zip(sweep.runs, div)] for n in names}
    floors = {n: [peaks.floor(r.work[n]) / d for r, d in zip(sweep.runs, div)] for n in names}
    regimes = {n: [peaks.regime(r.work[n]) for r in sweep.runs] for n in names}
    unit, scale = time_unit([v for series in (*meds.values(), *floors.values()) for v in series])
    for name in names:
        ys = [m / scale for m in meds[name]]
        (line,) = ax.plot(values, ys, marker="o", ms=3, label=f"{name} (measured)", color=(colors or {}).get(name))
        half = [q / 2 / scale for q in iqrs[name]]
        if any(half):
            ax.fill_between(values, [max(y - h, y / 10) for y, h in zip(ys, half)], [y + h for y, h in zip(ys, half)],
                            color=line.get_color(), alpha=0.2, lw=0)
        fl = [f / scale for f in floors[name]]
        ax.plot(values, fl, ls="--", lw=1, color=line.get_color(), label=f"{name} floor")
        for r, marker in _REGIME_MARKERS.items():
            pts = [(v, f) for v, f, g in zip(values, fl, regimes[name]) if g == r]
            if pts:
                ax.plot(*zip(*pts), ls="none", marker=marker, ms=5, mfc="none", color=line.get_color())
    ax.set_xscale("log", base=2 if is_powers_of_two(values) else 10)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_yscale("log")
    ax.set_xlabel(xlabel or sweep.param)
    each = per_label or (f"call ÷ {per}" if per else "call")
    ax.set_ylabel(f"time per {each} ({unit}, log)")
    ax.set_title(title)
    seen = [r for r in _REGIME_MARKERS if any(r in g for g in regimes.values())]
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], ls="none", marker=_REGIME_MARKERS[r], mfc="none", color="black") for r in seen]
    labels += [f"floor: {r}-bound" for r in seen]
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    return fig


def winner_map(rows, cols, winners: list[list[str]], order: list[str], notes: list[list[str]] | None = None,
               xlabel: str = "", ylabel: str = "", title: str = "", colors: dict[str, str] | None = None,
               decided: list[list[bool]] | None = None):
    """A grid coloured by which variant won at each (row, column) cell, with an optional note in each
    cell (say, the loser's time over the winner's) and a legend of the winners that occur.
    order: every variant name, in the lesson's order (fixes each one's colour across figures).
    decided: per cell, whether the noise rule decided its winner; an undecided cell is washed out and
    hatched (its colour is only the faster median), and the legend says so: a firm colour where the
    table says "not decided" contradicted it."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch, Rectangle

    colors = colors or variant_colors(order)
    idx = [[order.index(w) for w in row] for row in winners]
    fig, ax = subplots(figsize=(1.4 + 1.1 * len(cols), 1.2 + 0.7 * len(rows)), layout="constrained")
    ax.imshow(idx, cmap=ListedColormap([colors.get(n, "gray") for n in order]), vmin=-0.5,
              vmax=len(order) - 0.5, aspect="auto")
    undecided = [(i, j) for i, row in enumerate(decided or []) for j, ok in enumerate(row) if not ok]
    for i, j in undecided:
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="white", alpha=0.6, hatch="//",
                               edgecolor="#888", lw=0))
    for i, row in enumerate(notes or []):
        for j, note in enumerate(row):
            ax.text(j, i, note, ha="center", va="center", fontsize=7,
                    color="#333" if (i, j) in undecided else "white")
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    present = sorted({w for row in winners for w in row}, key=order.index)
    handles = [Patch(color=colors.get(n, "gray"), label=n) for n in present]
    if undecided:
        handles.append(Patch(facecolor="white", edgecolor="#888", hatch="//",
                             label="not decided (pale: only the faster median)"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def machines(rows: dict[str, dict[str, float]], title: str = "", ax=None, order: list[str] | None = None,
             caption: str | None = None):
    """Grouped bars: each variant's median on each machine (log scale: CPUs and GPUs differ 100×).

    order: the variants' order (default: `rows.order` where `results.side_by_side` made the rows, the
    lesson's declared order; else as they first appear). caption: a line under the figure (default:
    `rows.caption`, each recording's conditions)."""
    fig, ax = _axes(ax)
    machines_ = list(rows)
    seen = list(dict.fromkeys(v for r in rows.values() for v in r))
    order = list(order if order is not None else getattr(rows, "order", None) or [])
    variants = [v for v in order if v in seen] + [v for v in seen if v not in order]
    caption = caption if caption is not None else getattr(rows, "caption", "")
    unit, scale = time_unit([t for r in rows.values() for t in r.values()])
    width = 0.8 / max(len(machines_), 1)
    for i, m in enumerate(machines_):
        xs = [j + i * width for j in range(len(variants))]
        ax.bar(xs, [rows[m].get(v, float("nan")) / scale for v in variants], width, label=m)
    ax.set_xticks([j + width * (len(machines_) - 1) / 2 for j in range(len(variants))], variants, rotation=15,
                  ha="right", rotation_mode="anchor")  # each name ends at its group: long ones ran into the next
    _log_y(ax)
    models = sum("· model" in m for m in machines_)  # results.Recorded.short() names each row's kind
    what = ("median time per call" if not models else "roofline floor per call (model)" if models == len(machines_)
            else "time per call: median where measured, floor where model")
    ax.set_ylabel(f"{what} ({unit}, log)")
    ax.set_title(title)
    _legend_outside(ax)
    if caption:
        caption_below(fig, caption)
    return fig


def samples(timings, title: str = "", ax=None):
    """Every sample of each timing in call order: shows warm-up, outliers and drift."""
    fig, ax = _axes(ax)
    unit, scale = time_unit([s for t in timings for s in t.samples])
    for t in timings:
        ax.plot(range(1, len(t.samples) + 1), [s / scale for s in t.samples], marker=".", lw=0.8, label=t.label)
    ax.set_xlabel("sample number")
    ax.set_ylabel(f"time per call ({unit})")
    ax.set_title(title)
    _legend_outside(ax)
    return fig


def quantity_bars(values: dict[str, float], xlabel: str, title: str = "", ax=None,
                  colors: dict[str, str] | None = None):
    """One bar per variant for a quantity that is not a time; `xlabel` names it with its unit."""
    fig, ax = _axes(ax, (7, 1.3 + 0.45 * len(values)))  # room for a two-line title and the axis
    ys = range(len(values))
    ax.barh(ys, list(values.values()), color=[(colors or {}).get(n, "tab:orange") for n in values], alpha=0.8)
    ax.set_yticks(list(ys), list(values))
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    return fig


def lines(values, series: dict[str, list[float]], xlabel: str, ylabel: str, title: str = "", ax=None,
          logy: bool = True, colors: dict[str, str] | None = None, legend: bool = True):
    """A quantity that is not a time against one shape parameter, one line per variant."""
    fig, ax = _axes(ax)
    for name, ys in series.items():
        ax.plot(values, ys, marker="o", ms=3, label=name, color=(colors or {}).get(name))
    if logy and all(y > 0 for ys in series.values() for y in ys):
        _log_y(ax)
    _x_axis(ax, values)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        _legend_outside(ax)
    return fig


def curves(series: dict[str, tuple[list, list]], xlabel: str, ylabel: str, title: str = "", ax=None,
           logy: bool = True):
    """One line per source, each with its own x values ({name: (xs, ys)}): figures as posted, where
    each source measured at different points. Powers of two and wide ranges get a log x axis."""
    fig, ax = _axes(ax, (7, 3.6))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", ms=3, label=name)
    xs_all = [x for xs, _ in series.values() for x in xs]
    if xs_all and min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 16:
        ax.set_xscale("log", base=2)
        from matplotlib.ticker import FuncFormatter

        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    if logy and all(y > 0 for _, ys in series.values() for y in ys):
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), borderaxespad=0)  # below: long names
    return fig


def panels(n: int, size=(4.6, 3.0)):
    """A figure with `n` axes, two a row, for a time plot and the lesson's other quantities (about 9 inches
    wide: JupyterLab shrinks a wider image to its output width, and its text with it)."""
    cols = 1 if n == 1 else 2
    rows = (n + cols - 1) // cols
    fig, axes = subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), layout="constrained",
                             squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.remove()
    return fig, flat[:n]


def timeline(lines: dict, title: str = "", unit: str = "ms"):
    """Host and device rows for each modelled timeline (launch_queue.Timeline), one pair of rows
    a variant, stacked: when the host issues each op, when the device runs it, and the device's
    idle gaps shaded."""
    scale = {"s": 1.0, "ms": 1e-3, "µs": 1e-6}[unit]
    fig, ax = subplots(figsize=(8, 0.9 + 0.8 * len(lines)), layout="constrained")
    ticks, labels = [], []
    for i, (name, tl) in enumerate(lines.items()):
        y_cpu, y_gpu = 2 * i + 1, 2 * i
        for s in tl.slots:
            ax.broken_barh([(s.cpu_start / scale, (s.cpu_end - s.cpu_start) / scale)], (y_cpu - 0.35, 0.7),
                           color="tab:blue", alpha=0.7)
            ax.broken_barh([(s.gpu_start / scale, (s.gpu_end - s.gpu_start) / scale)], (y_gpu - 0.35, 0.7),
                           color="tab:green", alpha=0.7)
        for a, b in tl.gaps:
            ax.broken_barh([(a / scale, (b - a) / scale)], (y_gpu - 0.35, 0.7), color="tab:red", alpha=0.25)
        ticks += [y_gpu, y_cpu]
        labels += [f"{name}: GPU", f"{name}: CPU"]
    ax.set_yticks(ticks, labels)
    ax.set_xlabel(f"time ({unit}); model, not a measurement")
    ax.set_title(title or "host issues (blue), device runs (green), device idle (red)")
    ax.grid(axis="y", visible=False)
    return fig
