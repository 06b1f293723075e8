"""Lesson 03's variants: the thread's code (its two typos fixed) and every fix, fn(x, weight, bias) (what the notebook shows)."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import grouped_linear as GL


# --- the thread's code, with its two typos fixed -------------------------------------------------------


class SlowGroups(nn.Module):
    """The thread's minimal example: chunk the channels, one nn.Linear per chunk, cat.
    (As posted it lacks `super().__init__()` and the `torch.cat(`; both are fixed here.)"""

    def __init__(self, channels: int, groups: int):
        super().__init__()
        assert channels % groups == 0
        self.groups = groups
        self.projs = nn.ModuleList()
        for n in range(groups):
            self.projs.append(nn.Linear(channels // groups, channels // groups))

    def forward(self, x):
        parts = torch.chunk(x.transpose(-1, -2), self.groups, dim=-1)
        return torch.cat([self.projs[n](parts[n]) for n in range(self.groups)], dim=-1).transpose(-1, -2)


class MultichannelLinear(nn.Module):
    """The reply's module as posted (no bias): x (B, C, H, W) with C channels of H features each."""

    def __init__(self, channels, in_features, out_features):
        super().__init__()
        self.weight_pw = nn.Parameter(torch.empty(channels, out_features, in_features))
        nn.init.uniform_(self.weight_pw, a=-1 / math.sqrt(in_features * channels),
                         b=1 / math.sqrt(in_features * channels))

    def forward(self, x):
        return torch.matmul(x.transpose(2, 3), self.weight_pw.transpose(1, 2)).transpose(2, 3)


# --- the variants: fn(x, weight, bias) with x (batch, groups·size, length) -----------------------------


def slow_groups(x, weight, bias):
    """SlowGroups as a function: transpose, chunk, one F.linear per group, cat, transpose back."""
    parts = torch.chunk(x.transpose(-1, -2), weight.shape[0], dim=-1)
    return torch.cat([F.linear(parts[g], weight[g], bias[g]) for g in range(weight.shape[0])], dim=-1).transpose(-1, -2)


def grouped_conv1d(x, weight, bias):
    """nn.Conv1d(C, C, kernel_size=1, groups=G): the weight is (G·O, K, 1)."""
    G, O, K = weight.shape
    return F.conv1d(x, weight.reshape(G * O, K, 1), bias.reshape(G * O), groups=G)


def bmm_rows(x, weight, bias):
    """Rows-first batched GEMM: lay x out as (rows, channels) (a copy), view it as (G, rows, K),
    one baddbmm, lay the result back (a second copy)."""
    return GL.bmm(x, weight, bias, dim=1)


def matmul_channels(x, weight, bias):
    """The reply's layout: x viewed as (batch, G, K, length), multiplied by the stacked weight.
    No activation copy; matmul copies the (small) weight once per batch element."""
    return GL.matmul_channels(x, weight, bias, dim=1)


def einsum(x, weight, bias):
    """einsum("ngkl,gok->ngol"): it permutes and reshapes into one bmm (copying x to do so)."""
    G, O, K = weight.shape
    N, _, L = x.shape
    return (torch.einsum("ngkl,gok->ngol", x.view(N, G, K, L), weight) + bias[:, :, None]).reshape(N, G * O, L)


_BASE = nn.Linear(1, 1, device="meta")  # only its forward is used: functional_call supplies the tensors


def vmap_functional(x, weight, bias):
    """torch.func: the parameters of G Linears stacked (what stack_module_state returns), and
    vmap over functional_call of one Linear, group by group."""
    G, O, K = weight.shape
    N, _, L = x.shape
    rows = x.transpose(1, 2).reshape(N * L, G, K)

    def one_linear(params, xg):
        return torch.func.functional_call(_BASE, params, (xg,))

    y = torch.func.vmap(one_linear, in_dims=(0, 1), out_dims=1)({"weight": weight, "bias": bias}, rows)
    return y.reshape(N, L, G * O).transpose(1, 2)


def block_diagonal(x, weight, bias):
    """One GEMM with a block-diagonal (G·O, G·K) weight: G× the FLOPs, one launch."""
    return GL.block_diagonal(x, weight, bias, dim=1)


def grouped_mm(x, weight, bias):
    """torch.nn.functional.grouped_mm over the groups (where this build, dtype and shape allow)."""
    return GL.grouped_mm(x, weight, bias, dim=1)


def grouped_linear_auto(x, weight, bias):
    """GroupedLinear(strategy="auto")'s choice for this input: tuned once per shape, then cached.
    (On meta, in an op trace, nothing is timed: it traces the strategy auto chose on the device.)"""
    choice = GL.tune(x, weight, bias, dim=1)
    return GL.FUNCTIONS[choice.strategy](x, weight, bias, 1)


def forum_baddbmm(x, weight, bias):
    """A forum-style answer: the G weights stacked as (G, in, out), x laid out as (G, rows, in) by one
    copy, one baddbmm, the result laid back by a second copy. Here `weight.transpose(1, 2)` is that
    (G, in, out) stack: the lesson hands this variant its weight in that memory layout."""
    N, _, L = x.shape
    G, O, K = weight.shape
    xr = x.view(N, G, K, L).permute(1, 0, 3, 2).reshape(G, N * L, K)
    y = torch.baddbmm(bias.unsqueeze(1), xr, weight.transpose(1, 2))
    return y.view(G, N, L, O).permute(1, 0, 3, 2).reshape(N, G * O, L)
