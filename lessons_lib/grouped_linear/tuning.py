"""strategy="auto": time the strategies once per shape on this machine, keep the fastest in a process-wide cache."""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import torch

from .. import noise, timing
from ..display import count
from ..trace import tf32_enabled
from .features import problem
from .strategies import _any_autocast, _autocast_on, _compute_dtype, _norm_dim, FUNCTIONS, laid_out, STRATEGIES


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
MAX_FINALISTS = 3  # near-ties re-timed in paired rounds (the noise rule's 10 short rounds at least: keep it small)
TUNE_BLOCK_S = 5e-4  # seconds per sample while tuning: short enough that a busy machine's scheduler
# leaves most samples whole, so each strategy's fastest sample is its undisturbed speed (timing.measure)
FINAL_ROUND_S = 2e-3  # seconds per finalist per paired round: neighbours in time see the same machine. With
# 10 ms a side, a busy machine's slow and fast spells fell on one side of a round (ratios spread 106%) and
# once ranked einsum 1.29x ahead of a channels-first matmul that ran 1.6x faster (4 groups of 32, training)
BUSY_SPREAD = 0.25  # rounds whose ratios spread more than this, or a load average above the cores: "busy"
FALLBACK = "bmm"  # what auto uses where it cannot time (inside torch.compile)


# --- auto-tuning ------------------------------------------------------------------------------------


@dataclass
class Choice:
    """What auto-tuning saw for one key: every strategy's time (or why it was not timed). Each time is the
    least-disturbed sample (`Timing.least`; for the near-ties after their paired rounds, the leader's, and the
    others as that times their median paired ratio to it): on a
    busy machine noise only adds time, so the fastest sample ranks strategies best."""

    key: tuple
    strategy: str
    medians: dict[str, float] = field(default_factory=dict)  # seconds per call
    skipped: dict[str, str] = field(default_factory=dict)  # strategy -> why not timed
    seconds: float = 0.0  # time the tuning took, timing included
    noisy: list[str] = field(default_factory=list)
    busy: str = ""  # why the machine looked busy while tuning ("" when it did not)
    rounds: int = 0  # paired rounds of the near-ties (what `medians` holds for them comes from those rounds)
    undecided: list[str] = field(default_factory=list)  # near-ties the noise rule did not put behind `strategy`
    tf32: list[str] = field(default_factory=list)  # strategies whose float32 work ran in TF32 while timed

    def describe(self) -> str:
        dev, dtype, G, K, O, rows, tail, training, bias = self.key
        head = (f"{dev}, {dtype}, groups={G}, in={K}, out={O}, rows≈{rows}"
                f"{', channel-first' if tail else ''}, {'training step' if training else 'forward'}"
                f"{'' if bias else ', no bias'}: picked {self.strategy!r} (tuning took {self.seconds:.2f} s)")
        lines = [head]
        best = min(self.medians.values()) if self.medians else float("nan")
        for s, m in sorted(self.medians.items(), key=lambda kv: kv[1]):
            flag = ("  TF32" if s in self.tf32 else "") + ("  ⚠ noisy" if s in self.noisy else "")
            lines.append(f"  {s:<16}{timing.fmt_time(m):>10}  {m / best:5.2f}× the fastest{flag}")
        for s, why in self.skipped.items():
            lines.append(f"  {s:<16}  not timed: {why}")
        if self.rounds:
            lines.append(f"  (times: each strategy's fastest sample; near-ties: from the paired ratios over "
                         f"{self.rounds} paired rounds in alternating order)")
        if self.undecided:
            lines.append(f"  not decided by the noise rule: {', '.join(self.undecided)} may be as fast as "
                         f"{self.strategy!r} (its lead is within the rounds' interval; either choice is as good)")
        if self.tf32:
            lines.append(f"  TF32: {', '.join(self.tf32)} ran float32 work in TF32 here (10-bit mantissa; "
                         f"{_TF32_WHY}): faster, not as exact as the others")
        if self.busy:
            lines.append(f"  ⚠ the machine looked busy while tuning ({self.busy}): the choice may be off. "
                         "Tune again when it is quieter (GL.clear_cache()), or pass strategy=...")
        return "\n".join(lines)


_CACHE: dict[tuple, Choice] = {}
_EXACT: dict[tuple, Choice] = {}  # exact input signature -> its Choice (a fast path into _CACHE)


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
        t = timing.measure(calls[name], label=name, min_run_time=min(0.02, share / 4), warmup=1, min_samples=8,
                           max_time=share, block=TUNE_BLOCK_S, device=x.device)  # a closure: say where it runs
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


def _paired_leader(cmp, names: list[str]) -> str | None:
    """The finalist faster than every other in the median of their paired per-round ratios (the noise rule's
    own statistic: each round's two sides were timed moments apart); None where none is (a cycle)."""
    for n in sorted(names, key=cmp.median):
        if all(cmp.ratio(n, m).median <= 1.0 for m in names if m != n):
            return n
    return None


_TF32_WHY = "cuDNN's default for convolutions; cuBLAS's for GEMMs only when turned on"


def _tf32_strategies(device: torch.device, dtype: torch.dtype, names) -> list[str]:
    """The strategies whose float32 work runs in TF32 on this device now: a CUDA GPU with TF32 (compute
    capability 8.0+), 'conv' while cuDNN may (its default), the GEMM strategies while cuBLAS may."""
    if device.type != "cuda" or dtype != torch.float32 or torch.cuda.get_device_capability(device) < (8, 0):
        return []
    conv, gemm = tf32_enabled("conv"), tf32_enabled("matmul")
    return [n for n in names if (conv if n == "conv" else gemm)]


def _busy(spread: float, noisy: int, timed: int) -> str:
    """Why the machine looked busy while tuning, or "": the near-ties' paired rounds disagreed, the
    harness flagged half the measurements noisy, or the load average was above the core count."""
    why = []
    if spread > BUSY_SPREAD:
        why.append(f"the near-ties' paired rounds spread {min(spread, 99.99):.0%}")
    if timed and noisy * 2 >= timed:
        why.append(f"{noisy} of {count(timed, 'measurement')} noisy")
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
        if load > cores:
            why.append(f"load average {load:.1f} on {count(cores, 'core')}")
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
    rounds, spread, undecided = 0, 0.0, []
    lead = None
    if len(finalists) > 1 and left > 0:
        calls = _calls(finalists, x, weight, bias, dim, training)
        # the noise rule's looks; the choice is made whatever they decide (auto must pick one), and says so
        cmp = noise.compare(calls, max_time=left, statistic="least", block=TUNE_BLOCK_S,
                            min_run_time=FINAL_ROUND_S, device=x.device)
        rounds = len(cmp.rounds[finalists[0]])
        lead = _paired_leader(cmp, finalists) or min(finalists, key=cmp.median)  # (or: a cycle)
        undecided = [n for n in finalists if n != lead and cmp.ratio(n, lead).faster != lead]
        # One scale for the whole table: the leader keeps its time from the looks (the others' too were
        # taken that way), the other finalists are that times their median paired ratio to it (what
        # decided). A round's few 2 ms samples give a larger "least" than a look's many.
        base = medians[lead]
        medians.update({n: base * max(cmp.ratio(n, lead).median, 1.0) for n in finalists if n != lead})
        spread = max((cmp.ratio(n, lead).spread for n in finalists if n != lead), default=0.0)
    best = lead or min(medians, key=medians.get)
    choice = Choice(key, best, medians, skipped, time.perf_counter() - t0, noisy,
                    _busy(spread, len(noisy), len(medians)), rounds, undecided,
                    _tf32_strategies(x.device, dtype, medians))
    if strategies is None:
        _CACHE[key] = _EXACT[exact] = choice
    return choice


_COMPILING = getattr(getattr(torch, "compiler", None), "is_compiling", None) or getattr(
    torch._dynamo, "is_compiling", lambda: False)


def _is_compiling() -> bool:
    return bool(_COMPILING())
