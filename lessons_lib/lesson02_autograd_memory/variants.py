"""Lesson 02's variants: the thread's code (seed 004) and its fixes, their inputs and one training step.

Every variant maps x (B, G·D) and W (G, D, D) to out (B, G, D), out[b, g] = x[b, g] @ W[g]. The notebook
renders these with `show_source`; what they save and allocate is measured in the evidence*.py files.
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

THREAD_SHAPE = {"batch": 8192, "groups": 8, "dim": 64}


# --- the variants -----------------------------------------------------------------------------


def broadcast_matmul(x, W):
    """Seed 004 as posted: broadcast every row of x against the G weights. matmul expands W to
    (B, G, D, D) and copies it for one bmm, and that bmm saves the copy for backward."""
    G, D, _ = W.shape
    return (x.view(x.shape[0], G, 1, D) @ W).squeeze(2)


def einsum(x, W):
    """The thread's fix, with W's indices the right way round: one bmm over the G groups."""
    G, D, _ = W.shape
    return torch.einsum("bgi,gio->bgo", x.view(x.shape[0], G, D), W)


def bmm_3d(x, W):
    """The same bmm by hand: groups first, (G, B, D) @ (G, D, D), then back. Only views around it."""
    G, D, _ = W.shape
    return torch.bmm(x.view(x.shape[0], G, D).transpose(0, 1), W).transpose(0, 1)


class GroupedMatmul(torch.autograd.Function):
    """out[b, g] = x[b, g] @ W[g] with a backward written by hand: it saves only x and W."""

    @staticmethod
    def forward(ctx, x, W):
        ctx.save_for_backward(x, W)  # the inputs, which the caller holds anyway: no new memory
        G, D, _ = W.shape
        return torch.bmm(x.view(x.shape[0], G, D).transpose(0, 1), W).transpose(0, 1)

    @staticmethod
    def backward(ctx, grad_out):
        x, W = ctx.saved_tensors
        G, D, _ = W.shape
        g = grad_out.transpose(0, 1)  # (G, B, D)
        dx = dW = None
        if ctx.needs_input_grad[0]:  # dx[b, g] = grad[b, g] @ W[g]ᵀ
            dx = torch.bmm(g, W.transpose(1, 2)).transpose(0, 1).reshape(x.shape)
        if ctx.needs_input_grad[1]:  # dW[g] = x[:, g]ᵀ @ grad[:, g], summed over the batch by the GEMM
            dW = torch.bmm(x.view(x.shape[0], G, D).permute(1, 2, 0), g)
        return dx, dW


def custom_function(x, W):
    """The explicit-backward version: `GroupedMatmul.apply`."""
    return GroupedMatmul.apply(x, W)


def checkpointed(x, W):
    """The posted version under activation checkpointing: keep x and W, redo the forward in backward."""
    return checkpoint(broadcast_matmul, x, W, use_reentrant=False)


def thread_einsum(x, W):
    """The thread's einsum exactly as posted. 'bij,abj->abi' sums over W's *last* index, so it
    computes x @ Wᵀ per group, not x @ W. Not a variant: it answers a different question."""
    G, D, _ = W.shape
    return torch.einsum("bij,abj->abi", W, x.view(x.shape[0], G, D))


def strategy_1(x, W):
    """The thread's strategy 1, its output left as (B, G, 1, D)."""
    G, D, _ = W.shape
    return torch.matmul(x.view(x.shape[0], G, 1, D), W)


def strategy_2(x, W2):
    """The thread's strategy 2: one dense (G·D) × (G·D) weight, x viewed as (B, 1, G·D)."""
    return torch.matmul(x.view(x.shape[0], 1, -1), W2)


# --- one training step and inputs ------------------------------------------------------------


def train_step(fn, x, W, g):
    """One step of a variant: forward, then backward from the upstream gradient `g`.

    Returns the output and the gradients of whichever of x and W require grad (what the
    correctness check compares). `autograd.grad` returns them instead of adding them to `.grad`,
    so repeated timed steps do not accumulate anything.
    """
    out = fn(x, W)
    wrt = [t for t in (x, W) if t.requires_grad]
    return (out, *torch.autograd.grad(out, wrt, g))


def make_inputs(p: dict, device, dtype, x_grad: bool = True, w_grad: bool = True):
    """x (B, G·D), W (G, D, D) scaled like nn.Linear's init, and an upstream gradient g (B, G, D)."""
    B, G, D = p["batch"], p["groups"], p["dim"]
    x = torch.randn(B, G * D, device=device, dtype=dtype).requires_grad_(x_grad)
    W = (torch.randn(G, D, D, device=device, dtype=dtype) / D**0.5).requires_grad_(w_grad)
    g = torch.randn(B, G, D, device=device, dtype=dtype)
    return x, W, g

