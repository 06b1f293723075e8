"""Lesson 01's variants: the thread's code (seed 000) and its rewrites, and the inputs they take.

The notebook renders these with `show_source` (through the explorer's variants); the traces and the
explorer that time them are in evidence.py and explore.py beside this one.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

THREAD_SHAPE = {"num_modules": 12, "num_inputs": 13, "batch_size": 16, "embed_dims": 512}


# --- the variants (shapes: x (inputs, batch, E), weight (modules, E_out, E), bias (modules, E_out)) ---


def broadcast_matmul(x, weight, bias):
    """Seed 000's batched version: broadcast x against every module's weight."""
    return x.unsqueeze(0) @ weight.unsqueeze(1).transpose(-2, -1) + bias[:, None, None, :]


def loop(x, weight, bias):
    """Seed 000's loop: one ordinary matmul per module, stacked at the end."""
    return torch.stack([x @ w.T + b for w, b in zip(weight, bias)])


def einsum(x, weight, bias):
    """einsum permutes and reshapes both operands into a single GEMM; the weight is only viewed."""
    return torch.einsum("ibk,mok->mibo", x, weight) + bias[:, None, None, :]


def stacked_bmm(x, weight, bias):
    """One batched GEMM: every module sees the same rows of x (an expanded view). The bias is not
    fused: baddbmm first copies the expanded bias into its output (on every backend), then the GEMM
    adds into it with beta = 1."""
    m = weight.shape[0]
    i, b, k = x.shape
    rows = x.reshape(1, i * b, k).expand(m, -1, -1)
    return torch.baddbmm(bias.unsqueeze(1), rows, weight.transpose(1, 2)).view(m, i, b, -1)


def folded_mm(x, weight, bias):
    """One plain GEMM: batch folded into M, modules into N. It is nn.Linear with stacked weights."""
    m, o, k = weight.shape
    i, b, _ = x.shape
    out = F.linear(x.reshape(i * b, k), weight.reshape(m * o, k), bias.reshape(m * o))
    return out.view(i, b, m, o).permute(2, 0, 1, 3)


def make_inputs(p: dict, device, dtype):
    m, i, b, e = p["num_modules"], p["num_inputs"], p["batch_size"], p["embed_dims"]
    # Scaled like nn.Linear's init so that outputs stay O(1) in float16 too.
    x = torch.randn(i, b, e, device=device, dtype=dtype)
    weight = torch.randn(m, e, e, device=device, dtype=dtype) / e**0.5
    bias = torch.randn(m, e, device=device, dtype=dtype)
    return x, weight, bias

