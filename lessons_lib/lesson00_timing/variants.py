"""Lesson 00's variants: the forum's code that the notebook renders with `show_source`.

Seed 003's PseudoLinear and its mistake (a fresh random input inside the timed call), seed 000's
pattern on the pretend GPU (the same launch with and without a synchronize inside), and a
training-loop fragment with four hidden synchronizations. The demos that time them are in
demos.py and pretend_gpu.py; the exercise's broken benchmark is in exercise.py.
Shapes are in comments above the defs, which `show_source` does not render.
"""
from __future__ import annotations

import torch

from ..launch_queue import SimulatedGPU


# x (rows, width); w, b (width,): one scale and one shift per feature, broadcast over the rows
def pseudo_linear(x, w, b):
    """Seed 003's PseudoLinear forward: a per-feature scale and shift instead of a matmul."""
    return x * w + b


# rows: an int; w, b (width,); returns (rows, width)
def pseudo_linear_fresh_input(rows, w, b):
    """Seed 003's mistake: a new random input is generated inside the timed call."""
    x = torch.randn(rows, w.shape[0], device=w.device)
    return pseudo_linear(x, w, b)


def thread000_variants(gpu: SimulatedGPU, kernel: float = 0.002):
    """Seed 000's pattern on the pretend GPU: the SAME launch, once with a synchronize inside
    the function (as in the thread's functions) and once without (as K. Frank's run_batched).
    Returns (syncs_inside, no_sync)."""

    def syncs_inside():
        gpu.launch(kernel)
        gpu.synchronize()

    def no_sync():
        gpu.launch(kernel)

    return syncs_inside, no_sync


def implicit_syncs_example(x):
    """A training-loop fragment with four hidden synchronizations (see host_syncs)."""
    loss = (x * 2).pow(2).mean()
    print(f"loss {loss:.3f}")  # formats a tensor: reads its value
    if loss > 1:  # a tensor in an if: reads its value
        x = x / 2
    kept = x[x > 0]  # boolean mask: the output size depends on the data
    return kept.sum().item()  # .item(): reads the value
