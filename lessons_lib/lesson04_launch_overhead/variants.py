"""Lesson 04's variants: the thread's code and its fixes, what the notebook shows with `show_source`.

fn(x, W, w, b) -> out, one layer after another; the thread's benchmark as posted (with its three
mistakes) and fixed; eager PseudoLinear writing into reused buffers; in place on a saved tensor.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# --- the variants: fn(x, W, w, b) -> out, one layer after another ---------------------------------


def linear(x, W, w, b):
    """nn.Linear per layer: one GEMM with the bias (addmm), 2·batch·width² FLOPs each."""
    for l in range(W.shape[0]):
        x = F.linear(x, W[l], b[l])
    return x


def pseudo_linear(x, W, w, b):
    """The thread's PseudoLinear, fixed: two elementwise ops per layer (mul, then add)."""
    for l in range(w.shape[0]):
        x = x * w[l] + b[l]
    return x


def addcmul(x, W, w, b):
    """The same maths in one op per layer: torch.addcmul(b, x, w) = b + x * w."""
    for l in range(w.shape[0]):
        x = torch.addcmul(b[l], x, w[l])
    return x


def linear_tf32(x, W, w, b):
    """Linear with TF32 allowed for its matmuls (off by default since torch 1.12): on an Ampere or newer GPU
    the GEMM runs on TF32 tensor cores (inputs rounded to a 10-bit mantissa); on a CPU or an older GPU it is
    Linear. Since torch 2.9 the setting is `torch.backends.cuda.matmul.fp32_precision` ("tf32" or "ieee";
    "none" inherits the global one); before it, `allow_tf32`. It is put back as it was: restoring through the
    old flag would leave "ieee" where "none" was, and reading the old flag raises once both APIs were used."""
    m = torch.backends.cuda.matmul
    new_api = isinstance(getattr(m, "fp32_precision", None), str)
    before = m.fp32_precision if new_api else m.allow_tf32
    if new_api:
        m.fp32_precision = "tf32"
    else:
        m.allow_tf32 = True
    try:
        return linear(x, W, w, b)
    finally:
        if new_api:
            m.fp32_precision = before
        else:
            m.allow_tf32 = before


def mul_add_inplace(x, W, w, b):
    """Two ops per layer, one new tensor: the add writes into the product (autograd allows it,
    because mul's backward needs x and w, not its own output)."""
    for l in range(w.shape[0]):
        x = (x * w[l]).add_(b[l])
    return x


# --- the thread's benchmark, reconstructed from the reply that lists its three mistakes -------------


class PostedPseudoLinear(nn.Module):
    """PseudoLinear as the reply quotes it, with the stray `+ x`."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x):
        return x * self.weight + self.bias + x  # mistake 2: `+ x`, an extra pass over memory


def posted_model(kind: str, width: int, layers: int, device=None) -> nn.Module:
    """`layers` × (layer, ReLU): mistake 3, a ReLU in both arms adds the same cost to each."""
    make = {"Linear": lambda: nn.Linear(width, width), "PseudoLinear": lambda: PostedPseudoLinear(width)}[kind]
    return nn.Sequential(*[m for _ in range(layers) for m in (make(), nn.ReLU())]).to(device)


def posted_step(model: nn.Module, batch: int, width: int):
    """One timed iteration as described: mistake 1, the random input is made inside the timing."""
    x = torch.randn(batch, width, device=next(model.parameters()).device)
    model(x).sum().backward()


def fixed_model(kind: str, width: int, layers: int, device=None) -> nn.Module:
    """No `+ x`, no ReLU: only the layers being compared."""
    class Pseudo(PostedPseudoLinear):
        def forward(self, x):
            return x * self.weight + self.bias

    make = {"Linear": lambda: nn.Linear(width, width), "PseudoLinear": lambda: Pseudo(width)}[kind]
    return nn.Sequential(*[make() for _ in range(layers)]).to(device)


def fixed_step(model: nn.Module, x, g):
    """The input made once, outside the timing; forward and backward from a fixed gradient."""
    model(x).backward(g)


# --- the limit on 'in place': autograd's version counter --------------------------------------------


def inplace_on_a_saved_tensor() -> str:
    """What autograd says when an in-place op overwrites a tensor it saved for backward: the limit on
    'in place'. `y = x * w` saves x (w's gradient needs it); `x.add_(1)` then bumps x's version
    counter, and backward refuses, since the saved x is no longer the x it saw. (A leaf that
    requires grad is refused earlier, by another rule: no in-place op on a leaf at all.)"""
    inp = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    x = inp * 2  # not a leaf: in place is allowed on it...
    y = x * w  # ...but mul saved it, for w's gradient
    x.add_(1)  # allowed now: the check happens at backward
    try:
        y.sum().backward()
    except RuntimeError as err:
        msg = str(err).splitlines()[0]
        return ("y = x * w, then x.add_(1), then backward: RuntimeError, "
                + msg.split(": [")[0] + " (the saved x changed version)")
    return "backward after x.add_(1) was allowed (this torch did not check the saved tensor's version)"


# --- eager PseudoLinear without the allocator (fusion.py times it against the compiled function) -


def pseudo_linear_reused(x, W, w, b, t, y):
    """PseudoLinear's eight ops writing into two buffers made once (`out=`): the same ops and bytes
    as eager PseudoLinear, no new allocation per call."""
    for l in range(w.shape[0]):
        torch.mul(x, w[l], out=t)
        torch.add(t, b[l], out=y)
        x = y
    return y
