"""GroupedLinear: G independent small `nn.Linear` layers side by side, as one drop-in module.

The answer to forum seed 002 ("How to speed up small parallel nn.Linear blocks (or small
parallel matrix multiplications or group convolutions)?"), shipped as code a reader can put
in a model:

    layer = GroupedLinear(groups=100, in_features=100, out_features=100)   # strategy="auto"
    y = layer(x)            # x (..., groups * in_features) -> (..., groups * out_features)
    print(layer.explain())  # which strategy it picked here, and the timings it saw

Group g maps features [g·in, (g+1)·in) of the channel dimension to features [g·out, (g+1)·out)
of the output, exactly like `nn.Linear(in_features, out_features)` number g would. The
channel dimension is the last one by default (like `nn.Linear`); `dim=1` (or -2) takes the
channel-first layout of `nn.Conv1d` and the thread's `SlowGroups`.

Parameters: `weight` (groups, out_features, in_features) and `bias` (groups, out_features).
They are the same whatever the strategy, so a state dict saved with one strategy loads into
another, and `from_linears` / `to_linears` / `from_conv1d` / `from_slow_groups` convert
trained layers both ways. The weight's *memory order* follows the strategy in use (`LAYOUT`):
(groups, out, in) as nn.Linear holds it for the stacked matmul, Conv1d and the loop, (groups, in,
out) for the batched GEMMs (`bmm`, `einsum`, `grouped_mm`: their B operand, read without a
transpose). Auto lays the weight out for the strategy it chose, once; the shape, the state dict
and the converters never change.

Strategies (every one computes the same function; they differ in ops, copies and FLOPs):

    loop            one F.linear per group on a column slice, then cat (the thread's SlowGroups)
    bmm             one batched GEMM over the groups: rows viewed as (groups, rows, in), baddbmm
    matmul_channels channel-first layouts only: the reply's stacked-weight matmul, no activation copy
    einsum          einsum("mgk,gok->mgo"): permutes and views into one bmm
    block_diagonal  one plain GEMM with a block-diagonal weight: groups× the FLOPs, one launch
    conv            grouped Conv1d with kernel_size=1 (the thread's other attempt)
    grouped_mm      torch.nn.functional.grouped_mm (torch._grouped_mm before), where it runs
    vmap            torch.func.vmap over F.linear (the thread's update)

`strategy="auto"` times the available strategies once per (device, dtype, shape, training or
not) on the reader's machine with the course harness (`timing.measure`), keeps the fastest in
a process-wide cache, and reuses it; `explain()` returns what it saw, and says when the machine
looked busy while it tuned. Tuning measures the steady state (every strategy is called untimed
first, each over the weight in its own memory order), times every strategy in two passes of
opposite order and keeps each one's faster pass (a burst of load seldom hits the same strategy
twice), always times the usual winners (`ALWAYS_TIME`) whatever the budget, and re-times the
near-ties in short alternating paired rounds (`noise.compare`), the winner being the one whose
median paired ratio beats every other's (a round's two sides are timed moments apart, so they
see the same machine). A repeated input signature skips even
the cache lookup (a small layer pays the dispatch on every call). It ranks by each measurement's fastest
sample (`Timing.least`): on a busy machine noise only adds time. Under
`torch.compile` or on `meta` (an op trace) it never times anything: it uses the cached choice,
or `bmm`.

TF32: on a GPU with TF32 tensor cores, PyTorch's defaults run the `conv` strategy's float32 work in TF32
(cuDNN) and the GEMM strategies' in full float32 (cuBLAS), so there auto compares a 10-bit-mantissa Conv1d
with full-precision GEMMs; `explain()` marks each strategy that ran in TF32. Pass `strategy=` (or set
`torch.backends.cudnn.conv.fp32_precision = "ieee"`, torch 2.9+) where that precision matters.

Which file holds what:

- strategies.py  the strategy functions (loop, bmm, matmul_channels, einsum, block_diagonal, conv, grouped_mm,
                 vmap), FUNCTIONS, and the weight's memory order each reads fastest (LAYOUT, layout_of, laid_out)
- features.py    where each strategy can run: grouped_mm_problem, problem, available
- tuning.py      strategy="auto": the tuning constants, Choice, the process-wide cache, tune
- module.py      class GroupedLinear

Below: every name used as `GL.<name>` or imported from `lessons_lib.grouped_linear` in the course (lesson 03,
its notebooks, the tests). A test that patches a value patches it where it is read (`tuning`, `module`).
"""
from __future__ import annotations

from .features import available, grouped_mm_problem, problem  # noqa: F401
from .module import GroupedLinear  # noqa: F401
from .strategies import (  # noqa: F401
    FUNCTIONS, LAYOUT, STRATEGIES, block_diagonal, bmm, conv, einsum, grouped_mm, laid_out, layout_of, loop,
    matmul_channels, vmap,
)
from .tuning import (  # noqa: F401
    ALWAYS_TIME, FALLBACK, TIMING_ORDER, TUNE_BLOCK_S, TUNE_BUDGET_S, Choice, _busy, _time_strategies, cache, cached_strategies,
    clear_cache, tune,
)

__all__ = ["GroupedLinear", "STRATEGIES", "FUNCTIONS", "Choice", "tune", "available", "problem",
           "grouped_mm_problem", "clear_cache", "cache", "cached_strategies", "loop", "bmm", "matmul_channels", "einsum",
           "block_diagonal", "conv", "grouped_mm", "vmap"]
