"""Lesson 06, claim 3 (torch.cat in a loop reallocates): the bytes each strategy copies, predicted and
traced from the explorer's lesson (CAT_LESSON), their growth exponent, and the paired-rounds verdict."""
from __future__ import annotations

import math

import torch

from .. import claim_table, noise, timing
from .. import device as _device
from ..display import text_table
from .explore import CAT_LESSON, cat_inputs


def predicted_cat_bytes(n: int, piece_bytes: int) -> dict[str, int]:
    """Bytes written by each strategy for n pieces: the loop writes 1 + 2 + ... + n pieces."""
    return {"cat in a loop": piece_bytes * n * (n + 1) // 2, "preallocate + fill": piece_bytes * n,
            "cat once": piece_bytes * n}


def cat_bytes_table(ns=(8, 16, 32, 64, 128, 256), rows: int = 16, cols: int = 64) -> tuple[str, dict]:
    """Bytes each strategy copies, predicted (formula) and measured (trace on meta), for each n."""
    piece = rows * cols * 4
    out = [("n", "cat in a loop: predicted", "traced", "preallocate + fill", "cat once", "loop ÷ once")]
    measured: dict[str, list[int]] = {v.name: [] for v in CAT_LESSON.variants}
    for n in ns:
        tr = CAT_LESSON.traces({"pieces": n, "rows": rows, "cols": cols})
        pred = predicted_cat_bytes(n, piece)
        for name, t in tr.items():
            measured[name].append(t.copied_bytes)
        loop, once = measured["cat in a loop"][-1], measured["cat once"][-1]
        out.append((str(n), f"{pred['cat in a loop']:,}", f"{loop:,}", f"{measured['preallocate + fill'][-1]:,}",
                    f"{once:,}", f"{loop / once:.1f}"))
    return text_table(out, numbers=True), {"n": list(ns), **measured}


def growth_exponent(ns, values) -> float:
    """Slope of log(values) against log(n) over the last two points: 2 for n², 1 for linear."""
    return math.log(values[-1] / values[-2]) / math.log(ns[-1] / ns[-2])


CAT_PAIRS = [("cat in a loop", "cat once"), ("preallocate + fill", "cat once")]  # what cat_verdict's sentence says


def cat_verdict(device=None, pieces: int | None = None, max_time: float = 3.0):
    """(Comparison, sentence): the three strategies in paired rounds (the noise rule); the sentence states
    only what the rounds decide, and `claim_table.of(cmp, CAT_PAIRS)` is its table. On a CPU at 64 pieces by
    default: at 256 one call of the loop takes 50-400 ms on a busy 2-core machine, and paired rounds of
    it would take a minute (the n² bytes at 256 pieces come from the trace instead)."""
    dev = timing.timing_device(device)
    p = {**CAT_LESSON.defaults(dev), "pieces": pieces or (CAT_LESSON.defaults(dev)["pieces"] if dev.type == "cuda" else 64)}
    CAT_LESSON.check(p, dev, torch.float32)
    pieces = cat_inputs(p, dev, torch.float32)
    cmp = noise.compare({v.name: (lambda fn=v.fn: fn(*pieces)) for v in CAT_LESSON.variants}, max_time=max_time,
                        pairs=CAT_PAIRS, device=dev)
    loop = claim_table.say(cmp.ratio(*CAT_PAIRS[0]), "cat once is {x} faster than cat in a loop",
                           tie="cat once and cat in a loop take the same time (within 5%)")
    fill = claim_table.say(cmp.ratio(*CAT_PAIRS[1]), "pre-allocate + fill takes {x} the time of cat once",
                           tie="pre-allocate + fill takes the same time as cat once (within 5%)")
    return cmp, f"here, at {p['pieces']} pieces ({len(cmp.rounds['cat once'])} paired rounds): {loop}; {fill}"


def sweep_exponent(ns, medians, iqrs) -> noise.Estimate:
    """The time exponent between a sweep's last two points, with the range its IQRs allow (from the
    fastest plausible first point to the slowest plausible last one, and back): decided (noise rule)
    only when that range is within ±0.15, so no extra measurement is needed to say "not decided"."""
    (n0, n1), (m0, m1), (q0, q1) = ns[-2:], medians[-2:], iqrs[-2:]
    ends = [(max(m0 + a * q0 / 2, 1e-12), max(m1 + b * q1 / 2, 1e-12)) for a, b in ((1, -1), (0, 0), (-1, 1))]
    return noise.Estimate([growth_exponent([n0, n1], [t0, t1]) for t0, t1 in ends], abs_tol=0.15)
