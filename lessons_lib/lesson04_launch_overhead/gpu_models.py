"""This machine beside the GPU models at one shape (model floors from datasheet peaks, a figure), and
where Linear / PseudoLinear goes at large width (the asymptote, per GPU)."""
from __future__ import annotations

import torch

from .. import plots, roofline
from ..display import text_table
from .lessons import LESSON, _shape


# --- this machine beside the GPU models, at one shape ----------------------------------------------


def machines_at(run, gpus=roofline.MODEL_GPUS) -> dict[str, dict[str, float]]:
    """{row label: {variant: seconds}} at the run's own shape: this machine's medians, then each GPU's
    model floor (datasheet peaks, cuBLASLt's bias epilogue, roofline.ASSUMED_LAUNCH per op: the H200 host's
    7.3 µs): lower bounds, not medians. Every label names its kind; `machines_figure` puts the one shape in the title."""
    rows = {f"this machine ({run.device.upper()}) · measured median": {n: t.median for n, t in run.timings.items()}}
    work = LESSON.work(run.params)
    for gpu in gpus:
        pk = roofline.datasheet(gpu, torch.float32, tf32=False)
        if pk is not None:
            rows[f"{gpu} · model floor"] = {n: pk.floor(work[n]) for n in run.timings}
        tf = roofline.datasheet(gpu, torch.float32, tf32=True)
        if tf is not None and tf.tf32 and "Linear" in run.timings:
            rows[f"{gpu} · model floor, Linear in TF32"] = {"Linear": tf.floor(work["Linear"])}
    return rows


def legend_outside(fig, width: float = 9.0):
    """Move the first axes' legend to the right of the plot (it never covers data) and widen the figure
    to `width` inches, about JupyterLab's default width at its default resolution."""
    ax = fig.axes[0]
    leg = ax.get_legend()
    if leg is None:
        return fig
    handles = getattr(leg, "legend_handles", None) or getattr(leg, "legendHandles", [])
    ax.legend(handles, [t.get_text() for t in leg.get_texts()], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.set_size_inches(width, fig.get_size_inches()[1])
    return fig


def machines_figure(run):
    """This machine beside the GPU models at the run's shape (named in the title), legend beside the axes."""
    fig = plots.machines(machines_at(run), title=f"All at {_shape(run.params)}, float32: this machine's medians "
                         "and GPU model floors\n(a floor is a lower bound from datasheet peaks, not a median)")
    fig.axes[0].title.set_fontsize(9)
    fig.set_size_inches(9, 3.4)
    return legend_outside(fig)


# --- where the speed-up goes at large width: the asymptote ------------------------------------------

ASYMPTOTE_WIDTHS = [128, 1024, 8192, 32768]


def asymptote_table(gpus=roofline.MODEL_GPUS, widths=ASYMPTOTE_WIDTHS, batch: int = 32768) -> str:
    """The model's Linear / PseudoLinear ratio of floors at large widths, beside its asymptote
    slope·width, for each GPU in fp32 and with TF32 (datasheet peaks: model, not measurement)."""
    rows = [("GPU (model)", "math", "slope s", *(f"width {v}: floors (s·width)" for v in widths))]
    for gpu in gpus:
        for tf32 in (False, True):
            pk = roofline.datasheet(gpu, torch.float32, tf32=tf32)
            if pk is None or (tf32 and not pk.tf32):
                continue
            slope = roofline.speedup_asymptote(pk, 4, tf32=tf32)
            cells = []
            for v in widths:
                wk = LESSON.work({"width": v, "batch": batch, "layers": 1})
                cells.append(f"{pk.floor(wk['Linear']) / pk.floor(wk['PseudoLinear']):,.1f}× ({slope * v:,.1f}×)")
            rows.append((gpu, "TF32" if tf32 else "fp32", f"{slope:.5f}", *cells))
    return text_table(rows, numbers=True)
