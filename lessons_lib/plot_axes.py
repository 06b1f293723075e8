"""Axes and labels the course's figures share (plots.py re-exports them): a swept axis of whole numbers, a
log axis in plain numbers, one legend under a figure of panels, a unit from a quantity's name, a caption, and
`fit_to_figure`, which every course figure runs before it draws."""
from __future__ import annotations

import contextlib


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


def fit_to_figure(fig, renderer) -> None:
    """Before a course figure draws (`plots.CourseFigure`): a y label taller than its axes is wrapped to their
    height (lesson 07's "time per call: median where measured, floor where model (ms, log)" ran over the title
    and the caption), and the caption goes under everything else drawn (a legend under the axes covered it in
    lesson 02's recorded sweep). After a layout pass, so the axes' heights are the ones drawn."""
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
    wrapped = False
    for ax in fig.axes:
        wrapped |= _wrap_ylabel(ax, renderer)
    if wrapped and engine is not None:
        engine.execute(fig)  # the wrapped label is wider: the axes move over
    caption = getattr(fig, "_course_caption", None)
    if caption is not None:
        caption.set_visible(False)
        try:
            box = fig.get_tightbbox(renderer)  # inches, every artist but the caption
        finally:
            caption.set_visible(True)
        low = min(0.0, box.y0 / fig.get_figheight()) if box is not None else 0.0
        caption.set_y(low - 0.01)


@contextlib.contextmanager
def pinned_legends(fig):
    """Figure legends placed by the layout ("outside lower center") anchored to the whole figure, in figure
    coordinates, for one draw; then to the figure's box again (the layout reserves room only for those)."""
    from matplotlib.transforms import Bbox, TransformedBbox

    free = [leg for leg in fig.legends if leg._bbox_to_anchor is None]
    for leg in free:
        leg._bbox_to_anchor = TransformedBbox(Bbox.unit(), fig.transFigure)
    try:
        yield
    finally:
        for leg in free:
            leg._bbox_to_anchor = None


def _wrap_ylabel(ax, renderer) -> bool:
    """Wrap `ax`'s y label (as set last by the caller) to the axes' height; True if it changed."""
    import textwrap

    label = ax.yaxis.label
    text = label.get_text()
    full = getattr(label, "_course_full", None)
    if full is None or text != getattr(label, "_course_wrapped", None):
        full = text  # a label set anew since the last wrap
    label.set_text(full)
    tall, room = label.get_window_extent(renderer).height, ax.get_window_extent(renderer).height
    out = full
    if full and room > 0 and tall > room:
        width = max(int(max(map(len, full.splitlines())) * room / tall * 0.95), 10)
        out = "\n".join(w for line in full.splitlines() for w in (textwrap.wrap(line, width) or [""]))
    label._course_full, label._course_wrapped = full, out
    label.set_text(out)
    return out != text
