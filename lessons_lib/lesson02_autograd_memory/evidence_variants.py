"""Lesson 02's variants side by side, predicted on meta: their memory, their peaks, and layers stacked
with and without activation checkpointing."""
from __future__ import annotations

from .. import memory
from ..device import fmt_bytes
from ..display import text_table
from .evidence import thread_inputs
from .explore import LESSON
from .variants import THREAD_SHAPE, broadcast_matmul, checkpointed, einsum


def memory_table(params: dict = THREAD_SHAPE, variants: list | None = None) -> str:
    """Per variant, predicted on `meta` with x and W requiring grad: new bytes saved for backward,
    what the step holds after the forward, and its forward and backward peaks (beyond the inputs)."""
    rows = [("variant", "saved for backward", "held after forward", "forward peak", "backward peak")]
    for v in variants or LESSON.variants:
        x, W = thread_inputs(params, True, True)
        saved = memory.ledger(v.fn, x, W).total_bytes
        p = memory.timeline(v.fn, x, W).peaks()
        rows.append((v.name, fmt_bytes(saved), fmt_bytes(p.after_forward.predicted), fmt_bytes(p.forward.predicted),
                     fmt_bytes(p.backward.predicted)))
    return text_table(rows, numbers=True)


def predicted_peaks(params: dict = THREAD_SHAPE) -> dict[str, memory.Peaks]:
    """Each variant's predicted peaks on `meta` (x and W requiring grad): any shape, no allocation."""
    out = {}
    for v in LESSON.variants:
        x, W = thread_inputs(params, True, True)
        out[v.name] = memory.peaks(v.fn, x, W)
    return out


# --- activation checkpointing, layer after layer -----------------------------------------------------


def stacked(fn, layers: int):
    """`layers` grouped layers in a row (sharing W, which changes nothing about activations)."""

    def deep(x, W):
        h = x
        for _ in range(layers):
            h = fn(h, W).reshape(h.shape)
        return h

    deep.__name__ = f"{getattr(fn, '__name__', 'fn')} x{layers}"
    return deep


def depth_table(params: dict = THREAD_SHAPE, layers: int = 4) -> str:
    """Saved bytes and peaks of `layers` stacked layers per approach, predicted on meta."""
    rows = [(f"{layers} layer{'s' if layers != 1 else ''} of", "saved for backward", "held after forward", "peak of the step")]
    for name, fn in (("broadcast matmul", broadcast_matmul), ("checkpointed", checkpointed), ("einsum", einsum)):
        x, W = thread_inputs(params, True, True)
        deep = stacked(fn, layers)
        saved = memory.ledger(deep, x, W).total_bytes
        p = memory.peaks(deep, x, W)
        rows.append((name, fmt_bytes(saved), fmt_bytes(p.after_forward.predicted), fmt_bytes(p.step.predicted)))
    return text_table(rows, numbers=True)

