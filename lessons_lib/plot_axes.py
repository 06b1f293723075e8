"""Axes and labels the course's figures share (plots.py re-exports them): a swept axis of whole numbers, a
log axis in plain numbers, one legend under a figure of panels, a unit from a quantity's name, a caption."""
from __future__ import annotations


def is_powers_of_two(values) -> bool:
    vals = [v for v in values if isinstance(v, int) and v > 0]
    return len(vals) == len(values) >= 3 and all(v & (v - 1) == 0 for v in vals)


def _wide(values) -> bool:
    """Positive values spanning 16× or more: a log axis spaces a geometric sweep evenly."""
    vals = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return len(vals) == len(values) >= 3 and max(vals) / min(vals) >= 16


def _x_axis(ax, values) -> None:
    """Powers of two or a wide range: a base-2 log axis. The swept values, when few, are the ticks, as
    whole numbers (a one-point sweep drew "3.80…4.20"); no minor ticks between them."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

    vals = [v for v in values if isinstance(v, (int, float))]
    if is_powers_of_two(list(values)) or _wide(values):
        ax.set_xscale("log", base=2)
    if vals and len(set(vals)) <= 12:
        ax.set_xticks(sorted(set(vals)))
        ax.xaxis.set_minor_locator(NullLocator())
        if len(set(vals)) == 1:
            v = vals[0]
            ax.set_xlim(v - max(abs(v) * 0.5, 1), v + max(abs(v) * 0.5, 1))
    elif ax.get_xscale() == "linear":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))


def _log_y(ax) -> None:
    """A log y axis labelled in plain numbers (0.5, 2, 30), not 2×10⁰, when it spans under a decade."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    if lo > 0 and hi / lo < 10:
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:.3g}"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.3g}"))


def shared_legend(fig, ax, **kw) -> None:
    """One legend for a figure of panels, below them: each panel's own, outside its axes, covered the next
    panel's label (lesson 07's sweep)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), fontsize=8, **kw)


def unit_of(name: str) -> str:
    """The unit of a quantity named "what (unit)" ("peak memory (MiB)" -> "MiB"); the name itself otherwise."""
    name = name.strip()
    if name.endswith(")") and "(" in name:
        return name[name.rindex("(") + 1:-1]
    return name


def caption_below(fig, text: str, width: int = 110) -> None:
    """A caption under a figure (each recording's conditions, say), wrapped; a second call adds its lines
    under the first's. `savefig(bbox_inches="tight")`, as the notebooks and explorers save, keeps it."""
    import textwrap

    lines = [w for para in text.splitlines() for w in (textwrap.wrap(para, width) or [""])]
    old = getattr(fig, "_course_caption", None)
    if old is not None:
        old.set_text(old.get_text() + "\n" + "\n".join(lines))
        return
    fig._course_caption = fig.text(0.01, 0, "\n".join(lines), ha="left", va="top", fontsize=8, color="#444")
