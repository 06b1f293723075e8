"""Lesson 05's declaration: its keys and the thread's widths, inputs, memory, PARAMS, LESSON (the eager
training step) and the model files' "CUDA graph" variant; `_shape`, which the other files share."""
from __future__ import annotations

import dataclasses

import torch

from ..lesson import Lesson, Param, Variant
from .variants import eager_step


KEY = "05_cuda_graphs"
SEED_KEY = "04_launch_overhead"  # the thread's tables are stored once, with lesson 04's reported figures
MODEL_BATCH = 64  # the thread does not state the batch of its tables; the model assumes this one
MODEL_LAYERS = 4
REPORTED_WIDTHS = [128, 256, 512, 1024, 2048, 4096, 6144]


def make_inputs(p: dict, device, dtype):
    """x ~ N(0, 1); w in [0.5, 1.5) so a deep stack neither explodes nor vanishes; all require grad."""
    B, N, L = p["batch"], p["width"], p["layers"]
    x = torch.randn(B, N, device=device, dtype=dtype).requires_grad_()
    w = (0.5 + torch.rand(L, N, device=device, dtype=dtype)).requires_grad_()
    b = (0.1 * torch.randn(L, N, device=device, dtype=dtype)).requires_grad_()
    g = torch.randn(B, N, device=device, dtype=dtype)
    return x, w, b, g


def peak_bytes(p: dict, dtype) -> int:
    """Training step: two saved activations a layer, x, g, the output and its gradients; a graph's
    static copies and private pool double that on a GPU."""
    e = torch.empty(0, dtype=dtype).element_size()
    B, N, L = p["batch"], p["width"], p["layers"]
    return 2 * e * ((2 * L + 6) * B * N + 6 * L * N)


PARAMS = [
    Param("width", "width (features)", cpu=512, gpu=512, lo=1, hi=16384),
    Param("batch", "batch (rows)", cpu=64, gpu=64, lo=1, hi=1 << 20),
    Param("layers", "layers (depth)", cpu=4, gpu=4, lo=1, hi=64),
]
ODD_SHAPES = [{"width": 33, "batch": 5, "layers": 3}, {"width": 1, "batch": 1, "layers": 1}]


LESSON = Lesson(
    key=KEY,
    title="PseudoLinear training step: eager, and replayed as a CUDA graph",
    params=PARAMS,
    variants=[Variant("eager", eager_step, "forward + backward, one kernel launch per op")],
    make_inputs=make_inputs,
    peak_bytes=peak_bytes,
    reduction=lambda p: max(p["layers"], p["batch"]),  # dw sums over the batch
    baseline="eager",
    odd_shapes=ODD_SHAPES,
    reported_from=SEED_KEY,  # the thread's graphed speed-ups replay in this explorer too
    model_work=lambda p, dt: graphed_work(p, dt),
)


def graphed_work(params: dict, dtype=torch.float32) -> dict:
    """Model files' "CUDA graph" variant: the eager step's FLOPs and bytes, issued by the host in one
    graph launch (`record --model`; the device's own gaps between kernels are not modelled)."""
    return {"CUDA graph": dataclasses.replace(LESSON.work(params, dtype)["eager"], launches=1)}


def _shape(p: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in p.items())
