"""Lesson 03's lessons: the thread's shape and figures, inputs, the training step, memory, LESSON and TRAIN_LESSON."""
from __future__ import annotations

import dataclasses
import functools

import torch

from .. import compiling
from .. import grouped_linear as GL
from ..grouped_linear import tuning as GL_tuning
from ..lesson import Lesson, Param, Variant
from .variants import (
    block_diagonal, bmm_rows, einsum, forum_baddbmm, grouped_conv1d, grouped_linear_auto, grouped_mm,
    matmul_channels, slow_groups, vmap_functional,
)


KEY = "03_grouped_linear"
# The course's choice around the thread's "about 100 groups of about 100 features": the thread gives no batch or
# length for its toy benchmark, so 8 × 512 positions is ours (10000 channels, as 100 groups of 100).
THREAD_SHAPE = {"batch": 8, "groups": 100, "group_size": 100, "length": 512}
# Reported in the thread (seed 002): a toy example with equal in and out features, forward + backward timed by the
# replier; "conv1d with groups gets 1924ms while the batched matrix multiplication comes in at around 1263ms".
THREAD_REPORTED = {"grouped Conv1d": 1.924, "batched matmul (reply's MultichannelLinear)": 1.263}
THREAD_REPORTED_NOTE = ("total seconds as posted for the replier's toy benchmark (iterations, batch and GPU not "
                        "stated for this figure; the replier mentions a 3080 Ti with mixed precision elsewhere)")


class _LaidOut:
    """A variant run over its own copy of the weight in a given memory order (`GL.LAYOUT`): "gemm", (G, in,
    out) in memory, as a forum answer stacks it; or the order GroupedLinear holds for the strategy it chose
    (made once, outside the clock, like a module's parameter). `weight` is that leaf; `train_step` takes its
    gradient instead of the lesson's."""

    def __init__(self, fn, weight, strategy: str):
        self.fn, self.__name__ = fn, getattr(fn, "__name__", "variant")
        self.weight = GL.laid_out(weight.detach(), strategy).clone().requires_grad_(weight.requires_grad)

    def __call__(self, x, _weight, bias):
        return self.fn(x, self.weight, bias)


def _prepare_gemm_layout(fn, x, weight, *_rest):
    return _LaidOut(fn, weight, "bmm")


def _prepare_auto(fn, x, weight, bias, *rest):
    """GroupedLinear(auto) as the module runs it: tuning done here, before the timed calls (its cost is
    `Run.prepare_seconds`, not part of the bar), the weight in the memory order of the strategy chosen, and
    each call straight into that strategy's function, as the module's fast path makes it once its input's
    signature matches. (`fn`, which looks the choice up in the cache on every call, is what traces and
    checks run: at 4 and 16 groups of 8, 40–60 µs calls, the lookup made auto 1.09–1.14× the same strategy's
    own variant in paired rounds on a busy CPU; bound once, 1.03–1.05×.)"""
    choice = GL.tune(x, weight, bias, dim=1, training=bool(rest))
    return _LaidOut(functools.partial(GL.FUNCTIONS[choice.strategy], dim=1), weight, choice.strategy)


# --- inputs, a training step, memory ---------------------------------------------------------------------


def make_inputs(p: dict, device, dtype):
    """x ~ N(0, 1); weights scaled like nn.Linear's so outputs stay O(1) (in fp16 too)."""
    N, G, K, L = p["batch"], p["groups"], p["group_size"], p["length"]
    x = torch.randn(N, G * K, L, device=device, dtype=dtype)
    weight = torch.randn(G, K, K, device=device, dtype=dtype) / K**0.5
    bias = 0.1 * torch.randn(G, K, device=device, dtype=dtype)
    return x, weight, bias


def make_train_inputs(p: dict, device, dtype):
    x, weight, bias = (t.requires_grad_() for t in make_inputs(p, device, dtype))
    g = torch.randn(p["batch"], p["groups"] * p["group_size"], p["length"], device=device, dtype=dtype)
    return x, weight, bias, g


def train_step(fn, x, weight, bias, g):
    """Forward, then backward from g: the output and the gradients of x, weight and bias.
    (`autograd.grad` returns them instead of accumulating, so timed repeats add nothing.) A variant
    with its own weight layout (`_LaidOut`) gets the gradient of its own weight."""
    out = fn(x, weight, bias)
    return (out, *torch.autograd.grad(out, (x, getattr(fn, "weight", weight), bias), g))


def peak_bytes(p: dict, dtype) -> int:
    """The worst variant's forward: x, its copy, the output and its copy, and block-diagonal's weight."""
    e = torch.empty(0, dtype=dtype).element_size()
    N, G, K, L = p["batch"], p["groups"], p["group_size"], p["length"]
    act = N * G * K * L
    return e * (5 * act + G * G * K * K + N * G * K * K + 2 * G * K)


def train_peak_bytes(p: dict, dtype) -> int:
    e = torch.empty(0, dtype=dtype).element_size()
    N, G, K, L = p["batch"], p["groups"], p["group_size"], p["length"]
    act = N * G * K * L
    return e * (9 * act + 3 * G * G * K * K + 2 * N * G * K * K + 4 * G * K)


def validate(p: dict) -> None:
    if p["groups"] * p["group_size"] > 65536:
        raise ValueError(f"groups × group_size = {p['groups'] * p['group_size']} channels; keep it at most 65536.")


PARAMS = [
    Param("batch", "batch", cpu=4, gpu=THREAD_SHAPE["batch"], lo=1, hi=4096),
    Param("groups", "groups", cpu=32, gpu=THREAD_SHAPE["groups"], lo=1, hi=4096),
    Param("group_size", "group size (features per group)", cpu=32, gpu=THREAD_SHAPE["group_size"], lo=1, hi=4096),
    Param("length", "length (positions)", cpu=64, gpu=THREAD_SHAPE["length"], lo=1, hi=1 << 16),
]
ODD_SHAPES = [
    {"batch": 3, "groups": 5, "group_size": 7, "length": 9},
    {"batch": 1, "groups": 1, "group_size": 1, "length": 1},
    {"batch": 2, "groups": 3, "group_size": 13, "length": 5},
]
VARIANTS = [
    Variant("loop (SlowGroups)", slow_groups, "the thread: G Linears over chunks, then cat"),
    Variant("grouped Conv1d", grouped_conv1d, "the thread: kernel_size=1, groups=G"),
    Variant("bmm, rows first", bmm_rows, "one baddbmm; x and the output laid out by copies"),
    Variant("matmul, channels first", matmul_channels, "the reply's layout: one bmm, no activation copy"),
    Variant("einsum", einsum, "one bmm after einsum's own permute/reshape"),
    Variant("vmap", vmap_functional, "torch.func.vmap over functional_call"),
    Variant("block-diagonal", block_diagonal, "one mm, G× the FLOPs"),
]

LESSON = Lesson(
    key=KEY,
    title="G small Linears side by side",
    params=PARAMS,
    variants=VARIANTS,
    make_inputs=make_inputs,
    peak_bytes=peak_bytes,
    reduction=lambda p: p["group_size"],
    baseline="loop (SlowGroups)",
    validate=validate,
    compare=("loop (SlowGroups)", "grouped Conv1d"),
    odd_shapes=ODD_SHAPES,
)
TRAIN_LESSON = dataclasses.replace(
    LESSON, key=KEY + "_train", title="G small Linears side by side, training step",
    make_inputs=make_train_inputs, peak_bytes=train_peak_bytes, step=train_step,
    reduction=lambda p: max(p["group_size"], p["batch"] * p["length"]))  # dW sums over every row


AUTO = "GroupedLinear(auto)"
FORUM = "forum baddbmm, (G, in, out) weight"


def with_variants(lesson: Lesson, *, auto: bool = False, grouped: bool = False, compiled: bool = False,
                  forum: bool = False) -> Lesson:
    """The lesson plus GroupedLinear(auto), grouped_mm (where it runs), a compiled loop or the forum's
    baddbmm over a (G, in, out) weight."""
    extra = []
    if auto:
        extra.append(Variant(AUTO, grouped_linear_auto, "tuned before the timed calls (tuning reported apart), then "
                             "the cached choice over its weight, laid out for that choice (never named fastest: it runs "
                             "one of the others)", prepare=_prepare_auto,
                             runs_another=True, prepare_budget=GL_tuning.TUNE_BUDGET_S))
    if forum:
        extra.append(Variant(FORUM, forum_baddbmm, "a forum answer: one baddbmm over a (G, in, out) weight stack",
                             prepare=_prepare_gemm_layout))
    if grouped:
        extra.append(Variant("grouped_mm", grouped_mm, "F.grouped_mm, where it runs"))
    if compiled:
        extra.append(Variant("compiled loop", slow_groups, "torch.compile of the loop", prepare=_prepare_compiled,
                             prepare_budget=compiling.COMPILE_BUDGET_S))
    return dataclasses.replace(lesson, variants=[*lesson.variants, *extra])


def _prepare_compiled(fn, *inputs):
    step = train_step if len(inputs) == 4 else None
    compiling.reset()
    c = compiling.compile_cold(fn, *inputs[:3], step=(lambda f, *a: step(f, *a, inputs[3])) if step else None)
    if not c.ok:
        raise ValueError(c.problem)
    return c.fn
