"""Lesson 04's exercise: the starter, the float64 reference and the checker."""
from __future__ import annotations

import torch

from .. import grading
from .. import device as _device
from ..grading import Verdict
from ..trace import trace_ops
from .lessons import _bytes, _device_first_line


# --- exercise ------------------------------------------------------------------------------------
# A scale + bias + activation block, as after a normalisation: y = relu(x * scale + bias), with
# per-feature scale and bias. The starter launches three ops and allocates three tensors. Rewrite
# it to launch at most two ops, allocating one output, with the same values and gradients.


def exercise_starter(x, scale, bias):
    y = x * scale
    y = y + bias
    return torch.relu(y)


def exercise_reference(x, scale, bias):
    return torch.relu(x.double() * scale.double() + bias.double())


EXERCISE_SHAPES = [(64, 32), (5, 33), (1, 1), (17, 7)]  # (rows, features)
EXERCISE_META_SHAPE = (4096, 1024)
EXERCISE_TIME_LIMIT_S = 20.0


def _exercise_inputs(rows: int, features: int, gen, device="cpu"):
    x = torch.randn(rows, features, generator=gen).to(device)
    scale = (0.5 + torch.rand(features, generator=gen)).to(device)
    bias = (0.1 * torch.randn(features, generator=gen)).to(device)
    return x, scale, bias


def _run_reader(fn, v: Verdict) -> float | None:
    """Forward and backward at every shape, against float64; returns the worst relative error,
    or None after adding the failing line to the verdict."""
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for rows, feats in EXERCISE_SHAPES:
        x, scale, bias = _exercise_inputs(rows, feats, gen)
        g = torch.randn(rows, feats, generator=gen)
        # The reference comes from copies made before the reader's code can touch the inputs.
        x64, s64, b64 = (t.detach().clone().double().requires_grad_() for t in (x, scale, bias))
        ref = exercise_reference(x64, s64, b64)
        ref_grads = torch.autograd.grad(ref, (x64, s64, b64), g.double())
        leaves = [t.requires_grad_() for t in (x, scale, bias)]
        before = [t.detach().clone() for t in leaves]
        out = fn(*leaves)
        changed = [name for name, t, old in zip(("x", "scale", "bias"), leaves, before)
                   if not torch.equal(t.detach(), old)]
        if changed:  # zeroing the bias after computing passes every value check: the caller's tensors changed
            v.check("leaves its inputs as they were", False, f"your code changed {', '.join(changed)} in place")
            return None
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (rows, feats):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            v.check("returns a tensor of the input's shape", False, f"got {got}, expected {(rows, feats)}")
            return None
        if out.dtype != x.dtype:
            v.check("returns a tensor of the input's dtype", False, f"got {out.dtype}, expected {x.dtype}")
            return None
        if not out.requires_grad:
            v.check("output is part of the autograd graph", False, "no gradient flows back: was .detach() or "
                    "torch.no_grad() used?")
            return None
        grads = torch.autograd.grad(out, leaves, g, allow_unused=True)
        if any(gr is None for gr in grads):
            v.check("gradients reach x, scale and bias", False, "one of them got no gradient")
            return None
        worst = max(worst, grading.rel_error([out, *grads], [ref, *ref_grads]))  # NaN, inf: inf
    return worst


def check_exercise(fn) -> Verdict:
    """Grade the rewrite: values and gradients against float64 at odd shapes (NaN/inf fail), then,
    from its op trace on meta (the same on every machine), at most two ops that launch work, one
    new tensor, and fewer bytes moved than the starter; on a GPU only, a timing."""
    v = Verdict(f"Exercise 04 ({getattr(fn, '__name__', 'your function')})")
    try:
        with grading.time_limit(EXERCISE_TIME_LIMIT_S):
            worst = _run_reader(fn, v)
    except grading.TimeLimit:
        v.check("finishes", False, f"still running after {EXERCISE_TIME_LIMIT_S:.0f} s at tiny shapes")
        return v
    except Exception as err:  # the reader's code: report, don't raise
        v.check("runs forward and backward", False, f"{type(err).__name__}: {_device_first_line(err)}")
        return v
    if worst is None:
        return v
    v.check(f"output and gradients match float64 at {len(EXERCISE_SHAPES)} shapes (odd ones included)",
            worst < 1e-5, f"worst relative error {worst:.1e}" if worst >= 1e-5 else "")

    rows, feats = EXERCISE_META_SHAPE

    def trace_inputs(device):  # meta first (nothing allocated); CPU tensors for code that reads values
        gen = torch.Generator().manual_seed(2)
        if device == "meta":
            return (torch.empty(rows, feats, device="meta"), torch.empty(feats, device="meta"),
                    torch.empty(feats, device="meta"))
        return _exercise_inputs(rows, feats, gen)

    mine, where, problem = grading.analyse_reader(lambda *a: trace_ops(fn, *a), trace_inputs,
                                                  limit=EXERCISE_TIME_LIMIT_S, check_inputs=True)
    if problem:
        v.check(grading.check_name(problem, "its op trace can be taken"), False, problem)
        return v
    start = trace_ops(exercise_starter, *trace_inputs(where))
    ops = [op.name for op in mine.compute_ops]
    on_cpu = " (traced on CPU tensors: your code reads values, and each read is an op too)" if where == "cpu" else ""
    v.check("launches at most 2 ops (the starter: 3)", len(ops) <= 2, f"{len(ops)}: {', '.join(ops)}{on_cpu}")
    out_bytes = rows * feats * 4
    v.check(f"allocates one output ({_device.fmt_bytes(out_bytes)}) at {rows} × {feats}",
            mine.alloc_bytes <= out_bytes, f"{_device.fmt_bytes(mine.alloc_bytes)} allocated")
    v.check("moves fewer bytes than the starter", _bytes(mine) < _bytes(start),
            f"{_device.fmt_bytes(_bytes(mine))} vs {_device.fmt_bytes(_bytes(start))}")
    if _device.has_cuda():
        v.on_gpu(*speed_check(fn, torch.device("cuda")))
    else:
        v.on_gpu(f"at least {GPU_SPEEDUP_BAR}× faster than the starter", None)
    return v


# On a GPU the forward is also timed, at 16384 × 1024 float32 (64 MiB a tensor). Model: the starter's three
# ops each read and write a full tensor (6 × 64 MiB), a two-op solution moves 4 × 64 MiB (one fused op: 2),
# all memory-bound at this size (a launch is microseconds, a pass tens to hundreds): 1.5× or more. The bar,
# 1.3×, leaves 15% for the scale and bias reads and the kernels' efficiency. No GEMM: TF32 does not apply.
GPU_SPEEDUP_BAR = 1.3
GPU_SPEED_SHAPE = (16384, 1024)  # rows, features


def speed_check(fn, device, shape: tuple = GPU_SPEED_SHAPE, max_time: float = 10.0) -> tuple[str, bool, str]:
    """(name, ok, detail): `fn`'s forward against the starter's at `shape` (rows, features) on `device`, in
    paired, alternating rounds (`grading.speed_check`). The checker calls it on a CUDA GPU at
    GPU_SPEED_SHAPE; the tests call it small, on a CPU and on the simulated GPU."""
    device = torch.device(device)
    gen = torch.Generator().manual_seed(1)
    xs = _exercise_inputs(*shape, gen, device)
    return grading.speed_check(f"at least {GPU_SPEEDUP_BAR}× faster than the starter", lambda: exercise_starter(*xs),
                               lambda: fn(*xs), GPU_SPEEDUP_BAR, device, max_time, limit=EXERCISE_TIME_LIMIT_S)
