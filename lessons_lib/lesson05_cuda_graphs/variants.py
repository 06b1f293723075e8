"""Lesson 05's variants: the seed's model and the functions of the capture-safety catalogue, what the
notebook shows with `show_source`.

The seed's model (seed 003): a stack of PseudoLinear (or Linear) layers and one training step. Shapes:
x (batch, width); w and b (layers, width); W (layers, width, width); g, the upstream gradient, like x.

The catalogue's functions fn(x, w) (x (8, 8), w (8,): catalogue._xy): code a reader writes, safe or
unsafe under CUDA graph capture; catalogue.py says which, and why.
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F


# --- the seed's model: a stack of PseudoLinear (or Linear) layers, one training step --------------


def pseudo_linear(x, w, b):
    """The thread's PseudoLinear per layer: x * w + b (two elementwise kernels)."""
    for l in range(w.shape[0]):
        x = x * w[l] + b[l]
    return x


def eager_step(x, w, b, g):
    """Forward and backward from the upstream gradient g: (output, dx, dw, db). `autograd.grad`
    returns the gradients instead of accumulating them, so repeated steps (and replays) add nothing."""
    out = pseudo_linear(x, w, b)
    return (out, *torch.autograd.grad(out, (x, w, b), g))


def linear_step(x, W, b, g):
    """The same with nn.Linear layers (F.linear: one GEMM with its bias per layer)."""
    out = x
    for l in range(W.shape[0]):
        out = F.linear(out, W[l], b[l])
    return (out, *torch.autograd.grad(out, (x, W, b), g))


# --- capture safety: the catalogue's functions (catalogue.py holds the verdicts) ----------------------


def mlp(x, w):
    return torch.relu(x @ w + 1)


def leaky(x, w):
    return torch.where(x > 0, x, 0.1 * x) * w


def zero_negatives(x, w):
    return x.masked_fill(x < 0, 0.0) + w


def top3(x, w):
    return (x * w).topk(3, dim=1).values


def decay_in_place(x, w):
    return x.mul_(0.9).add_(w)


def grads(x, w):
    loss = torch.relu(x @ w).square().sum()
    return torch.autograd.grad(loss, w)


def sgd_tensor_lr(p, lr):
    with torch.no_grad():
        p.sub_(lr * p.grad)
    return p


def gather_rows(x, idx):
    return x.index_select(0, idx)


def dropout(x, w):
    return F.dropout(x, 0.5, training=True) * w


def log_item(x, w):
    loss = (x @ w).square().mean()
    LOSSES.append(loss.item())
    return loss


def print_loss(x, w):
    loss = (x @ w).square().mean()
    print(loss)
    return loss


def branch_on_value(x, w):
    y = x @ w
    if y.sum() > 0:
        y = y * 2
    return y


def to_host(x, w):
    return (x @ w).cpu()


def positives_nonzero(x, w):
    return torch.nonzero(x > 0)


def positives_mask(x, w):
    return x[x > 0] * 2


def distinct(x, w):
    return torch.unique(x.round())


def selected(x, w):
    return torch.masked_select(x, x > 0)


def constant_from_python(x, w):
    return x * torch.tensor([2.0], device=x.device) + w


def scale_by_float(x, lr):
    return x * lr


def device_sync(x, w):
    y = x @ w
    torch.cuda.synchronize()
    return y


_STEP = {"n": 0}


def every_other_step(x, w):
    _STEP["n"] += 1
    y = x @ w
    if _STEP["n"] % 2:
        y = y + 1
    return y


def constant_tensor(x, w):
    return x * torch.tensor(2.0) + w


def noise_from_host(x, w):
    return x + torch.randn(x.shape).to(x.device) * w


def noise_on_device(x, w):
    return x + torch.randn(x.shape, device=x.device) * w


def noise_scale_from_random(x, w):
    return x * (1 + 0.1 * random.random()) + w


def zero_negatives_by_index(x, w):
    x = x.clone()
    x[x < 0] = 0
    return x + w


def class_counts(x, w):
    return torch.bincount((x > 0).long().flatten())


def one_hot_fixed(x, w):
    return F.one_hot((x > 0).long().flatten(), num_classes=2).float().sum(0)


def _optimizer_step(kind: str, tensor_lr: bool = False, **options):
    """A one-parameter optimizer step, lr 0.1 (a 0-dim tensor on the parameter's device with tensor_lr). The
    optimizer is built by `step.prepare(p)` (the catalogue calls it with the inputs, as a training loop builds
    its optimizer once, outside the step) or on first use with another parameter (a capture's static copy,
    during its warm-up)."""
    state: dict = {}

    def prepare(p):
        opt = (torch.optim.Adam if kind == "Adam" else torch.optim.SGD)([p], lr=0.1, **options)
        if tensor_lr:  # set after construction: the constructor compares lr with 0 on the host (meta cannot)
            opt.param_groups[0]["lr"] = torch.tensor(0.1, device=p.device)
        state["param"], state["opt"] = p, opt
        # every optimizer built stays alive: a graph captured with one reads its lr and state at their addresses
        state.setdefault("built", []).append(opt)

    def step(p):
        if state.get("param") is not p:  # a new parameter (another device, a static copy): a new optimizer
            prepare(p)
        state["opt"].step()
        return p

    step.__name__ = f"{kind.lower()}_step"
    step.state, step.prepare = state, prepare
    return step


adam_step = _optimizer_step("Adam")
sgd_step = _optimizer_step("SGD")
sgd_tensor_lr_step = _optimizer_step("SGD", tensor_lr=True)  # foreach on CUDA (the default), for-loop on a CPU
sgd_fused_tensor_lr_step = _optimizer_step("SGD", tensor_lr=True, fused=True)
adam_capturable_tensor_lr_step = _optimizer_step("Adam", tensor_lr=True, capturable=True)
LOSSES: list[float] = []
