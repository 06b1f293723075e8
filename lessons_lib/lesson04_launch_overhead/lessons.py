"""Lesson 04's declaration: the thread's shape, inputs, the training step, memory estimates, LESSON,
FORWARD_FIXES and TRAIN_LESSON, the compiled and TF32 variants, and small helpers the other files share."""
from __future__ import annotations

import dataclasses

import torch

from .. import compiling, roofline, timing
from .. import device as _device
from ..lesson import Lesson, Param, Variant
from ..trace import on_meta, trace_ops
from .variants import addcmul, linear, linear_tf32, mul_add_inplace, pseudo_linear

LESSON_KEY = "04_launch_overhead"  # also the key of the thread's reported figures in lessons_lib/reference
THREAD_SHAPE = {"width": 160, "batch": 32768, "layers": 4}  # width: the question; batch: the fixing reply; depth ours


def _measure(fn, *args, label: str, min_run_time: float, device, max_time: float = 1.0) -> timing.Timing:
    """timing.measure with an upper bound on the whole measurement (a demo never runs away), on the device
    the public function resolved (a closure such as `opt.step` has no tensor to read it from)."""
    return timing.measure(fn, *args, label=label, min_run_time=min_run_time, max_time=max_time, device=device)


# --- inputs, a training step, memory ---------------------------------------------------------------


def make_inputs(p: dict, device, dtype):
    """x ~ N(0, 1); w in [0.5, 1.5) so a deep stack neither explodes nor vanishes; W = diag(w)."""
    B, N, L = p["batch"], p["width"], p["layers"]
    x = torch.randn(B, N, device=device, dtype=dtype)
    w = 0.5 + torch.rand(L, N, device=device, dtype=dtype)
    b = 0.1 * torch.randn(L, N, device=device, dtype=dtype)
    W = torch.diag_embed(w)
    return x, W, w, b


def make_train_inputs(p: dict, device, dtype):
    """The same, every parameter and x requiring grad, and an upstream gradient g."""
    x, W, w, b = (t.requires_grad_() for t in make_inputs(p, device, dtype))
    g = torch.randn(p["batch"], p["width"], device=device, dtype=dtype)
    return x, W, w, b, g


def train_step(fn, x, W, w, b, g):
    """Forward and backward from g. Returns the output and the gradients of x, the weight and b.

    The weight's gradient is the diagonal of dW for Linear (dW = g^T x restricted to diag(w)) and
    dw for the others, so all variants are compared on the same numbers. `autograd.grad` returns
    gradients instead of accumulating them, so repeated timed steps add nothing.
    """
    out = fn(x, W, w, b)
    gx, gW, gw, gb = torch.autograd.grad(out, (x, W, w, b), g, allow_unused=True)
    weight = gW.diagonal(dim1=-2, dim2=-1) if gW is not None else gw
    return out, gx, weight, gb


def peak_bytes(p: dict, dtype) -> int:
    """Forward peak, inputs included: x, a few activations, W (width² per layer) and the vectors."""
    e = torch.empty(0, dtype=dtype).element_size()
    B, N, L = p["batch"], p["width"], p["layers"]
    return e * (4 * B * N + L * N * N + 2 * L * N)


def train_peak_bytes(p: dict, dtype) -> int:
    """Training-step peak: every layer's activations saved (two per layer), W and dW, the gradients."""
    e = torch.empty(0, dtype=dtype).element_size()
    B, N, L = p["batch"], p["width"], p["layers"]
    return e * ((2 * L + 6) * B * N + 2 * L * N * N + 6 * L * N)


# --- compile as a variant (Variant.prepare: compiled outside the clock, its cost reported) ---------


def _prepare_compiled(fn, *inputs):
    """Compile `fn` for these inputs (forward, or forward + backward when g is passed) and make the
    first, cold call here, outside the clock. Refuses with a sentence when it cannot compile."""
    step = train_step if len(inputs) == 5 else None
    compiling.reset()  # a fresh compile per shape, not Dynamo's recompile limit
    c = compiling.compile_cold(fn, *inputs, step=step)
    if not c.ok:
        raise ValueError(c.problem)
    c.fn._lesson04_cold_s = c.cold_s
    return c.fn


def _fused_work(x, W, w, b) -> roofline.Work:
    """PseudoLinear's forward as one fused kernel: read x, w and b once, write the output once."""
    moved = (2 * x.numel() + w.numel() + b.numel()) * x.element_size()
    return roofline.Work(flops=0, bytes=moved, launches=1)


def compiled_work(params: dict, dtype=torch.float32) -> dict[str, roofline.Work]:
    """The explorer's work for the compiled forward: one fused kernel (the op trace of its `fn` sees
    eager PseudoLinear's ops). Traced on meta: nothing allocated."""
    return {"compiled": _fused_work(*on_meta(*make_inputs(params, torch.device("meta"), dtype)))}


PARAMS = [
    Param("width", "width (features)", cpu=160, gpu=160, lo=1, hi=32768),
    Param("batch", "batch (rows)", cpu=256, gpu=32768, lo=1, hi=1 << 20),
    Param("layers", "layers", cpu=4, gpu=4, lo=1, hi=64),
]
ODD_SHAPES = [
    {"width": 33, "batch": 5, "layers": 3},
    {"width": 1, "batch": 1, "layers": 1},
    {"width": 7, "batch": 17, "layers": 2},
]
EAGER_VARIANTS = [
    Variant("Linear", linear, "F.linear per layer (nn.Linear), W = diag(w)"),
    Variant("PseudoLinear", pseudo_linear, "x * w + b: two ops per layer"),
    Variant("addcmul", addcmul, "one op per layer"),
]


LESSON = Lesson(
    key=LESSON_KEY,
    title="Linear vs PseudoLinear: overhead, memory, compute",
    params=PARAMS,
    variants=EAGER_VARIANTS,
    make_inputs=make_inputs,
    peak_bytes=peak_bytes,
    reduction=lambda p: p["layers"],  # elementwise: rounding grows with depth, not width
    baseline="PseudoLinear",
    compare=("Linear", "PseudoLinear"),
    odd_shapes=ODD_SHAPES,
)

MUL_ADD_INPLACE = Variant("mul + add_", mul_add_inplace, "in place where autograd allows")
# Every eager rewrite, forward only: what the float64 check and the by-hand table cover (the explorer and
# the recorded results keep to LESSON's three).
FORWARD_FIXES = dataclasses.replace(LESSON, variants=[*EAGER_VARIANTS, MUL_ADD_INPLACE])
TRAIN_LESSON = dataclasses.replace(
    LESSON, key="04_launch_overhead_train", title="Linear vs PseudoLinear, training step",
    make_inputs=make_train_inputs, peak_bytes=train_peak_bytes, step=train_step,
    # dW sums over the batch
    reduction=lambda p: max(p["layers"], p["batch"]),
    variants=[*EAGER_VARIANTS, MUL_ADD_INPLACE])


def with_compiled(lesson: Lesson) -> Lesson:
    """The lesson plus a torch.compile'd PseudoLinear (compiled outside the clock, via prepare)."""
    v = Variant("compiled", pseudo_linear, "torch.compile(PseudoLinear): one fused kernel",
                prepare=_prepare_compiled, prepare_budget=compiling.COMPILE_BUDGET_S)
    return dataclasses.replace(lesson, variants=[*lesson.variants, v])


def with_tf32(lesson: Lesson) -> Lesson:
    """The lesson plus Linear with TF32 allowed (its floor uses the TF32 peak where the GPU has one).
    Not in the float64 checks: TF32 rounds inputs to 10 mantissa bits, outside float32's tolerance."""
    v = Variant("Linear (TF32)", linear_tf32, "F.linear with TF32 allowed for its matmuls "
                "(torch.backends.cuda.matmul.fp32_precision = 'tf32'; allow_tf32 before torch 2.9)")
    return dataclasses.replace(lesson, variants=[*lesson.variants, v])


def has_tf32(device) -> bool:
    """A CUDA GPU with TF32 tensor cores (compute capability 8.0 or newer)."""
    dev = torch.device(device)
    return dev.type == "cuda" and _device.has_cuda() and torch.cuda.get_device_capability(dev) >= (8, 0)


def _module_ops(fn, *args) -> list[str]:
    return [op.name for op in trace_ops(fn, *args).compute_ops if not op.name.startswith("_record_function")]


def _bytes(t) -> int:
    """Bytes the ops of a trace read and write (as dispatched)."""
    return t.accessed_bytes


def _shape(p: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in p.items())


def _device_first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:200]
