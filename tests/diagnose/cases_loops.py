"""Steps with known pitfalls of lessons 06 and 07: training loops with logging, data pipelines, host reads."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _model(width=512):
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


def _opt(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)


class Loader:
    """A data loader's shape: batches in (pageable) host memory, one per step. Not a list: diagnose leaves it on
    the host, as a DataLoader's batches are."""

    def __init__(self, steps=2, batch=256, width=512):
        self.batches = [(torch.randn(batch, width), torch.randint(0, 10, (batch,))) for _ in range(steps)]

    def __iter__(self):
        return iter(self.batches)


# --- 06: host syncs ---------------------------------------------------------------------------------------

def case_loop_logs_item():
    """A training loop that logs every step with .item()."""
    def train(model, opt, x, y, steps=3):
        log = []
        for _ in range(steps):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.append(loss.item())  # expect: 06 host sync
        return log
    model = _model()
    return train, (model, _opt(model), torch.randn(256, 512), torch.randint(0, 10, (256,))), {}


def case_loop_prints_loss():
    """A loop that prints the loss tensor every step."""
    def train(model, opt, x, y):
        for step in range(2):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            print(f"step {step}: {loss}")  # expect: 06 host sync
    model = _model()
    return train, (model, _opt(model), torch.randn(256, 512), torch.randint(0, 10, (256,))), {}


def case_bool_mask_loss():
    """A masked loss by boolean indexing: data-dependent shapes forward, and again in backward."""
    def step(model, x, y):
        pred = model(x).squeeze(-1)
        keep = y > 0
        loss = F.mse_loss(pred[keep], y[keep])  # expect: 06 host sync | 04 launch-bound step
        loss.backward()  # expect: 06 host sync
    return step, (nn.Linear(512, 1), torch.randn(1024, 512), torch.randn(1024)), {}


def case_nonzero_routing():
    """Top-1 routing by nonzero: each expert's token list is read on the host."""
    def step(experts, gate, x):
        choice = gate(x).argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(experts):
            rows = (choice == e).nonzero().squeeze(-1)  # expect: 06 host sync
            out[rows] = expert(x[rows])
        out.sum().backward()
    experts = nn.ModuleList(nn.Linear(256, 256) for _ in range(2))
    return step, (experts, nn.Linear(256, 2), torch.randn(512, 256)), {}


def case_cpu_index_into_device():
    """A shuffled batch whose index is made on the host, used on the device data."""
    def step(model, x):
        idx = torch.randperm(x.shape[0])[:128]
        model(x[idx]).sum().backward()  # expect: 06 host sync
    return step, (_model(), torch.randn(4096, 512)), {}


def case_one_hot_without_classes():
    """F.one_hot without num_classes reads the largest label on the host (inside the CUDA kernel's code)."""
    def step(model, x, labels):
        target = F.one_hot(labels).float()  # expect: 06 host sync
        F.mse_loss(model(x), target).backward()
    return step, (_model(), torch.randn(256, 512), torch.randint(0, 10, (256,))), {}


# --- 06: data movement -------------------------------------------------------------------------------------

def case_pipeline_moves_every_batch():
    """A data pipeline that copies every batch from pageable memory, blocking."""
    def train(model, opt, loader):
        device = next(model.parameters()).device
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)  # expect: 06 pageable transfer | 06 host sync
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    model = _model()
    return train, (model, _opt(model), Loader()), {}


def case_pipeline_non_blocking_pageable():
    """non_blocking=True without pinned memory: no wait, but still a staged, pageable copy."""
    def train(model, opt, loader):
        device = next(model.parameters()).device
        for xb, _yb in loader:
            xb = xb.to(device, non_blocking=True)  # expect: 06 pageable transfer
            model(xb).logsumexp(-1).mean().backward()
            opt.step()
    model = _model()
    return train, (model, _opt(model), Loader()), {}


def case_cat_in_a_loop():
    """Predictions collected by growing a tensor with cat."""
    def evaluate(model, batches):
        preds = torch.empty(0, 10, device=batches[0].device)
        with torch.no_grad():
            for xb in batches:
                preds = torch.cat([preds, model(xb)])  # expect: 06 cat in a loop
        return preds
    return evaluate, (_model(), [torch.randn(256, 512) for _ in range(4)]), {}


def case_mask_made_every_step():
    """Lesson 07's loop: a mask made on the host and moved every step."""
    def train(model, opt, x, y):
        for _ in range(2):
            mask = torch.ones(len(x), dtype=torch.bool).to(x.device)  # expect: 06 allocation churn | 06 host sync
            loss = F.cross_entropy(model(x) * mask[:, None], y)
            loss.backward()
            opt.step()
    model = _model()
    return train, (model, _opt(model), torch.randn(256, 512), torch.randint(0, 10, (256,))), {}


def case_buffer_made_per_micro_batch():
    """Gradient accumulation that makes a zero buffer for every micro-batch."""
    def step(model, x):
        total = 0
        for chunk in x.chunk(4):
            acc = torch.zeros(chunk.shape[0], 10, device=x.device)  # expect: 06 allocation churn
            total = total + (model(chunk) + acc).logsumexp(-1).sum()  # expect: 04 launch-bound step
        total.backward()
    return step, (_model(), torch.randn(512, 512)), {}


def case_dataset_getitem_rows():
    """A batch assembled the way a Dataset's __getitem__ hands it over: one row at a time."""
    class Rows:
        def __init__(self, x):
            self.x = x

        def __getitem__(self, i):
            return self.x[i]

    def step(model, x):
        ds = Rows(x)
        idx = torch.randperm(len(x))[:64]
        xb = torch.stack([ds[i] for i in idx])  # expect: 06 row-by-row gather
        model(xb).sum().backward()  # expect: 04 launch-bound step
    return step, (_model(), torch.randn(1024, 512)), {}


def case_inference_without_no_grad():
    """Inference that records a graph and saves tensors for a backward that never comes."""
    def predict(model, x):
        return model(x).argmax(-1)  # expect: 06 graph built for nothing
    return predict, (_model(1024), torch.randn(512, 1024)), {}


# --- 07: graphs kept alive ------------------------------------------------------------------------------------

def case_losses_appended_with_graph():
    """A loop that keeps every loss tensor, graph and all, for logging."""
    history = []

    def train(model, opt, x, y):
        for _ in range(2):
            loss = F.cross_entropy(model(x), y)  # expect: 07 graph kept alive
            loss.backward()
            opt.step()
            history.append(loss)
    model = _model()
    return train, (model, _opt(model), torch.randn(256, 512), torch.randint(0, 10, (256,))), {}


def case_running_total_with_graph():
    """A running total of the loss that keeps every step's graph in the returned tensor."""
    def train(model, opt, x, y):
        total = 0.0
        for _ in range(3):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            total += loss  # expect: 07 graph kept alive
        return total
    model = _model()
    return train, (model, _opt(model), torch.randn(256, 512), torch.randint(0, 10, (256,))), {}


def case_losses_returned_with_graphs():
    """Lesson 07's wrong answer (issue 28): every step's loss kept with its graph in the list the loop returns."""
    def train(model, opt, x, y):
        losses = []
        for _ in range(2):
            loss = F.cross_entropy(model(x), y)  # expect: 07 graph kept alive
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
        return losses
    model = _model()
    return train, (model, _opt(model), torch.randn(256, 512), torch.randint(0, 10, (256,))), {}



def case_sgd_written_by_hand_with_sub():
    """Lesson 07's wrong answer (issue 28): SGD with momentum by hand, each parameter updated with its own sub_."""
    def train(model, x, y, bufs):
        params = list(model.parameters())
        for _ in range(2):
            loss = F.cross_entropy(model(x), y)
            for p in params:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for i, p in enumerate(params):
                    bufs[i] = bufs[i] * 0.9 + p.grad
                    p.sub_(0.1 * bufs[i])  # expect: 04 for-loop optimizer
    model = _model()
    return train, (model, torch.randn(256, 512), torch.randint(0, 10, (256,)),
                   [torch.zeros_like(p) for p in model.parameters()]), {}
