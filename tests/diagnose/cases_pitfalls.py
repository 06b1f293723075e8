"""Steps with known pitfalls, written the ways people write them. Each marked line is where diagnose must point.

Shapes are realistic (the run is on meta: nothing is allocated), so a step is launch-bound only where it means to
be. The tensors built here on the CPU are small; the models' weights are made on meta where they are large.
"""
from __future__ import annotations

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def _mlp(width=1024, depth=2, device=None):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width, device=device), nn.ReLU()]
    return nn.Sequential(*layers)


# --- 01 / 02: matmuls and what they keep ----------------------------------------------------------------

def case_per_head_broadcast():
    """Lesson 07's per-head projection: x (B, 1, T, C) @ W (H, C, D) copies W per batch row (and x per head)."""
    def step(x, W):
        q = x.unsqueeze(1) @ W  # expect: 01 broadcast matmul | 02 expanded copy kept for backward
        q.square().mean().backward()
    return step, (torch.randn(32, 64, 512, requires_grad=True), torch.randn(8, 512, 64, requires_grad=True)), {}


def case_broadcast_inference():
    """Lesson 01's seed: one module per weight, a broadcast matmul, forward only (the graph is returned)."""
    def layer(x, weight, bias):
        return x.unsqueeze(0) @ weight.unsqueeze(1).transpose(-2, -1) + bias[:, None, None, :]  # expect: 01 broadcast matmul | 02 expanded copy kept for backward
    w = torch.randn(12, 256, 256, requires_grad=True)
    return layer, (torch.randn(13, 16, 256), w, torch.randn(12, 256, requires_grad=True)), {}


def case_attention_by_hand():
    """Attention written by hand in an nn.Module (minGPT style), diagnosed as a module and a batch."""
    class HandAttention(nn.Module):
        def __init__(self, C=256, H=8):
            super().__init__()
            self.H, self.qkv, self.out = H, nn.Linear(C, 3 * C), nn.Linear(C, C)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).view(B, T, 3, self.H, C // self.H).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).tril() == 0, float("-inf"))
            att = F.softmax(att, dim=-1)  # expect: 02 attention matrix kept for backward
            return self.out((att @ v).transpose(1, 2).reshape(B, T, C))
    return HandAttention(), (torch.randn(8, 256, 256),), {}


# --- 03: small GEMMs in a Python loop -------------------------------------------------------------------

def case_mlp_per_expert():
    """An MLP per expert in a ModuleList, each on its slice of the channels."""
    class ExpertsLoop(nn.Module):
        def __init__(self, C=256, E=16):
            super().__init__()
            self.E = E
            self.experts = nn.ModuleList(nn.Sequential(nn.Linear(C // E, 4 * C // E), nn.GELU(),
                                                       nn.Linear(4 * C // E, C // E)) for _ in range(E))

        def forward(self, x):
            chunks = x.chunk(self.E, dim=-1)
            return torch.cat([e(c) for e, c in zip(self.experts, chunks)], dim=-1)  # expect: 03 GEMMs in a Python loop | 04 launch-bound step
    return ExpertsLoop(), (torch.randn(16, 32, 256),), {}


def case_linears_side_by_side_functional():
    """Functional code: one small weight per group, applied one by one and stacked."""
    def step(x, ws):
        ys = []
        for g in range(ws.shape[0]):
            ys.append(x[:, g] @ ws[g])  # expect: 03 GEMMs in a Python loop | 04 launch-bound step
        torch.stack(ys, 1).sum().backward()
    return step, (torch.randn(64, 12, 32), torch.randn(12, 32, 32, requires_grad=True)), {}


# --- 04 / 05: launches ---------------------------------------------------------------------------------

def case_hand_layernorm():
    """A layer norm written by hand, then a Linear: one kernel per term."""
    def my_norm(x, g, b, eps=1e-5):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * g + b  # expect: 04 elementwise chain

    def step(x, g, b, lin):
        lin(my_norm(x, g, b)).sum().backward()
    return step, (torch.randn(64, 128, 512), torch.ones(512, requires_grad=True), torch.zeros(512, requires_grad=True),
                  nn.Linear(512, 512)), {}


def case_swish_by_hand():
    """A hand-written activation with a learnable slope, in an nn.Module."""
    class Swishy(nn.Module):
        def __init__(self):
            super().__init__()
            self.beta, self.fc = nn.Parameter(torch.ones(1)), nn.Linear(1024, 1024)

        def forward(self, x):
            h = self.fc(x)
            return h * torch.sigmoid(self.beta * h) + 0.1 * h * h - 0.01 * torch.abs(h) * h  # expect: 04 elementwise chain
    return Swishy(), (torch.randn(256, 1024),), {}


def case_tiny_layers_launch_bound():
    """Sixty tiny layers at batch 4: nothing but launches (each layer's GEMMs depend on the last: no loop finding)."""
    def step(layers, x):
        for layer in layers:
            x = torch.relu(layer(x))  # expect: 04 launch-bound step
        x.sum().backward()
    return step, (nn.ModuleList(nn.Linear(32, 32) for _ in range(60)), torch.randn(4, 32)), {}


def case_adam_foreach_false():
    """Adam with foreach=False asked for: a for loop on every device."""
    def step(model, x):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
        F.mse_loss(model(x), x).backward()
        opt.step()  # expect: 04 for-loop optimizer
    return step, (_mlp(1024, 2), torch.randn(512, 1024)), {}


def case_capture_hazards():
    """graphs=True: a step that reads a loss on the host and draws a Python random number."""
    def step(model, opt, x):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()  # expect: 05 capture hazard
        if loss.item() > random.random():  # expect: 06 host sync | 05 capture hazard
            opt.zero_grad()
    model = _mlp(512, 2)
    return step, (model, torch.optim.SGD(model.parameters(), lr=0.1, foreach=True), torch.randn(128, 512)), {}, \
        {"graphs": True}


def case_multihead_attention_weights():
    """nn.MultiheadAttention asked for its weights (the default): the math path, probabilities kept."""
    def step(mha, x):
        out, _weights = mha(x, x, x)  # expect: 02 attention matrix kept for backward
        out.sum().backward()
    return step, (nn.MultiheadAttention(256, 8, batch_first=True), torch.randn(16, 128, 256)), {}
