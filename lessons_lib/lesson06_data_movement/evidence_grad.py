"""Lesson 06, claim 5 (no_grad saves time and memory): a small MLP, the bytes autograd saves per mode
(lesson 02's ledger, on meta), the modes' timings, their agreement, and the paired-rounds verdict."""
from __future__ import annotations

import torch
import torch.nn as nn

from .. import claim_table, memory, noise, timing
from .. import device as _device
from ..grading import rel_error
from .evidence import _course_device, _measure, _whole
from .variants import GRAD_MODES


def mlp(width: int = 512, depth: int = 3) -> nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def saved_bytes(batch: int = 256, width: int = 512, depth: int = 3) -> dict[str, int]:
    """Bytes autograd keeps for backward in one forward, per mode (lesson 02's ledger, on meta)."""
    model = mlp(width, depth).to("meta")
    x = torch.empty(batch, width, device="meta")
    return {name: memory.ledger(fn, model, x).total_bytes for name, fn in GRAD_MODES.items()}


def _grad_shape(device, batch, width, depth):
    """(device, batch) after checking the shape, and that the model and a forward's activations fit, before
    anything is allocated."""
    dev = _course_device(device)
    batch = _whole(batch, "batch") if batch is not None else (4096 if dev.type == "cuda" else 64)
    _whole(width, "width")
    _whole(depth, "depth", 1, 1000)
    _device.check_fits(4 * (depth * width * (width + 1) + 3 * batch * width), dev, "the MLP and its activations")
    return dev, batch


def grad_mode_timings(device=None, batch: int | None = None, width: int = 512, depth: int = 3,
                      min_run_time: float = 0.1) -> dict[str, timing.Timing]:
    dev, batch = _grad_shape(device, batch, width, depth)
    model = mlp(width, depth).to(dev)
    x = torch.randn(batch, width, device=dev)
    return {name: _measure(fn, model, x, label=name, min_run_time=min_run_time, device=dev)
            for name, fn in GRAD_MODES.items()}


def grad_modes_agree() -> float:
    """The three modes compute the same output (worst relative error against float64)."""
    model = mlp(64, 2)
    x = torch.randn(5, 64)
    ref = mlp(64, 2).double()(x.double())
    return max(rel_error(fn(model, x), ref) for fn in GRAD_MODES.values())


GRAD_PAIRS = [("with autograd", "inference_mode")]  # what grad_mode_verdict's sentence says


def grad_mode_verdict(device=None, batch: int | None = None, width: int = 512, depth: int = 3,
                      max_time: float = 4.0):
    """(Comparison, sentence): a forward with autograd against inference_mode, paired rounds; its table is
    `claim_table.of(cmp, GRAD_PAIRS)`."""
    dev, batch = _grad_shape(device, batch, width, depth)
    model = mlp(width, depth).to(dev)
    x = torch.randn(batch, width, device=dev)
    cmp = noise.compare({name: (lambda fn=fn: fn(model, x)) for name, fn in GRAD_MODES.items()},
                        pairs=GRAD_PAIRS, max_time=max_time, device=dev)
    return cmp, claim_table.say(cmp.ratio(*GRAD_PAIRS[0]),
                        "here inference_mode is {x} the speed of a forward with autograd: skipping autograd's "
                        "bookkeeping saves a measurable share of the time at this size",
                        tie="here inference_mode and a forward with autograd take the same time (within 5%): next "
                            "to the matmuls, autograd's bookkeeping is small at this size")
