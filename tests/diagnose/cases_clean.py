"""Clean steps: each pitfall's fix, written the ways people write them. diagnose must report nothing."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from lessons_lib import GroupedLinear


class Block(nn.Module):
    """A pre-norm transformer block from torch.nn layers and scaled_dot_product_attention."""

    def __init__(self, C=256, H=8):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.H, C // self.H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


def case_transformer_block_module():
    return Block(), (torch.randn(8, 256, 256),), {}


def case_stack_of_layers_in_sequence():
    """A ModuleList applied layer after layer: the same line, GEMMs of one shape, each fed by the last."""
    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(1024, 1024) for _ in range(8))

        def forward(self, x):
            for layer in self.layers:
                x = F.relu(layer(x))
            return x
    return Deep(), (torch.randn(512, 1024),), {}


def case_grouped_experts():
    """Lesson 03's answer: GroupedLinear, one bmm for every expert."""
    def step(layer, head, x):
        head(F.gelu(layer(x))).sum().backward()
    return step, (GroupedLinear(16, 16, 16, strategy="bmm"), nn.Linear(256, 10), torch.randn(64, 32, 256)), {}


def case_einsum_per_head():
    """Lesson 01's fix: einsum over the per-head weights, no copy."""
    def step(x, W):
        torch.einsum("btc,hcd->bhtd", x, W).square().mean().backward()
    return step, (torch.randn(32, 64, 512, requires_grad=True), torch.randn(8, 512, 64, requires_grad=True)), {}


def case_training_loop_logged_on_device():
    """Lesson 07's fixed loop: indices on the device, losses detached on the device, one cat, foreach SGD."""
    def train(model, opt, x, y, steps=3, batch=128):
        losses = torch.empty(steps, device=x.device)
        outs = []
        order = torch.randperm(len(x), device=x.device)
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            out = model(x[idx])
            loss = F.cross_entropy(out, y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses[s] = loss.detach()
            outs.append(out.detach())
        return losses, torch.cat(outs)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10))
    return train, (model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True),
                   torch.randn(1024, 512), torch.randint(0, 10, (1024,))), {}


def case_adamw_fused_on_conv_net():
    """A small conv net with batch norm, trained with AdamW(fused=True) (traced as foreach on meta)."""
    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1),
                          nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    return step, (model, torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True), torch.randn(64, 3, 32, 32),
                  torch.randint(0, 10, (64,))), {}


def case_inference_mode():
    """Inference under torch.inference_mode: no graph, nothing saved."""
    def predict(model, x):
        with torch.inference_mode():
            return model(x).argmax(-1)
    return predict, (nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)), torch.randn(512, 1024)), {}


def case_cat_once():
    """Lesson 06's answer: collect the pieces, cat once."""
    def evaluate(model, batches):
        with torch.no_grad():
            return torch.cat([model(xb) for xb in batches])
    return evaluate, (nn.Linear(512, 10), [torch.randn(256, 512) for _ in range(4)]), {}


def case_masked_loss_without_indexing():
    """A masked loss that keeps its shape: multiply by the mask, divide by its sum."""
    def step(model, x, y):
        pred = model(x).squeeze(-1)
        keep = (y > 0).float()
        loss = ((pred - y) ** 2 * keep).sum() / keep.sum().clamp_min(1)
        loss.backward()
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1))
    return step, (model, torch.randn(8192, 1024), torch.randn(8192)), {}


def case_buffer_made_once():
    """Gradient accumulation with the buffer made once, before the loop."""
    def step(model, x):
        acc = torch.zeros(x.shape[0] // 4, 1000, device=x.device)
        total = 0
        for chunk in x.chunk(4):
            total = total + (model(chunk) + acc).logsumexp(-1).sum()
        total.backward()
    return step, (nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1000)), torch.randn(8192, 2048)), {}


def case_one_hot_with_classes():
    """F.one_hot with num_classes: nothing read on the host."""
    def step(model, x, labels):
        F.mse_loss(model(x), F.one_hot(labels, 1000).float()).backward()
    return step, (nn.Linear(2048, 1000), torch.randn(4096, 2048), torch.randint(0, 1000, (4096,))), {}


def case_losses_appended_detached():
    """Logging that keeps tensors, detached: no graph outlives its step."""
    history = []

    def train(model, opt, x, y):
        for _ in range(2):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            history.append(loss.detach())
    model = nn.Linear(2048, 1000)
    return train, (model, torch.optim.SGD(model.parameters(), lr=0.1, foreach=True), torch.randn(4096, 2048),
                   torch.randint(0, 1000, (4096,))), {}


def case_torch_transformer_encoder():
    """torch.nn's own encoder (dropout on): its attention takes scaled_dot_product_attention's fused kernels."""
    layer = nn.TransformerEncoderLayer(256, 8, dim_feedforward=1024, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), (torch.randn(16, 128, 256),), {}


def case_torch_lstm():
    """nn.LSTM: cuDNN's fused kernels on CUDA, though meta and the CPU run it step by step."""
    return nn.LSTM(128, 256, num_layers=2, batch_first=True), (torch.randn(8, 50, 128),), {}


def case_one_loss_returned_after_backward():
    """One step that returns its loss after backward (the caller reads it): one graph, not kept across steps."""
    def step(model, opt, x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    model = nn.Linear(2048, 1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    return step, (model, opt, torch.randn(4096, 2048), torch.randint(0, 1000, (4096,))), {}


def case_default_sgd_runs_as_foreach_on_cuda():
    """The default SGD: a for loop on meta and the CPU, foreach on CUDA (torch/optim/optimizer.py,
    _default_to_fused_or_foreach): no cost on a GPU, so no finding (issue 32; it was a "for-loop optimizer")."""
    def step(model, opt, x, y):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    return step, (model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), torch.randn(4096, 512),
                  torch.randn(4096, 512)), {}
