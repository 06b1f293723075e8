"""The last exercise: lessons_lib.diagnose on a model the course did not write.

nn.MultiheadAttention, called as most code calls it: `out, weights = mha(x, x, x)`. need_weights defaults to
True, so it returns the (batch, T, T) attention weights, and to have them it takes the math path (softmax, then a
bmm) instead of scaled_dot_product_attention's fused kernels (torch/nn/functional.py, multi_head_attention_forward:
the fused path only when need_weights is False): the probabilities are kept for backward, lesson 02's pitfall in
a module. The reader predicts what diagnose will find, runs it, fixes the call and reruns until it is clean;
`check_attention_step` grades the fix: the same output and gradients as the starter, and a clean report.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ..grading import Verdict, call_reader, rel_error

RTOL = 1e-4  # float32: the math path against the fused kernel, same weights (4.8e-7 on this CPU)


def attention_starter(mha, x):
    out, _weights = mha(x, x, x)  # need_weights left at its default (True): the weights are computed and returned
    return out


# A small real layer: 256 features, 8 heads, 8 sequences of 128 tokens. Smaller, the step is priced launch-bound
# on a T4 (diagnose's model: at 64 features and 32 tokens, 7 launches at 52.9 µs eager, a CUDA graph would halve
# it), a size artifact of the exercise, not the reader's pitfall; here the fixed step is memory-bound there.
# One forward and backward in float32 takes 60-80 ms on one thread of this CPU; the checker runs two.
ATTENTION = dict(features=256, heads=8, batch=8, tokens=128)


def attention_inputs(seed: int = 0):
    """(mha, x): an nn.MultiheadAttention of 256 features and 8 heads, and a batch of 8 sequences of 128 tokens."""
    a = ATTENTION
    torch.manual_seed(seed)
    return (nn.MultiheadAttention(a["features"], a["heads"], batch_first=True),
            torch.randn(a["batch"], a["tokens"], a["features"], requires_grad=True))


def diagnosis_lines(report) -> str:
    """A Report in a few lines that are the same on every machine (no file names): each finding with its lesson
    and line of code, or that none was found, and the step in numbers."""
    if report.clean:
        head = "✓ no pitfall found"
    else:
        head = "\n".join(f"✗ lesson {f.lesson}, {f.kind} — at: {f.where.text}\n    {f.evidence.split('; ')[0]}\n"
                         f"    fix: {f.fix}" for f in report.findings)
    return f"{head}\nthe step: {report.step['summary']}"


def check_attention_step(step) -> Verdict:
    """Grade the reader's `step(mha, x)`: the starter's output and gradients (x and every weight), and nothing
    diagnose can find in it."""
    from .. import diagnose

    v = Verdict("Exercise 07b (your own model)")
    if not callable(step):
        v.check("step is a function step(mha, x) returning the attention's output", False, type(step).__name__)
        return v
    mha, x = attention_inputs()
    ref_out = attention_starter(mha, x)
    g = torch.randn_like(ref_out)
    ref = [ref_out, *torch.autograd.grad(ref_out, [x, *mha.parameters()], g)]
    mine_mha, mine_x = copy.deepcopy(mha), x.detach().clone().requires_grad_(True)
    out, problem = call_reader(lambda: step(mine_mha, mine_x))
    if problem is None and not isinstance(out, torch.Tensor):
        problem = f"step returned {type(out).__name__}; return the attention's output, as the starter does"
    if problem is None:
        try:
            err = rel_error([out, *torch.autograd.grad(out, [mine_x, *mine_mha.parameters()], g)], ref)
        except Exception as e:  # an output without a graph, say
            err, problem = float("inf"), f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    if problem:
        v.check("computes what the starter computes", False, problem)
        return v
    v.check("computes what the starter computes (output, and gradients of x and every weight)", err <= RTOL,
            f"worst relative error {err:.1e}" if err > RTOL else "")
    report, problem = call_reader(lambda: diagnose(step, *attention_inputs()))
    if problem:
        v.check("lessons_lib.diagnose can run it", False, problem)
        return v
    found = "; ".join(f"lesson {f.lesson} {f.kind} at: {f.where.text}" for f in report.findings)
    v.check("lessons_lib.diagnose finds no pitfall in it", report.clean, found)
    return v
