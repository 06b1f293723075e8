"""Lesson 05's exercise: make a training step graph-safe without changing its result. The starter,
the float64 reference, the inputs and the checker (on a GPU, a real capture and replay too)."""
from __future__ import annotations

import math

import torch

from .. import graphs, grading
from .. import device as _device
from ..grading import Verdict


# --- exercise: make a training step graph-safe without changing its result ------------------------
# A small regression step logs its loss with .item() and keeps only the rows whose target is
# positive with a boolean mask. Both stop capture. Rewrite it so graph_check finds nothing and the
# loss and gradients stay the same (float64 reference).

HISTORY: list[float] = []


def exercise_starter(x, w, b, y):
    pred = x @ w + b
    keep = y > 0
    err = pred[keep] - y[keep]
    loss = err.square().sum() / keep.sum()
    HISTORY.append(loss.item())
    gw, gb = torch.autograd.grad(loss, (w, b))
    return loss, gw, gb


def exercise_reference(x, w, b, y):
    keep = y > 0
    err = (x @ w + b - y)[keep]
    loss = err.square().sum() / keep.sum()
    return (loss, *torch.autograd.grad(loss, (w, b)))


EXERCISE_SHAPES = [(64, 16), (7, 3), (33, 5)]  # (rows, features)


def exercise_inputs(rows: int, features: int, device="cpu", seed: int = 0):
    gen = torch.Generator().manual_seed(seed + rows)
    x = torch.randn(rows, features, generator=gen)
    w = torch.randn(features, generator=gen)
    b = torch.randn((), generator=gen)
    y = torch.randn(rows, generator=gen)
    y[0] = abs(y[0]) + 0.1  # at least one positive target
    return x.to(device), w.to(device).requires_grad_(), b.to(device).requires_grad_(), y.to(device)


def _analyse(fn):
    def analyse(*inputs):
        report = graphs.graph_check(fn, *inputs)
        if report.error:  # stopped early (on meta, .item() raises): let analyse_reader try the CPU
            raise RuntimeError(report.error)
        return report
    return analyse


def check_exercise(fn) -> Verdict:
    """Grade the rewrite: loss and gradients against float64 at odd shapes, then graph_check (no
    hazard left), both on any machine; on a GPU, a real capture whose replay matches eager."""
    v = Verdict(f"Exercise 05 ({getattr(fn, '__name__', 'your function')})")
    if not callable(fn):
        v.check("is a function", False, f"got {type(fn).__name__}; pass your function itself, e.g. my_step")
        return v
    worst = 0.0
    for rows, feats in EXERCISE_SHAPES:
        inputs = exercise_inputs(rows, feats)
        # the reference from copies made before the reader's code can touch the inputs
        ref = exercise_reference(*(t.detach().double().requires_grad_(t.requires_grad) for t in inputs))
        out, problem = grading.call_reader(fn, *inputs)
        if problem:
            v.check("runs and returns (loss, grad w, grad b)", False, problem)
            return v
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            v.check("returns (loss, grad w, grad b)", False, f"got {type(out).__name__}")
            return v
        worst = max(worst, grading.rel_error(list(out), list(ref)))
    v.check(f"loss and gradients match float64 at {len(EXERCISE_SHAPES)} shapes", worst < 1e-5,
            "" if worst < 1e-5 else "NaN or inf, or a wrong shape or type" if worst == math.inf else
            f"worst relative error {worst:.1e}")
    report, _dev, problem = grading.analyse_reader(_analyse(fn), lambda d: exercise_inputs(*EXERCISE_SHAPES[0], d))
    if problem:
        v.check("graph_check can run it", False, problem)
        return v
    v.check("graph_check finds nothing that capture would refuse or freeze", report.safe,
            "; ".join(f"{h.kind}: {h.what} [{h.where}]" for h in report.hazards))
    if _device.has_cuda() and graphs.has_graphs():
        v.on_gpu(*_gpu_replay_check(fn))
    else:
        v.on_gpu(GPU_CHECK, None)
    return v


GPU_CHECK = "captures, and a replay on new inputs matches eager (float32)"


def _gpu_replay_check(fn) -> tuple[str, bool, str]:
    """Capture the reader's step on the GPU, replay it on new inputs, and compare with eager on copies
    of the same inputs. Every call of the reader's code runs under the checker's time limit; what it
    raises or returns becomes the detail of one line."""
    name = GPU_CHECK
    inputs = exercise_inputs(*EXERCISE_SHAPES[0], "cuda")
    captured, problem = grading.call_reader(lambda *t: graphs.try_capture(fn, *t), *inputs)
    if problem:
        return name, False, problem
    cap, why = captured
    if cap is None:
        return name, False, why
    new = exercise_inputs(*EXERCISE_SHAPES[0], "cuda", seed=1)
    copies = [t.detach().clone().requires_grad_(t.requires_grad) for t in new]
    replayed, problem = grading.call_reader(lambda *t: [o.clone() for o in cap.replay(*t)], *new)
    if problem:
        return name, False, problem
    eager, problem = grading.call_reader(fn, *copies)
    if problem:
        return name, False, problem
    err = grading.rel_error(replayed, list(eager) if isinstance(eager, (tuple, list)) else eager)
    return name, err < 1e-5, f"relative error {err:.1e}"
