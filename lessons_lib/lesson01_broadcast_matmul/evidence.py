"""Lesson 01's evidence: what the broadcast version copies, in bytes, and what the floors say at one input."""
from __future__ import annotations

import torch

from ..display import count
from ..roofline import Peaks
from ..timing import fmt_time
from .explore import LESSON
from .variants import THREAD_SHAPE


def thread_weight_copy_bytes(p: dict = THREAD_SHAPE, dtype=torch.float32) -> int:
    """Bytes of the expanded weight copy the broadcast version makes: modules·inputs·E·E."""
    return p["num_modules"] * p["num_inputs"] * p["embed_dims"] ** 2 * torch.empty(0, dtype=dtype).element_size()


def one_input_floors(dims: int, sources: list[tuple[str, Peaks]]) -> str:
    """At one input (no copy: only the modules broadcast), broadcast matmul's and the loop's floors under each
    source's peaks, the bound that sets each, and what that can explain: a sentence chosen by the regimes
    printed beside it, so it holds on every machine (a T4's datasheet puts the broadcast version on the
    memory bound, an H100's on the overhead bound)."""
    one = LESSON.work({**THREAD_SHAPE, "num_inputs": 1, "embed_dims": dims})
    b, lp = one["broadcast matmul"], one["loop"]
    lines = []
    for source, pk in sources:
        fb, fl = pk.floor(b), pk.floor(lp)
        rb, rl = pk.regime(b), pk.regime(lp)
        if rb == rl == "overhead":
            reading = (f"both overhead-bound: the loop's {count(lp.launches, 'launch')} against {b.launches} give "
                       f"it the higher floor ({fl / fb:.1f}×)")
        elif "overhead" not in (rb, rl):
            reading = ("neither is overhead-bound: the floors are close (the same FLOPs, nearly the same bytes), "
                       "so a gap between the measured times is small-GEMM inefficiency, which the roofline does "
                       "not model")
        else:
            higher = "the loop's" if fl > fb else "broadcast matmul's"
            reading = f"one bound each: {higher} floor is the higher ({max(fl, fb) / min(fl, fb):.1f}×)"
        lines.append(f"{source:15s} at 1 input, {dims} features: broadcast matmul {fmt_time(fb)} "
                     f"({pk.regime_words(b)}); loop {fmt_time(fl)} ({pk.regime_words(lp)}): {reading}")
    return "\n".join(lines)
