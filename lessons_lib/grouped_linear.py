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
near-ties in alternating paired rounds (`noise.compare`). A repeated input signature skips even
the cache lookup (a small layer pays the dispatch on every call). It ranks by each measurement's fastest
sample (`Timing.least`): on a busy machine noise only adds time. Under
`torch.compile` or on `meta` (an op trace) it never times anything: it uses the cached choice,
or `bmm`.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import noise, timing

STRATEGIES = ("loop", "bmm", "matmul_channels", "einsum", "block_diagonal", "conv", "grouped_mm", "vmap")
AUTO = "auto"
# The order tuning times them in: when a large shape spends the budget, what is left untimed is what
# rarely wins (a loop of G small GEMMs, or G× the FLOPs). A cold loop on 64 groups once used the
# budget before Conv1d, the winner there, was timed.
TIMING_ORDER = ("bmm", "matmul_channels", "conv", "einsum", "grouped_mm", "vmap", "loop", "block_diagonal")
# Timed whatever the budget: between them they won every point of lesson 03's CPU and GPU grids. On a
# loaded machine a budget spent on two strategies left auto's choice to chance (issue 19 §6).
ALWAYS_TIME = ("bmm", "matmul_channels", "conv", "einsum")
TUNE_BUDGET_S = 1.5  # seconds auto-tuning may spend on one new shape (the course's bar: 2 s on a CPU)
FIRST_LOOK = 0.6  # share of the budget for timing every strategy once; the rest re-times the near-ties
NEAR_TIE = 1.5  # a strategy within this factor of the fastest gets a second look (a burst of load on a
# shared machine can slow one 20 ms measurement by a third)
SECOND_LOOK = 3.0  # strategies within this factor of the fastest (and the usual winners) are timed twice
MAX_FINALISTS = 3  # near-ties re-timed in paired rounds (at least 3 rounds each: keep the count small)
BUSY_SPREAD = 0.25  # rounds whose ratios spread more than this, or a load average above the cores: "busy"
FALLBACK = "bmm"  # what auto uses where it cannot time (inside torch.compile)
MAX_BLOCK_DIAGONAL_BYTES = 256 * 2**20  # the block-diagonal weight is groups² × in × out: refuse beyond this


# --- layouts ------------------------------------------------------------------------------------


def _norm_dim(dim: int, ndim: int) -> int:
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim={dim} is out of range for an input with {ndim} dimension(s).")
    return dim % ndim


def _rows(x: torch.Tensor, dim: int, channels: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """x as (rows, channels): the channel dimension moved last and the others flattened.

    For the last dimension this is a view. For a channel-first layout (dim=1 of (N, C, L)) the
    moved tensor is not contiguous and `reshape` copies it: the layout copy a GEMM pays there."""
    d = _norm_dim(dim, x.dim())
    moved = x.movedim(d, -1) if d != x.dim() - 1 else x
    lead = tuple(moved.shape[:-1])
    return moved.reshape(-1, channels), lead


def _unrows(y: torch.Tensor, lead: tuple[int, ...], dim: int, ndim: int) -> torch.Tensor:
    """(rows, out_channels) back to the input's layout (a view; channel-first outputs are strided)."""
    y = y.reshape(*lead, y.shape[-1])
    d = _norm_dim(dim, ndim)
    return y.movedim(-1, d) if d != ndim - 1 else y


# --- the strategies: fn(x, weight, bias, dim) -> output; weight (G, O, K), bias (G, O) or None ---


def loop(x, weight, bias, dim=-1):
    """The thread's SlowGroups: one F.linear per group on a column slice, then one cat."""
    G, O, K = weight.shape
    rows, lead = _rows(x, dim, G * K)
    outs = [F.linear(rows[:, g * K:(g + 1) * K], weight[g], None if bias is None else bias[g]) for g in range(G)]
    return _unrows(torch.cat(outs, dim=-1), lead, dim, x.dim())


def bmm(x, weight, bias, dim=-1):
    """One batched GEMM: the rows viewed as (G, rows, K) (strided, no copy) times the weight as
    (G, K, O). With a bias it is `baddbmm`, which first copies the bias, expanded, into the output
    (on every backend) and then accumulates the GEMM into it (beta = 1): nothing is fused. The
    (G, rows, O) result is laid back as (rows, G·O), which copies once."""
    G, O, K = weight.shape
    rows, lead = _rows(x, dim, G * K)
    xg = rows.view(-1, G, K).transpose(0, 1)
    if bias is None:
        y = torch.bmm(xg, weight.transpose(1, 2))
    else:
        y = torch.baddbmm(bias.unsqueeze(1), xg, weight.transpose(1, 2))
    return _unrows(y.transpose(0, 1).reshape(-1, G * O), lead, dim, x.dim())


def matmul_channels(x, weight, bias, dim=-1):
    """The reply's MultichannelLinear, for channel-first layouts: x viewed as
    (leading, G, K, trailing) and multiplied by the stacked weight. matmul broadcasts the weight
    over the leading dimension (a copy of the weight per leading index), but the activations
    are only viewed, in and out."""
    G, O, K = weight.shape
    d = _norm_dim(dim, x.dim())
    if d == x.dim() - 1:
        raise ValueError("matmul_channels needs a channel-first layout (a dimension after the channels); "
                         "for channels last use 'bmm' or 'einsum'.")
    lead, tail = x.shape[:d], x.shape[d + 1:]
    x4 = x.reshape(math.prod(lead), G, K, math.prod(tail))
    y = torch.matmul(weight, x4)
    if bias is not None:
        y = y + bias.to(y.dtype).unsqueeze(-1)  # under autocast y is already in the autocast dtype
    return y.reshape(*lead, G * O, *tail)


def einsum(x, weight, bias, dim=-1):
    """einsum over (rows, G, K) and (G, O, K): it permutes and views both into one bmm."""
    G, O, K = weight.shape
    rows, lead = _rows(x, dim, G * K)
    y = torch.einsum("mgk,gok->mgo", rows.view(-1, G, K), weight)
    if bias is not None:
        y = y + bias.to(y.dtype)  # under autocast y is already in the autocast dtype
    return _unrows(y.reshape(-1, G * O), lead, dim, x.dim())


def block_diagonal(x, weight, bias, dim=-1):
    """One plain GEMM against a (G·O, G·K) block-diagonal weight: G× the FLOPs (the zeros are
    multiplied too) and the weight is rebuilt each call, but it is one launch and no layout copy."""
    G, O, K = weight.shape
    rows, lead = _rows(x, dim, G * K)
    y = F.linear(rows, torch.block_diag(*weight.unbind(0)), None if bias is None else bias.reshape(G * O))
    return _unrows(y, lead, dim, x.dim())


def conv(x, weight, bias, dim=-1):
    """Grouped Conv1d, kernel_size=1. A channel-first (N, C, L) or (C, L) input goes in as it
    is; any other layout is laid out as (rows, C, 1) first."""
    G, O, K = weight.shape
    w = weight.reshape(G * O, K, 1)
    b = None if bias is None else bias.reshape(G * O)
    d = _norm_dim(dim, x.dim())
    if x.dim() in (2, 3) and d == x.dim() - 2:
        return F.conv1d(x, w, b, groups=G)
    rows, lead = _rows(x, dim, G * K)
    y = F.conv1d(rows.unsqueeze(-1), w, b, groups=G).squeeze(-1)
    return _unrows(y, lead, dim, x.dim())


class _ContiguousGrad(torch.autograd.Function):
    """Identity forward; makes the incoming gradient dense. `grouped_mm`'s backward rejects the
    stride-0 gradient that `out.sum().backward()` sends."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return g.contiguous()


def grouped_mm(x, weight, bias, dim=-1):
    """torch.nn.functional.grouped_mm over (G, rows, K) @ (G, K, O): the 3-D × 3-D case, where every
    group has the same rows. Its `bias=` argument is rejected on every build, so the bias is added
    after. Where no fast kernel exists (a CPU, or a GPU its kernels do not cover) this case runs as
    one `bmm`; only the jagged case (2-D inputs with `offs=`) loops, and that loop reads the offsets
    on the host, a sync. See `grouped_mm_problem` for where it runs at all."""
    G, O, K = weight.shape
    fn = _grouped_mm_fn()
    dt = _compute_dtype(x, weight)  # not an autocast op: cast to what autocast would use
    x, weight = x.to(dt), weight.to(dt)
    bias = None if bias is None else bias.to(dt)
    rows, lead = _rows(x, dim, G * K)
    if rows.stride(-1) != 1 or (rows.stride(0) * rows.element_size()) % 16:
        rows = rows.contiguous()  # its kernels need unit column stride and 16-byte aligned rows
    xg = rows.view(-1, G, K).transpose(0, 1)
    y = _ContiguousGrad.apply(fn(xg, weight.transpose(1, 2)))
    if bias is not None:
        y = y + bias.unsqueeze(1)
    return _unrows(y.transpose(0, 1).reshape(-1, G * O), lead, dim, x.dim())


def vmap(x, weight, bias, dim=-1):
    """torch.func.vmap of F.linear over the group dimension: one bmm plus a few ops around it."""
    G, O, K = weight.shape
    dt = _compute_dtype(x, weight)  # vmap's batched linear would add the bias outside autocast
    x, weight = x.to(dt), weight.to(dt)
    bias = None if bias is None else bias.to(dt)
    rows, lead = _rows(x, dim, G * K)
    if bias is None:
        y = torch.func.vmap(lambda xi, wi: F.linear(xi, wi), in_dims=(1, 0), out_dims=1)(rows.view(-1, G, K), weight)
    else:
        y = torch.func.vmap(F.linear, in_dims=(1, 0, 0), out_dims=1)(rows.view(-1, G, K), weight, bias)
    return _unrows(y.reshape(-1, G * O), lead, dim, x.dim())


FUNCTIONS = {"loop": loop, "bmm": bmm, "matmul_channels": matmul_channels, "einsum": einsum,
             "block_diagonal": block_diagonal, "conv": conv, "grouped_mm": grouped_mm, "vmap": vmap}

# The weight's memory order each strategy reads fastest; its shape is (G, out, in) either way. "linear": (G, out,
# in) in memory, as nn.Linear holds it (matmul broadcasts and conv reshapes the weight in that order: from the
# other order each call pays a transposing copy). "gemm": (G, in, out) in memory, the batched GEMM's B operand,
# read without a transpose. Measured on an Intel Xeon, one thread, batch 4 × length 64: the other order cost
# matmul_channels up to 1.3× and conv 1.2×; bmm and einsum 1.25× at 64 groups of 8 (forward).
LAYOUT = {"loop": "linear", "matmul_channels": "linear", "conv": "linear", "block_diagonal": "linear",
          "vmap": "linear", "bmm": "gemm", "einsum": "gemm", "grouped_mm": "gemm"}


def layout_of(weight: torch.Tensor) -> str:
    """"gemm" if the (G, out, in) weight is stored (G, in, out) in memory, else "linear"."""
    return "gemm" if weight.transpose(1, 2).is_contiguous() and not weight.is_contiguous() else "linear"


def laid_out(weight: torch.Tensor, strategy: str) -> torch.Tensor:
    """`weight` (same shape and values) in the memory order `strategy` reads fastest: itself if it already is."""
    if LAYOUT[strategy] == "gemm":
        return weight if weight.transpose(1, 2).is_contiguous() else weight.transpose(1, 2).contiguous().transpose(1, 2)
    return weight if weight.is_contiguous() else weight.contiguous()


# --- feature detection ----------------------------------------------------------------------------

_probes: dict[tuple, str | None] = {}


def _grouped_mm_fn():
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def grouped_mm_problem(device, dtype, in_features: int | None = None, out_features: int | None = None,
                       training: bool = False) -> str | None:
    """Why the grouped_mm strategy cannot run here, in one sentence, or None where it can.

    Feature-detected by a tiny probe call (cached per device and dtype), never by version:
    the op must exist, accept this device and dtype, and (for training) run backward. Its
    kernels also need every row stride to be a multiple of 16 bytes, so in_features and
    out_features must be multiples of 16 / element size."""
    if _grouped_mm_fn() is None:
        return f"torch {torch.__version__} has neither torch.nn.functional.grouped_mm nor torch._grouped_mm."
    dev = torch.device(device)
    size = torch.empty(0, dtype=dtype).element_size()
    align = 16 // size if size < 16 else 1
    for name, n in (("in_features", in_features), ("out_features", out_features)):
        if n is not None and n % align:
            return (f"grouped_mm needs row strides that are multiples of 16 bytes: {name}={n} is not a multiple "
                    f"of {align} for {str(dtype).replace('torch.', '')}.")
    key = (dev.type, dev.index, dtype, training)
    if key not in _probes:
        _probes[key] = _probe_grouped_mm(dev, dtype, align, training)
    return _probes[key]


def _probe_grouped_mm(dev, dtype, align, training) -> str | None:
    if dev.type == "meta":
        return "grouped_mm is not traced on meta (its meta kernel assumes bf16 on a GPU)."
    try:
        a = torch.zeros(2, 3, align, device=dev, dtype=dtype, requires_grad=training)
        b = torch.zeros(2, align, align, device=dev, dtype=dtype, requires_grad=training)
        out = _ContiguousGrad.apply(_grouped_mm_fn()(a, b))
        if training:
            out.sum().backward()
    except Exception as err:  # the build, device or dtype does not support it: say which
        line = (str(err).strip().splitlines() or [""])[0][:160]
        return (f"grouped_mm does not run on {dev.type} in {str(dtype).replace('torch.', '')}"
                f"{' with backward' if training else ''} here ({type(err).__name__}: {line}).")
    return None


def problem(strategy: str, device, dtype, groups: int, in_features: int, out_features: int, channels_last: bool,
            training: bool = False) -> str | None:
    """Why `strategy` cannot run for this layer and input here, or None if it can."""
    if strategy == "matmul_channels" and channels_last:
        return "matmul_channels needs a channel-first layout (a dimension after the channels)."
    if strategy == "grouped_mm":
        return grouped_mm_problem(device, dtype, in_features, out_features, training)
    if strategy == "block_diagonal":
        nbytes = groups * groups * in_features * out_features * torch.empty(0, dtype=dtype).element_size()
        if nbytes > MAX_BLOCK_DIAGONAL_BYTES:
            return (f"block_diagonal would build a {groups * out_features} × {groups * in_features} weight "
                    f"({nbytes / 2**20:.0f} MiB) every call.")
    return None


def available(device, dtype, groups: int, in_features: int, out_features: int, channels_last: bool = True,
              training: bool = False) -> dict[str, str | None]:
    """{strategy: None if it can run here, else why not}."""
    return {s: problem(s, device, dtype, groups, in_features, out_features, channels_last, training)
            for s in STRATEGIES}


# --- auto-tuning ------------------------------------------------------------------------------------


@dataclass
class Choice:
    """What auto-tuning saw for one key: every strategy's time (or why it was not timed). Each time is the
    least-disturbed sample (`Timing.least`; for near-ties the median of that over paired rounds): on a
    busy machine noise only adds time, so the fastest sample ranks strategies best."""

    key: tuple
    strategy: str
    medians: dict[str, float] = field(default_factory=dict)  # seconds per call
    skipped: dict[str, str] = field(default_factory=dict)  # strategy -> why not timed
    seconds: float = 0.0  # time the tuning took, timing included
    noisy: list[str] = field(default_factory=list)
    busy: str = ""  # why the machine looked busy while tuning ("" when it did not)
    rounds: int = 0  # paired rounds of the near-ties (their medians are what `medians` holds for them)

    def describe(self) -> str:
        dev, dtype, G, K, O, rows, tail, training, bias = self.key
        head = (f"{dev}, {dtype}, groups={G}, in={K}, out={O}, rows≈{rows}"
                f"{', channel-first' if tail else ''}, {'training step' if training else 'forward'}"
                f"{'' if bias else ', no bias'}: picked {self.strategy!r} (tuning took {self.seconds:.2f} s)")
        lines = [head]
        best = min(self.medians.values()) if self.medians else float("nan")
        for s, m in sorted(self.medians.items(), key=lambda kv: kv[1]):
            flag = "  ⚠ noisy" if s in self.noisy else ""
            lines.append(f"  {s:<16}{timing.fmt_time(m):>10}  {m / best:5.2f}× the fastest{flag}")
        for s, why in self.skipped.items():
            lines.append(f"  {s:<16}  not timed: {why}")
        if self.rounds:
            lines.append(f"  (times: each strategy's fastest sample; near-ties: the median of that over "
                         f"{self.rounds} paired rounds in alternating order)")
        if self.busy:
            lines.append(f"  ⚠ the machine looked busy while tuning ({self.busy}): the choice may be off. "
                         "Tune again when it is quieter (GL.clear_cache()), or pass strategy=...")
        return "\n".join(lines)


_CACHE: dict[tuple, Choice] = {}
_EXACT: dict[tuple, Choice] = {}  # exact input signature -> its Choice (a fast path into _CACHE)


# One query for "is autocast on for any device" (~0.1 µs) where torch has it, instead of one per device type.
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _autocast_on(device_type: str) -> bool:
    if device_type not in ("cpu", "cuda"):
        return False  # meta (the op traces): no autocast there
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # older torch: no device argument
        return torch.is_autocast_enabled() if device_type == "cuda" else torch.is_autocast_cpu_enabled()


_GENERATION = [0]  # bumped by clear_cache: a module's fast path (its last call's choice) is then stale


def clear_cache() -> None:
    """Forget every auto-tuned choice (the next call of each shape tunes again)."""
    _CACHE.clear()
    _EXACT.clear()
    _GENERATION[0] += 1


def cache() -> dict[tuple, Choice]:
    """The process-wide auto-tuning cache: {key: Choice}."""
    return dict(_CACHE)


def cached_strategies(device_type: str, groups: int, group_size: int, training: bool) -> list[str]:
    """The strategies auto chose for this device type, group count and square group size, one per
    cached shape (the cache key's layout stays in this module)."""
    return [c.strategy for (dev, _dtype, G, K, O, *_rest, train, _bias), c in _CACHE.items()
            if dev.split(":")[0] == device_type and (G, K, O) == (groups, group_size, group_size)
            and train == training]


def _bucket(n: int) -> int:
    """Row counts are cached by the next power of two: nearby batch sizes share a choice."""
    return 1 << max(n - 1, 0).bit_length()


def _compute_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    dev = x.device.type
    try:
        if torch.is_autocast_enabled(dev):
            return torch.get_autocast_dtype(dev)
    except (TypeError, RuntimeError, AttributeError):  # older torch: the one-argument forms are missing
        if dev == "cuda" and torch.is_autocast_enabled():
            return torch.get_autocast_gpu_dtype()
        if dev == "cpu" and torch.is_autocast_cpu_enabled():
            return torch.get_autocast_cpu_dtype()
    return torch.promote_types(x.dtype, weight.dtype)


def _time_strategies(names, x, weight, bias, dim, training: bool, budget: float,
                     ordered: bool = False) -> tuple[dict, list, dict]:
    """The course harness's median for each strategy on detached copies of these tensors, within
    `budget` seconds: (medians, noisy names, {strategy: why it was not timed}).

    They go in TIMING_ORDER: the usual winners first, the per-group loop (G kernels a call, slow
    exactly where timing it costs most) and block_diagonal last. block_diagonal is skipped when even
    an optimistic guess at its call (G× the FLOPs of the fastest so far, at twice its efficiency)
    would not fit three times into what is left; any strategy is skipped once the budget is spent.
    Neither can hide a winner that matters: a strategy that slow would lose anyway.
    The usual winners (`ALWAYS_TIME`) are timed even when the budget is spent, each with a short
    measurement: a budget spent by a slow moment must not leave the choice to chance.
    ordered=True: keep the order given, and no untimed first calls (already made)."""
    calls = _calls(names, x, weight, bias, dim, training)
    if not ordered:
        names = sorted(names, key=TIMING_ORDER.index)
    medians, noisy, skipped = {}, [], {}
    start = time.perf_counter()
    if not ordered:
        # Untimed calls first, two of each, so tuning measures the steady state it will be used in: in a
        # fresh process the first strategies timed paid for the process's first large allocations (page
        # faults until the allocator settles) and the thread pool's start, up to 9× their warm time.
        # The usual winners always; the others within a quarter of the budget.
        for name in names:
            if name == "block_diagonal":
                continue
            if name not in ALWAYS_TIME and time.perf_counter() - start > budget / 4:
                continue
            calls[name]()
            calls[name]()
    for i, name in enumerate(names):
        left = budget - (time.perf_counter() - start)
        must = name in ALWAYS_TIME
        if medians and left <= 0 and not must:
            skipped[name] = f"the tuning budget ({budget:g} s) was spent"
            continue
        if name == "block_diagonal" and medians:
            guess = weight.shape[0] * min(medians.values()) / 2
            if 3 * guess > left:
                skipped[name] = (f"{weight.shape[0]}× the FLOPs: at least ~{timing.fmt_time(guess)} a call, more "
                                 "than the tuning budget left")
                continue
        share = max(left / (len(names) - i), 0.01)
        t = timing.measure(calls[name], label=name, min_run_time=min(0.02, share / 4), warmup=1, min_samples=3,
                           max_time=share)
        medians[name] = t.least  # ranking ways to do the same work: noise only adds time (Timing.least)
        if t.noisy:
            noisy.append(name)
    return medians, noisy, skipped


def _calls(names, x, weight, bias, dim, training: bool) -> dict:
    """{strategy: a zero-argument call} on detached copies of these tensors: the forward under no_grad,
    or forward and backward from a dense incoming gradient."""
    xs = x.detach().requires_grad_(training and x.requires_grad)
    bs = None if bias is None else bias.detach().requires_grad_(training)
    if training:  # a dense incoming gradient, as a real loss gives: an expanded one (stride 0) sends
        d = _norm_dim(dim, x.dim())  # some backward GEMMs down slower paths and misranks strategies
        grad = torch.randn((*x.shape[:d], weight.shape[0] * weight.shape[1], *x.shape[d + 1:]),
                           device=x.device, dtype=_compute_dtype(x, weight))

    def make_call(name):
        fn = FUNCTIONS[name]
        # Each strategy over the weight in its own memory order (LAYOUT), as GroupedLinear will hold it.
        ws = laid_out(weight.detach(), name).detach().requires_grad_(training)
        leaves = [t for t in (xs, ws, bs) if t is not None and t.requires_grad]
        if training:
            def call():
                out = fn(xs, ws, bs, dim)
                return torch.autograd.grad(out, leaves, grad.to(out.dtype))
        else:
            def call():
                with torch.no_grad():
                    return fn(xs, ws, bs, dim)
        return call

    return {name: make_call(name) for name in names}


def _busy(spread: float, noisy: int, timed: int) -> str:
    """Why the machine looked busy while tuning, or "": the near-ties' paired rounds disagreed, the
    harness flagged half the measurements noisy, or the load average was above the core count."""
    why = []
    if spread > BUSY_SPREAD:
        why.append(f"the near-ties' paired rounds spread {min(spread, 99.99):.0%}")
    if timed and noisy * 2 >= timed:
        why.append(f"{noisy} of {timed} measurements noisy")
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
        if load > cores:
            why.append(f"load average {load:.1f} on {cores} cores")
    except (AttributeError, OSError):  # no load average on this OS
        pass
    return "; ".join(why)


def _planned(key: tuple) -> Choice:
    """What auto would run for `key` on a real device, without timing: the choice cached for the same
    shape on another device (the most recent), else the fallback. Used for traces on meta."""
    same = [c for k, c in _CACHE.items() if k[1:] == key[1:] and k[0] != "meta"]
    strategy = _traceable(same[-1].strategy if same else FALLBACK, "meta")
    why = f"traced on meta: the strategy {'auto chose on ' + same[-1].key[0] if same else 'it falls back to'}"
    return Choice(key, strategy, {}, {"(all)": why})


def _traceable(strategy: str, device_type: str) -> str:
    """A strategy a trace (meta, or Dynamo's fake tensors) can follow here. grouped_mm's meta kernel
    only accepts bf16 for a GPU, so off CUDA it is traced as `bmm`: the one batched GEMM that its
    3-D × 3-D fallback runs there (`_grouped_mm_fallback` in ATen's GroupedMMUtils.h)."""
    return FALLBACK if strategy == "grouped_mm" and device_type != "cuda" else strategy


def tune(x, weight, bias, dim: int = -1, training: bool | None = None, budget: float | None = None,
         strategies=None) -> Choice:
    """Time the strategies that can run for this input (or fetch the cached choice) and return it.

    budget: seconds for the timing (default TUNE_BUDGET_S); strategies: time only these (not cached)."""
    if training is None:
        training = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    # Exact inputs seen before: one dict lookup. This is the per-call cost of auto, which a small layer
    # pays on every call (at 20 µs a call, 1 µs is 5%), so the autocast query is skipped when none is on.
    exact = (x.shape, x.dtype, x.device, weight.shape, weight.dtype, dim, bias is None, bool(training),
             _compute_dtype(x, weight) if _any_autocast() and _autocast_on(x.device.type) else None)
    if strategies is None:
        hit = _EXACT.get(exact)
        if hit is not None:
            return hit
    budget = TUNE_BUDGET_S if budget is None else budget
    G, O, K = weight.shape
    dtype = _compute_dtype(x, weight)
    d = _norm_dim(dim, x.dim())
    channels_last = d == x.dim() - 1
    rows = x.numel() // max(x.shape[d], 1)
    key = (str(x.device), str(dtype).replace("torch.", ""), G, K, O, _bucket(rows),
           0 if channels_last else math.prod(x.shape[d + 1:]), bool(training), bias is not None)
    if key in _CACHE and strategies is None:
        _EXACT[exact] = _CACHE[key]
        return _CACHE[key]
    if x.device.type == "meta":  # an op trace: what auto would run, never a tuning run traced as work
        return _planned(key)
    t0 = time.perf_counter()
    names = list(strategies or STRATEGIES)
    skipped = {}
    for s in list(names):
        why = problem(s, x.device, dtype, G, K, O, channels_last, training)
        if why:
            skipped[s] = why
            names.remove(s)
    medians, noisy, over = _time_strategies(names, x, weight, bias, dim, training, FIRST_LOOK * budget)
    skipped.update({n: why.replace(f"({FIRST_LOOK * budget:g} s)", f"({budget:g} s)") for n, why in over.items()})
    # A second pass, in reverse order, over the usual winners and anything within SECOND_LOOK of the fastest,
    # each keeping its faster pass: a burst of load that slowed a strategy in the first pass seldom hits it
    # again, and a winner dropped by one burst is a wrong choice. Half of what is left; rounds get the rest.
    best = min(medians.values())
    second = [n for n in reversed(list(medians)) if n in ALWAYS_TIME or medians[n] <= SECOND_LOOK * best]
    again, noisy_again, _ = _time_strategies(second, x, weight, bias, dim, training,
                                             (budget - (time.perf_counter() - t0)) / 2, ordered=True)
    medians.update({n: min(m, medians[n]) for n, m in again.items()})
    noisy = [n for n in noisy if n not in again or n in noisy_again]
    # A second look at the near-ties, with what is left: on a busy machine one short measurement can
    # misrank two strategies within noise of each other. The noise rule's paired rounds (alternating
    # order, the median of each) replace their first-look medians.
    finalists = sorted((n for n, m in medians.items() if m <= NEAR_TIE * min(medians.values())),
                       key=medians.get)[:MAX_FINALISTS]
    left = budget - (time.perf_counter() - t0)
    rounds, spread = 0, 0.0
    if len(finalists) > 1 and left > 0:
        calls = _calls(finalists, x, weight, bias, dim, training)
        cmp = noise.compare(calls, rounds=3, max_rounds=7, max_time=left, statistic="least",
                            min_run_time=min(0.01, left / (6 * len(finalists)) + 1e-3))
        medians.update({n: cmp.median(n) for n in finalists})
        rounds = len(cmp.rounds[finalists[0]])
        lead = min(finalists, key=cmp.median)
        spread = max((cmp.ratio(n, lead).spread for n in finalists if n != lead), default=0.0)
    best = min(medians, key=medians.get)
    choice = Choice(key, best, medians, skipped, time.perf_counter() - t0, noisy,
                    _busy(spread, len(noisy), len(medians)), rounds)
    if strategies is None:
        _CACHE[key] = _EXACT[exact] = choice
    return choice


_COMPILING = getattr(getattr(torch, "compiler", None), "is_compiling", None) or getattr(
    torch._dynamo, "is_compiling", lambda: False)


def _is_compiling() -> bool:
    return bool(_COMPILING())


# --- the module ---------------------------------------------------------------------------------------


def _check_size(name: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"{name} must be a whole number, got {n!r}.")
    if n < 1:
        raise ValueError(f"{name} must be at least 1, got {n}.")
    return n


def _check_strategy(strategy) -> str:
    if strategy != AUTO and strategy not in STRATEGIES:
        raise ValueError(f"No strategy {strategy!r}: choose 'auto' or one of {', '.join(STRATEGIES)}.")
    return strategy


class GroupedLinear(nn.Module):
    """`groups` independent `nn.Linear(in_features, out_features)` layers applied side by side.

    Input (..., groups·in_features) along `dim` (default the last), output the same with
    groups·out_features there. Each group is initialised as `nn.Linear` initialises itself,
    in the order G separate Linears would (so a seeded GroupedLinear equals seeded Linears).

    strategy: "auto" (time once per shape here, cache, reuse) or one of `STRATEGIES`.
    """

    def __init__(self, groups: int, in_features: int, out_features: int, bias: bool = True,
                 strategy: str = AUTO, dim: int = -1, device=None, dtype=None):
        super().__init__()
        self.groups = _check_size("groups", groups)
        self.in_features = _check_size("in_features", in_features)
        self.out_features = _check_size("out_features", out_features)
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise ValueError(f"dim must be an integer (the channel dimension), got {dim!r}.")
        self.dim = dim
        self._strategy = _check_strategy(strategy)
        self._choices: dict[tuple, Choice] = {}
        self._sig, self._fn = None, None  # the last call's input signature and the function it ran
        kw = {"device": device, "dtype": dtype}
        # Shape (G, out, in) like G nn.Linears. Its memory order follows the strategy in use (LAYOUT): the
        # first call under "auto" lays it out for the strategy chosen; `to()`/`load_state_dict` keep it.
        self.weight = nn.Parameter(torch.empty(groups, out_features, in_features, **kw))
        self.bias = nn.Parameter(torch.empty(groups, out_features, **kw)) if bias else None
        self.reset_parameters()
        if self._strategy != AUTO:
            self._lay_out(self._strategy)

    # --- construction ---------------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """nn.Linear's initialisation, group by group (weight then bias, as G Linears would draw them)."""
        bound = 1 / math.sqrt(self.in_features)
        one = torch.empty(self.out_features, self.in_features, device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            for g in range(self.groups):  # drawn into an (out, in) Linear-shaped buffer: the same numbers
                nn.init.kaiming_uniform_(one, a=math.sqrt(5))  # as nn.Linear whatever the memory layout
                self.weight[g].copy_(one)
                if self.bias is not None:
                    nn.init.uniform_(self.bias[g], -bound, bound)

    @classmethod
    def for_channels(cls, in_channels: int, out_channels: int, groups: int, **kwargs) -> "GroupedLinear":
        """Sized like a grouped Conv1d: channels split evenly into `groups`."""
        for name, c in (("in_channels", in_channels), ("out_channels", out_channels)):
            _check_size(name, c)
        _check_size("groups", groups)
        for name, c in (("in_channels", in_channels), ("out_channels", out_channels)):
            if c % groups:
                raise ValueError(f"{name}={c} is not divisible by groups={groups}: every group needs the same width "
                                 f"(choose channels that are a multiple of {groups}).")
        return cls(groups, in_channels // groups, out_channels // groups, **kwargs)

    @classmethod
    def from_linears(cls, linears, strategy: str = AUTO, dim: int = -1) -> "GroupedLinear":
        """One GroupedLinear computing what `linears` compute on consecutive slices of the channels."""
        linears = list(linears)
        if not linears:
            raise ValueError("from_linears needs at least one nn.Linear.")
        first = linears[0]
        for i, lin in enumerate(linears):
            if not isinstance(lin, nn.Linear):
                raise ValueError(f"item {i} is a {type(lin).__name__}, not an nn.Linear.")
            if (lin.in_features, lin.out_features) != (first.in_features, first.out_features):
                raise ValueError(f"Linear {i} is {lin.in_features} → {lin.out_features} but Linear 0 is "
                                 f"{first.in_features} → {first.out_features}: every group must have the same shape.")
            if lin.weight.dtype != first.weight.dtype or lin.weight.device != first.weight.device:
                raise ValueError(f"Linear {i} is {lin.weight.dtype} on {lin.weight.device} but Linear 0 is "
                                 f"{first.weight.dtype} on {first.weight.device}: convert them to one dtype and device.")
            if (lin.bias is None) != (first.bias is None):
                raise ValueError(f"Linear {i} {'has no' if lin.bias is None else 'has a'} bias and Linear 0 "
                                 f"{'has none' if first.bias is None else 'has one'}: all or none must have a bias.")
        out = cls(len(linears), first.in_features, first.out_features, bias=first.bias is not None,
                  strategy=strategy, dim=dim, device=first.weight.device, dtype=first.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(torch.stack([lin.weight for lin in linears]))
            if out.bias is not None:
                out.bias.copy_(torch.stack([lin.bias for lin in linears]))
        return out

    def to_linears(self) -> nn.ModuleList:
        """The G separate nn.Linear layers (copies of the parameters)."""
        out = nn.ModuleList()
        for g in range(self.groups):
            lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                            device=self.weight.device, dtype=self.weight.dtype)
            with torch.no_grad():
                lin.weight.copy_(self.weight[g])
                if self.bias is not None:
                    lin.bias.copy_(self.bias[g])
            out.append(lin)
        return out

    @classmethod
    def from_conv1d(cls, conv: nn.Conv1d, strategy: str = AUTO) -> "GroupedLinear":
        """The same function as a grouped `nn.Conv1d` with kernel_size=1 (channel-first, dim=-2)."""
        if not isinstance(conv, nn.Conv1d):
            raise ValueError(f"from_conv1d needs an nn.Conv1d, got {type(conv).__name__}.")
        bad = {k: v for k, v in (("kernel_size", conv.kernel_size), ("stride", conv.stride),
                                 ("dilation", conv.dilation)) if tuple(v) != (1,)}
        if isinstance(conv.padding, str):
            if conv.padding not in ("valid", "same"):
                bad["padding"] = conv.padding
        elif tuple(conv.padding) != (0,):
            bad["padding"] = conv.padding
        if bad:
            raise ValueError(f"Only a pointwise Conv1d (kernel_size=1, stride=1, dilation=1, padding=0) is a grouped "
                             f"Linear; this one has {bad}.")
        G = conv.groups
        out = cls(G, conv.in_channels // G, conv.out_channels // G, bias=conv.bias is not None, strategy=strategy,
                  dim=-2, device=conv.weight.device, dtype=conv.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(conv.weight.reshape(G, conv.out_channels // G, conv.in_channels // G))
            if out.bias is not None:
                out.bias.copy_(conv.bias.reshape(G, -1))
        return out

    def to_conv1d(self) -> nn.Conv1d:
        """A grouped pointwise nn.Conv1d computing the same (for channel-first inputs)."""
        G, O, K = self.weight.shape
        conv = nn.Conv1d(G * K, G * O, 1, groups=G, bias=self.bias is not None, device=self.weight.device,
                         dtype=self.weight.dtype)
        with torch.no_grad():
            conv.weight.copy_(self.weight.reshape(G * O, K, 1))
            if self.bias is not None:
                conv.bias.copy_(self.bias.reshape(-1))
        return conv

    @classmethod
    def from_slow_groups(cls, module: nn.Module, strategy: str = AUTO) -> "GroupedLinear":
        """The thread's SlowGroups (a ModuleList `projs` of Linears over chunks of dim -2)."""
        projs = getattr(module, "projs", None)
        if projs is None:
            raise ValueError(f"{type(module).__name__} has no `projs` ModuleList of nn.Linear (the thread's SlowGroups).")
        return cls.from_linears(list(projs), strategy=strategy, dim=-2)

    # --- strategy ---------------------------------------------------------------------------------------
    @property
    def strategy(self) -> str:
        return self._strategy

    @strategy.setter
    def strategy(self, name: str) -> None:
        self._strategy = _check_strategy(name)
        self._sig = self._fn = None
        if name != AUTO:
            self._lay_out(name)

    def _lay_out(self, strategy: str) -> None:
        """Store the weight in the memory order `strategy` reads fastest (same Parameter, same values; an
        optimizer holding it is unaffected). Only when it changes: once per new strategy, not per call."""
        if layout_of(self.weight) != LAYOUT[strategy]:
            with torch.no_grad():
                self.weight.data = laid_out(self.weight.data, strategy)

    def strategy_for(self, x: torch.Tensor) -> str:
        """The strategy a call on `x` uses (tuning first, under "auto", if this shape is new)."""
        if self._strategy != AUTO:
            return self._strategy
        if _is_compiling():
            return _traceable(next((c.strategy for c in self._choices.values()), FALLBACK), x.device.type)
        choice = tune(x, self.weight, self.bias, self.dim)
        if x.device.type != "meta":  # a trace on meta times nothing: nothing to explain
            self._choices[choice.key] = choice
        return choice.strategy

    def _check_input(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"GroupedLinear takes a tensor, got {type(x).__name__}.")
        if x.dim() == 0:
            raise ValueError("GroupedLinear needs at least one dimension (the channels).")
        d = _norm_dim(self.dim, x.dim())
        want = self.groups * self.in_features
        if x.shape[d] != want:
            raise ValueError(f"Input has {x.shape[d]} channels in dim {self.dim} (shape {tuple(x.shape)}); this layer "
                             f"expects groups × in_features = {self.groups} × {self.in_features} = {want}.")

    @staticmethod
    def _signature(x: torch.Tensor, weight: torch.Tensor) -> tuple:
        """What decides the strategy: the input, the weight's dtype, training or not, the tuning cache."""
        return (x.shape, x.dtype, x.device, weight.dtype, _GENERATION[0],
                torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Fast path: the same signature as the last call runs the same function. A small layer pays this on
        # every call (at 20 µs a call, 4 µs of checks and lookups would be 20%), so the parameters are read
        # from their dict (`self.weight` is a slower nn.Module attribute lookup). Not while torch.compile
        # traces, nor under autocast (its dtype is part of the choice).
        if self._fn is not None and not _is_compiling() and not _any_autocast():
            params = self._parameters
            weight = params["weight"]
            if self._signature(x, weight) == self._sig:
                return self._fn(x, weight, params.get("bias"), self.dim)
        self._check_input(x)
        name = self.strategy_for(x)
        if self._strategy != AUTO:  # an explicit strategy must run here, or say why not
            d = _norm_dim(self.dim, x.dim())
            why = problem(name, x.device, _compute_dtype(x, self.weight), self.groups, self.in_features,
                          self.out_features, d == x.dim() - 1, torch.is_grad_enabled() and
                          (x.requires_grad or self.weight.requires_grad))
            if why:
                ok = [s for s, p in available(x.device, _compute_dtype(x, self.weight), self.groups,
                                              self.in_features, self.out_features, d == x.dim() - 1).items()
                      if p is None]
                raise ValueError(f"Strategy {name!r} cannot run here: {why} Available: {', '.join(ok)} (or 'auto').")
        if x.device.type != "meta" and not _is_compiling():
            self._lay_out(name)
            if not _any_autocast():
                self._sig, self._fn = self._signature(x, self.weight), FUNCTIONS[name]
        return FUNCTIONS[name](x, self.weight, self.bias, self.dim)

    def explain(self) -> str:
        """What auto-tuning saw for the shapes this layer has met, and the weight's memory order (a report:
        `print(layer.explain())`)."""
        if self._strategy != AUTO:
            text = f"strategy {self._strategy!r} was chosen explicitly; nothing was timed."
        elif not self._choices:
            text = "strategy 'auto': no input seen yet; the first call on a new shape times the strategies."
        else:
            text = "\n".join(c.describe() for c in self._choices.values())
        order = "(G, in, out), the batched GEMM's" if layout_of(self.weight) == "gemm" else "(G, out, in), nn.Linear's"
        return f"{text}\nweight held in memory as {order} order"

    def extra_repr(self) -> str:
        return (f"groups={self.groups}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, strategy={self._strategy!r}, dim={self.dim}")


__all__ = ["GroupedLinear", "STRATEGIES", "FUNCTIONS", "Choice", "tune", "available", "problem",
           "grouped_mm_problem", "clear_cache", "cache", "cached_strategies", "loop", "bmm", "matmul_channels", "einsum",
           "block_diagonal", "conv", "grouped_mm", "vmap"]
