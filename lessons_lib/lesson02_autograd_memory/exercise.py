"""Lesson 02's exercise: the starter, the float64 reference and the checker."""
from __future__ import annotations

import torch

from .. import device as _device
from .. import grading, memory
from ..device import fmt_bytes
from ..grading import Verdict, analyse_reader, call_reader, rel_error


# --- exercise ----------------------------------------------------------------------------------------
# A grouped layer over a sequence: x (B, T, G·D) and W (G, D, D); return out (B, T, G, D) with
# out[b, t, g] = x[b, t, g] @ W[g]. Autograd must keep no more new memory than one copy of x,
# and backward must not build a gradient for every (b, t) copy of W.


def exercise_starter(x, W):
    """The posted pattern, one dimension more: it copies W for every (b, t) and autograd keeps it."""
    B, T, _ = x.shape
    G, D, _ = W.shape
    return (x.view(B, T, G, 1, D) @ W).squeeze(-2)


def exercise_reference(x, W):
    B, T, _ = x.shape
    G, D, _ = W.shape
    return torch.einsum("btgi,gio->btgo", x.double().view(B, T, G, D), W.double())


EXERCISE_SHAPES = [(2, 3, 4, 8), (3, 5, 3, 7), (1, 1, 1, 1), (4, 16, 8, 16)]  # B, T, G, D
EXERCISE_META_SHAPE = (16, 128, 8, 64)


def check_exercise(fn) -> Verdict:
    """Grade a grouped layer over a sequence: correct (output and both gradients), saves at most one
    activation's worth of new memory, and its backward peak stays within a few activations.

    The reader's code runs on inputs the checker keeps a copy of, inside a time limit; whatever it
    does (raise, hang, return NaN or a wrong shape, write into its inputs) becomes a ✗ line."""
    v = Verdict(f"Exercise 02 ({getattr(fn, '__name__', 'your function')})")
    if not callable(fn):
        v.check("is a function", False, f"got {type(fn).__name__}; pass your function itself, e.g. my_grouped_layer")
        return v
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for B, T, G, D in EXERCISE_SHAPES:
        x = torch.randn(B, T, G * D, generator=gen, requires_grad=True)
        W = (torch.randn(G, D, D, generator=gen) / D**0.5).requires_grad_()
        gout = torch.randn(B, T, G, D, generator=gen)
        x64, W64 = x.detach().double().requires_grad_(), W.detach().double().requires_grad_()
        ref = exercise_reference(x64, W64)  # from the inputs as they are before the reader's code runs
        rdx, rdW = torch.autograd.grad(ref, (x64, W64), gout.double())

        def forward_backward(x, W):
            out = fn(x, W)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, T, G, D):
                raise ValueError(f"returned {tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}, "
                                 f"expected a tensor of shape (B, T, G, D) = {(B, T, G, D)}")
            return (out, *torch.autograd.grad(out, (x, W), gout))

        got, problem = call_reader(forward_backward, x, W)
        if problem:
            v.check(f"runs forward and backward at B, T, G, D = {B}, {T}, {G}, {D}", False,
                    problem.replace("your code raised ValueError: ", "your function "))
            return v
        worst = max(worst, rel_error(got, (ref, rdx, rdW)))
    v.check("output, dx and dW match float64 at 4 shapes (odd ones included)", worst < 1e-4,
            "NaN or inf in a result" if worst == float("inf") else
            (f"worst relative error {worst:.1e}" if worst >= 1e-4 else ""))

    B, T, G, D = EXERCISE_META_SHAPE
    act = B * T * G * D * 4

    def inputs(device):
        return (torch.randn(B, T, G * D, device=device, requires_grad=True),
                torch.randn(G, D, D, device=device, requires_grad=True))

    led, _where, problem = analyse_reader(lambda x, W: memory.ledger(fn, x, W), inputs, check_inputs=True)
    if problem:
        v.check(grading.check_name(problem, "can be traced"), False, problem)
        return v
    v.check(f"new memory saved for backward at most one copy of x ({fmt_bytes(act)}), at B, T, G, D = "
            f"{B}, {T}, {G}, {D}", led.total_bytes <= act, f"saves {fmt_bytes(led.total_bytes)}")
    p, _where, problem = analyse_reader(lambda x, W: memory.peaks(fn, x, W), inputs, check_inputs=True)
    if problem:
        v.check(grading.check_name(problem, "backward can be traced"), False, problem)
        return v
    v.check(f"backward peak at most 4 copies of x ({fmt_bytes(4 * act)})", p.backward.predicted <= 4 * act,
            f"predicted {fmt_bytes(p.backward.predicted)}")
    if _device.has_cuda():
        gpu = torch.device("cuda")  # resolved here and passed down: the peaks are the CUDA allocator's
        m, _where, problem = analyse_reader(lambda x, W: memory.measured_peaks(fn, x, W, device=gpu),
                                            lambda _dev: inputs(gpu))
        ok = problem is None and m.backward <= 4 * act
        v.on_gpu("measured backward peak at most 4 copies of x", ok, problem or fmt_bytes(m.backward))
    else:
        v.on_gpu("measured backward peak at most 4 copies of x", None)
    return v

