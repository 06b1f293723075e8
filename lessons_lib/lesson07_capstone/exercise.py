"""The exercise: the reader fixes the pitfalls in their own order; `check` says which remain.

Device-independent: it reads the op trace and the sync detector of the reader's training loop, never a clock.
"""
from __future__ import annotations

from ..syncs import syncs
from ..trace import trace_ops
from .model import make_data, Model, slow_train

STARTER = (Model, slow_train)


def _per_step(train, model, x, y, steps=2):
    tr = trace_ops(train, model, x, y, steps=steps)
    sy = syncs(train, model, x, y, steps=steps)
    return tr, len(sy.syncs) / steps, steps


def model_channels(model) -> int:
    return model.inp.out_features


def check(model, train) -> list[str]:
    """Verdict lines, one per pitfall: 'fixed' or 'remains' with what the tools saw. Never raises."""
    try:
        x, y = make_data(n=64)
        tr, n_sync, steps = _per_step(train, model, x, y)
        return _verdicts(model, tr, n_sync, steps)
    except Exception as e:  # anything the reader's code does becomes a verdict line
        return [f"✗ the training loop raised {type(e).__name__}: {e}"]


def _verdicts(model, tr, n_sync, steps) -> list[str]:
    gemms = len(tr.gemms) / steps
    # the broadcast: a batched GEMM that contracts over all C channels, its weight copied per batch row
    big = [op for op in tr.named("bmm") if op.in_shapes[1][1] == model_channels(model)]
    cats = len(tr.named("cat")) / steps
    tanh = len(tr.named("tanh")) / steps
    lines = [
        ("broadcast matmul (lesson 01)", not big, f"{len(big) // steps} batched GEMMs over all channels per step"),
        ("loop of small Linears (lesson 03)", gemms <= 20, f"{gemms:.0f} GEMMs per step"),
        ("elementwise chain (lesson 04)", tanh == 0, f"{tanh:.0f} hand-written tanh per step"),
        ("host syncs in the loop (lesson 06)", n_sync <= 1, f"{n_sync:.1f} host syncs per step"),
        ("cat in the loop (lesson 06)", cats < 3, f"{cats:.1f} cats per step"),
    ]
    return [f"{'✓ fixed' if ok else '✗ remains'}: {name}: {seen}" for name, ok, seen in lines]
