"""What the width and batch sweeps say: measured ratios against the roofline's prediction, Linear's
exponent over its compute-bound widths, time per row."""
from __future__ import annotations

import math

from .. import noise, roofline
from ..timing import fmt_time


# --- figures ---------------------------------------------------------------------------------------


def sweep_summary(sweep, peaks_: roofline.Peaks) -> str:
    """Linear's time over PseudoLinear's at each width, what the roofline predicts for that ratio, and
    how the measurements sit on their floors."""
    meds = sweep.medians()
    lines = ["width  measured Linear / PseudoLinear  roofline predicts  regimes (Linear, PseudoLinear)"]
    undecided = []
    for v, run in zip(sweep.values, sweep.runs):
        lin, pseudo = run.work["Linear"], run.work["PseudoLinear"]
        r = noise.from_timings(run.timings["Linear"], run.timings["PseudoLinear"])
        undecided += [] if r.decided else [r]
        shown = f"{r.median:.2f}×" if r.decided else f"({r.median:.2f}×, undecided)"
        lines.append(f"{v:5}  {shown:>31}  {peaks_.floor(lin) / peaks_.floor(pseudo):16.2f}×  "
                     f"{peaks_.regime(lin)}, {peaks_.regime(pseudo)}")
    if undecided:
        worst = max(undecided, key=lambda r: r.spread)
        lines.append(f"{len(undecided)} measured ratio(s) marked undecided: {worst.not_decided()}.")
    lines.append(f"This device does {peaks_.flops / peaks_.bandwidth:.1f} FLOPs in the time it moves one byte; "
                 "the more it does, the wider Linear can be before its FLOPs cost more than PseudoLinear's bytes.")
    below = [(n, v) for n in meds for v, run, m in zip(sweep.values, sweep.runs, meds[n])
             if m < peaks_.floor(run.work[n])]
    if below:
        lines.append(f"{len(below)} point(s) ran faster than their floor: {roofline.BEATEN}.")
    k = linear_exponent(sweep, peaks_)
    if k is not None:
        est, lo, hi = k
        lines.append(f"Linear's time over its compute-bound widths {lo}–{hi} grows as " + est.say(
            "width^{v:.2f} (from {low:.2f} to {high:.2f} within the end points' spreads)") +
            " (the schoolbook count: width^2; a Strassen-like GEMM at most width^1.81).")
        if est.decided:
            lines.append("An exponent near 2 is the schoolbook algorithm at a steady FLOP rate." if est.low >= 1.9
                         else "Below 2: not evidence of fewer multiplications by itself, since a GEMM's FLOP rate "
                         "rises with its size; the achieved-rate check above is the test.")
    return "\n".join(lines)


def linear_exponent(sweep, peaks_: roofline.Peaks) -> tuple[noise.Estimate, int, int] | None:
    """(k, first, last): Linear's time ~ width^k between its first and last compute-bound widths of
    a width sweep (the classifier decides which points), or None with fewer than two such points.
    k is a noise.Estimate: the exponent from the end points' medians, and from their IQR edges (the
    steepest and the flattest the two timings allow); decided when those lie within ±0.1."""
    if sweep.param != "width" or "Linear" not in sweep.runs[0].timings:
        return None
    pts = [(v, r.timings["Linear"]) for v, r in zip(sweep.values, sweep.runs)
           if peaks_.regime(r.work["Linear"]) == "compute"]
    if len(pts) < 2 or pts[-1][0] == pts[0][0]:
        return None
    (w0, t0), (w1, t1) = pts[0], pts[-1]
    span = math.log(w1 / w0)

    def k(a, b):
        return math.log(max(b, 1e-12) / max(a, 1e-12)) / span

    vals = [k(t0.median + t0.iqr / 2, t1.median - t1.iqr / 2), k(t0.median, t1.median),
            k(t0.median - t0.iqr / 2, t1.median + t1.iqr / 2)]
    return noise.Estimate(vals, abs_tol=0.1), w0, w1


def batch_summary(sweep, peaks_: roofline.Peaks) -> str:
    """Time per row at the ends of a batch sweep, and the points well above their floor (with their spread)."""
    lines = []
    for name in sweep.runs[0].timings:
        t0, t1 = sweep.runs[0].timings[name], sweep.runs[-1].timings[name]
        first, last = t0.median / sweep.values[0], t1.median / sweep.values[-1]
        per_row = noise.from_timings(t0, t1)  # whole-call ratio; per row it is times the batch ratio
        less = (f"{per_row.median * sweep.values[-1] / sweep.values[0]:.0f}× less" if per_row.decided
                else per_row.not_decided())
        lines.append(f"{name}: {fmt_time(first)} per row at batch {sweep.values[0]}, {fmt_time(last)} at batch "
                     f"{sweep.values[-1]} ({less})")
    high = [(n, r.params["batch"], r.timings[n]) for r in sweep.runs for n in r.timings
            if r.timings[n].median > 2 * peaks_.floor(r.work[n]) and peaks_.regime(r.work[n]) != "overhead"]
    for n, batch, t in high:
        lines.append(f"{n} at batch {batch}: {t.median / peaks_.floor(sweep.runs[sweep.values.index(batch)].work[n]):.1f}× "
                     f"its memory floor (spread {t.spread:.0%} of the median)")
    if high:
        lines.append("Time above a memory floor is work the roofline does not count: allocating the temporaries, "
                     "or other programs on a busy machine (a wide spread says so). Rerun the cell to tell them apart.")
    return "\n".join(lines)
