"""The hunt with the course's tools: op counts, copies and host syncs of one training step, slow vs fixed."""
from __future__ import annotations

import torch

from ..syncs import syncs
from ..trace import trace_ops
from .model import copy_weights, fixed_train, make_data, Model, shape, slow_train


def pair(dtype=torch.float32, seed=0, dims: dict | None = None):
    """A slow model and a fixed one with the same weights (default: the CPU shape)."""
    d = dims or shape("cpu")
    torch.manual_seed(seed)
    slow = Model(False, d["C"], d["H"], d["E"], dtype=dtype)
    return slow, copy_weights(slow, Model(True, d["C"], d["H"], d["E"], dtype=dtype))


def findings(steps=2):
    """Per training step: ops dispatched, GEMMs, copies, host syncs, for the slow and the fixed loop."""
    x, y = make_data(n=64)
    slow, fixed = pair()
    rows = {}
    for name, model, train in (("slow", slow, slow_train), ("fixed", fixed, fixed_train)):
        tr = trace_ops(train, model, x, y, steps=steps)
        sy = syncs(train, model, x, y, steps=steps)
        rows[name] = {"ops": len(tr.ops) / steps, "gemms": len(tr.gemms) / steps,
                      "copies": len(tr.copies) / steps, "syncs": len(sy.syncs) / steps}
    return rows


def step_times(steps=4, max_time=6.0):
    """Slow vs fixed training loop, timed in paired rounds by noise.compare (its str says 'not decided'
    when the run cannot decide the ratio). Per call: `steps` training steps."""
    from .. import noise

    x, y = make_data(n=128)
    slow, fixed = pair()
    return noise.compare({"slow": lambda: slow_train(slow, x, y, steps=steps),
                          "fixed": lambda: fixed_train(fixed, x, y, steps=steps)},
                         pairs=[("slow", "fixed")], max_time=max_time)
