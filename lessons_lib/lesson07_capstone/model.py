"""The capstone's model: one small training setup with the pitfalls of lessons 01-06 in it, and its fixes.

`Slow` is the forum-style code; `Fixed` computes the same function. `FIXES` names each fix and the lesson
that explains it. Shapes: B batch, T tokens, C = H*D channels, H heads, D head size, E experts.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..grouped_linear import GroupedLinear

FIXES = {
    "gemm": "one GEMM for the per-head projections instead of a broadcast matmul (lesson 01)",
    "grouped": "GroupedLinear instead of a loop over small Linears (lesson 03)",
    "fused": "the activation as one built-in op instead of an elementwise chain (lesson 04)",
    "saved": "no intermediates kept alive for autograd (lesson 02)",
    "loop": "on-device logging, one cat, the mask made once on the device (lesson 06)",
}


def gelu_chain(x):
    # hand-written tanh GELU: ~8 elementwise kernels, each intermediate saved for backward
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


class SlowBlock(nn.Module):
    def __init__(self, C=64, H=4, E=8, dtype=None):
        super().__init__()
        self.H, self.D, self.E = H, C // H, E
        self.w_qkv = nn.Parameter(torch.randn(H, C, 3 * (C // H), dtype=dtype) / C ** 0.5)  # (H, C, 3D)
        self.experts = nn.ModuleList(nn.Linear(C // E, C // E, dtype=dtype) for _ in range(E))  # E x (C/E -> C/E)
        self.out = nn.Linear(C, C, dtype=dtype)

    def forward(self, x):                                        # (B, T, C)
        B, T, C = x.shape
        qkv = torch.matmul(x.unsqueeze(1), self.w_qkv)           # (B, 1, T, C) @ (H, C, 3D) -> (B, H, T, 3D)
        q, k, v = qkv.split(self.D, dim=-1)                      # (B, H, T, D) each
        att = torch.softmax(q @ k.transpose(-1, -2) / self.D ** 0.5, dim=-1)   # (B, H, T, T)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)           # (B, T, C)
        h = gelu_chain(y)                                        # (B, T, C)
        parts = [lin(c) for lin, c in zip(self.experts, h.chunk(self.E, -1))]   # E x (B, T, C/E)
        return x + self.out(torch.cat(parts, dim=-1))            # (B, T, C)


class FixedBlock(nn.Module):
    def __init__(self, C=64, H=4, E=8, dtype=None):
        super().__init__()
        self.H, self.D, self.E = H, C // H, E
        self.w_qkv = nn.Parameter(torch.randn(H, C, 3 * (C // H), dtype=dtype) / C ** 0.5)  # (H, C, 3D)
        self.experts = GroupedLinear(E, C // E, C // E, strategy="bmm", dtype=dtype)  # (E, C/E, C/E) in one bmm
        self.out = nn.Linear(C, C, dtype=dtype)

    def forward(self, x):                                        # (B, T, C)
        B, T, C = x.shape
        w = self.w_qkv.permute(1, 0, 2).reshape(C, -1)           # (C, H*3D): one GEMM for every head
        qkv = (x @ w).view(B, T, self.H, 3 * self.D).transpose(1, 2)   # (B, H, T, 3D)
        q, k, v = qkv.split(self.D, dim=-1)                      # (B, H, T, D) each
        y = nn.functional.scaled_dot_product_attention(q, k, v)  # (B, H, T, D), nothing (B, H, T, T) saved
        y = y.transpose(1, 2).reshape(B, T, C)                   # (B, T, C)
        h = nn.functional.gelu(y, approximate="tanh")            # one kernel
        return x + self.out(self.experts(h))                     # (B, T, C)


class Model(nn.Module):
    """Embedding -> block -> mean-pool readout: classify which of K patterns a noisy sequence holds."""

    def __init__(self, fixed=False, C=64, H=4, E=8, K=4, dtype=None):
        super().__init__()
        self.fixed = fixed
        self.inp = nn.Linear(8, C, dtype=dtype)
        self.block = (FixedBlock if fixed else SlowBlock)(C, H, E, dtype)
        self.head = nn.Linear(C, K, dtype=dtype)

    def forward(self, x):                                        # (B, T, 8)
        return self.head(self.block(self.inp(x)).mean(1))        # (B, K)


@torch.no_grad()
def copy_weights(slow: Model, fixed: Model) -> Model:
    """Give `fixed` exactly `slow`'s parameters (the experts' Linears into the GroupedLinear)."""
    fixed.inp.load_state_dict(slow.inp.state_dict())
    fixed.head.load_state_dict(slow.head.state_dict())
    fixed.block.w_qkv.copy_(slow.block.w_qkv)
    fixed.block.out.load_state_dict(slow.block.out.state_dict())
    for e, lin in enumerate(slow.block.experts):
        fixed.block.experts.weight[e].copy_(lin.weight)
        fixed.block.experts.bias[e].copy_(lin.bias)
    return fixed


def make_data(n=256, T=16, K=4, seed=0, dtype=torch.float32):
    """A synthetic task it learns visibly: each class is a fixed random pattern plus noise."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(K, T, 8, generator=g)
    y = torch.randint(0, K, (n,), generator=g)
    x = patterns[y] + 1.5 * torch.randn(n, T, 8, generator=g)
    return x.to(dtype), y


def slow_train(model, x, y, steps=20, batch=32, lr=1e-2):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses, outs = [], torch.empty(0)
    for s in range(steps):
        i = (s * batch) % len(x)
        xb, yb = x[i:i + batch], y[i:i + batch]
        mask = torch.ones(len(xb), dtype=torch.bool).to(xb.device)     # made and moved every step
        out = model(xb)
        loss = nn.functional.cross_entropy(out[mask], yb[mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())                                   # a host sync every step
        outs = torch.cat([outs, out.detach()])                       # a growing cat every step
    return losses, outs


def fixed_train(model, x, y, steps=20, batch=32, lr=1e-2):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = torch.empty(steps, dtype=x.dtype, device=x.device)     # logged on the device
    outs = []
    for s in range(steps):
        i = (s * batch) % len(x)
        xb, yb = x[i:i + batch], y[i:i + batch]
        out = model(xb)
        loss = nn.functional.cross_entropy(out, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses[s] = loss.detach()
        outs.append(out.detach())
    return losses.tolist(), torch.cat(outs)                          # one sync, one cat
