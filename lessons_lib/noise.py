"""The noise rule: a sentence that a measurement decides is printed only when the measurement decides it.

On a busy machine one variant can be timed in a quiet moment and the next in a storm, and a single pass
then "finds" 90× where there is 3×. Every sentence in the course that states a winner, a ratio or a
checker's speed verdict from a measurement goes through this module:

1. **Paired rounds.** Each round times every variant once with the one harness (`timing.measure`), in
   alternating order (as listed, then reversed). A drift that lasts a round hits both sides of a ratio,
   and the per-round ratio cancels it. The ratio's point estimate, `Ratio.median`, is the median of the
   per-round ratios: the one number a sentence quotes and the table beside it prints.
2. **An interval, not a scatter.** How far the rounds scatter says little about how well their center is
   known: more rounds pin it down. So a ratio is judged by an interval for the center of its paired
   log-ratios (`Ratio.low`–`high`; `noise_interval`: from their signed ranks, distribution-free, unmoved by
   a few wild rounds). It is *decided* when the interval lies above or below 1 (`Ratio.faster`) or inside
   the tie band 1 ± `TIE` (`Ratio.tie`); otherwise the sentence says what was not decided and what to do.
3. **Looks fixed in advance.** Adding rounds until the result *looks* decided, and stopping there, lets
   chance decide: peek often enough and some stretch of noise looks like a winner. A comparison looks only
   at `LOOKS` (10 and 15 rounds), stopping at the first that decides what its sentence needs. Each look's
   interval misses with probability `ERROR_PER_LOOK` (half of `ALPHA`), so a winner is named where there is
   none at most `ALPHA` (1%) of the time, whatever the noise (tests check it by simulation, `noise_sim`;
   lesson 00 shows it). A time limit that cuts the rounds short makes that round the last look; one that
   leaves fewer than `MIN_ROUNDS` decides nothing, and says so.

`from_timings` (two unpaired measurements) gives a conservative interval from the two spreads, no error
rate: where it does not decide, re-measure with `compare`. A plain number (an exponent, an overhead:
`Estimate`, `settle`) states a value, not a winner: it is decided when its values agree (IQR within
`rel_tol` or `abs_tol`).

    cmp = noise.compare({"loop": lambda: loop(x), "batched": lambda: batched(x)})
    print(cmp.say("loop", "batched", "the loop takes {r:.1f}× the batched time"))
    print(cmp.say_fastest("{name} is fastest, {r:.1f}× ahead of {runner_up}"))
    cmp = noise.compare_lesson(L.LESSON, params, device)       # each round is a `Lesson.run`
    est = noise.settle(lambda: fit_exponent(sweep_once()), abs_tol=0.1)
    print(est.say("time grows as width^{v:.2f}"))
"""
from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from . import noise_interval, timing
from .display import count

ALPHA = 0.01  # over a whole comparison, the chance of naming a winner where there is none
LOOKS = (10, 15)  # the rounds at which a comparison may stop (fixed in advance: see the module's rule 3)
ERROR_PER_LOOK = ALPHA / len(LOOKS)  # each look's interval misses with at most this chance (two-sided)
LEVEL = f"{1 - ERROR_PER_LOOK:.1%}"  # how sentences name that interval: "99.5%"
TIE = 0.05  # an interval inside 1 ± 5% (in log space) is a tie, not a winner
ROUNDS = LOOKS[0]  # the first look
MIN_ROUNDS = LOOKS[0]  # fewer rounds than this decide nothing, whatever the budget
MAX_ROUNDS = LOOKS[-1]  # the last look
RATIO_SPREAD = 0.25  # a plain Estimate (not a ratio) whose values' IQR / median is above this is not decided
NOT_DECIDED = "not decided on this run (spread {spread:.0%}): rerun on a quieter machine"  # (a plain Estimate)
# the same for a figure read from a recorded file: its reader cannot rerun the recording
NOT_DECIDED_RECORDED = "not decided when recorded (spread {spread:.0%})"
RERUN = "rerun with more time or on a quieter machine"


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


@dataclass
class Estimate:
    """A number measured several times (one value per round): its median and how much the rounds agree."""

    values: list[float]
    rel_tol: float = RATIO_SPREAD  # decided when IQR / |median| ≤ rel_tol ...
    abs_tol: float | None = None  # ... or, when given, when IQR / 2 ≤ abs_tol (for numbers near 0, like exponents)
    lacking: str = ""  # why these values cannot decide anything, whatever they are (rounds the time limit cut)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return _quartiles(self.values)[0]

    @property
    def high(self) -> float:
        return _quartiles(self.values)[2]

    @property
    def spread(self) -> float:
        """The values' IQR relative to their median (inf when the median is 0): how much the rounds scatter."""
        q1, m, q3 = _quartiles(self.values)
        return (q3 - q1) / abs(m) if m else float("inf")

    @property
    def decided(self) -> bool:
        if self.lacking or not self.values or any(v != v for v in self.values):  # NaN never decides
            return False
        if self.abs_tol is not None and (self.high - self.low) / 2 <= self.abs_tol:
            return True
        return self.spread <= self.rel_tol

    def not_decided(self, recorded: bool = False) -> str:
        """The not-decided sentence; recorded=True for a figure read from a recorded file (no "rerun")."""
        if self.lacking:
            return f"not decided {'when recorded' if recorded else 'on this run'}: {self.lacking}"
        return (NOT_DECIDED_RECORDED if recorded else NOT_DECIDED).format(spread=min(self.spread, 99.99))

    def say(self, template: str, recorded: bool = False, **extra) -> str:
        """`template` formatted with v (the median), low and high, or the not-decided sentence."""
        if not self.decided:
            return self.not_decided(recorded)
        return template.format(v=self.median, low=self.low, high=self.high, **extra)


@dataclass
class Ratio(Estimate):
    """time(num) / time(den), one value per paired round (> 1: `num` is slower). `median` is the median of the
    per-round ratios; `low`–`high` is the interval for their center (`ERROR_PER_LOOK`, the module's rule 2)."""

    num: str = ""
    den: str = ""
    unpaired: float | None = None  # two unpaired measurements' spreads added (`from_timings`): median × (1 ± it)

    @property
    def interval(self) -> tuple[float, float]:
        """(low, high); (0, inf) where nothing can be said: too few rounds, a time limit cut them short, or a
        round that is not a positive, finite ratio of times (a broken round never decides)."""
        vals = self.values
        if self.lacking or not vals or any(not 0 < v < math.inf for v in vals):
            return 0.0, math.inf
        if self.unpaired is not None:
            m, s = self.median, self.unpaired
            return (max(m * (1 - s), 0.0), m * (1 + s)) if s == s else (0.0, math.inf)
        return _ratio_interval(tuple(vals))

    low = property(lambda self: self.interval[0])
    high = property(lambda self: self.interval[1])
    spread = property(lambda self: Estimate.spread.fget(self) if self.unpaired is None else self.unpaired)

    @property
    def decided(self) -> bool:
        """The interval is on one side of 1 (a winner) or inside the tie band (a tie), with the median in it."""
        low, high = self.interval
        m = self.median  # outside its own interval (beyond rounding: exp(log 3) is 3.0000000000000004): no sentence
        if not (low <= m * (1 + 1e-9) and m <= high * (1 + 1e-9)):
            return False
        return low > 1 or high < 1 or _in_band(low, high)

    @property
    def tie(self) -> bool:
        return self.decided and _in_band(*self.interval)

    @property
    def faster(self) -> str | None:
        """The faster of the two, when the interval is on one side of 1 and not a tie; else None."""
        if not self.decided or self.tie:
            return None
        return self.den if self.low > 1 else self.num

    def not_decided(self, recorded: bool = False) -> str:
        """What was not decided, and (live) what to do; recorded=True: "when recorded", no advice to rerun."""
        when = "when recorded" if recorded else "on this run"
        n = len(self.values)
        if self.lacking:
            return f"not decided {when}: {self.lacking}"
        if any(not 0 < v < math.inf for v in self.values):
            return f"not decided {when}: a round gave no usable time" + ("" if recorded else f": {RERUN}")
        if self.unpaired is None and n < MIN_ROUNDS and self.high == math.inf:
            return (f"not decided {when}: {count(n, 'paired round')}, and the noise rule needs {MIN_ROUNDS}"
                    + ("" if recorded else ": give it more time"))
        what = f"{count(n, 'paired round')} put it at" if self.unpaired is None else "the two spreads put it at"
        level = f" ({LEVEL} interval)" if self.unpaired is None else ""
        return (f"not decided {when}: {what} {self.low:.3g}–{self.high:.3g}×{level}, either side of 1"
                + ("" if recorded else f": {RERUN}"))

    def say(self, template: str, tie: str | None = None, recorded: bool = False, **extra) -> str:
        """`template` formatted with r (the median ratio), low, high (the interval), num and den; `tie` (same
        fields) instead when the ratio is a tie (the interval inside 1 ± `TIE`); the not-decided sentence
        otherwise (recorded=True: a recorded file's, which says "when recorded" instead of "rerun")."""
        if not self.decided:
            return self.not_decided(recorded)
        fields = dict(r=self.median, v=self.median, low=self.low, high=self.high, num=self.num, den=self.den, **extra)
        return (tie if tie is not None and self.tie else template).format(**fields)


def _in_band(low: float, high: float) -> bool:
    return low >= 1 / (1 + TIE) and high <= 1 + TIE


@functools.lru_cache(maxsize=512)
def _ratio_interval(values: tuple[float, ...]) -> tuple[float, float]:
    low, high = noise_interval.interval([math.log(v) for v in values], ERROR_PER_LOOK)
    return math.exp(low), math.exp(high)


def from_timings(num: timing.Timing, den: timing.Timing) -> Ratio:
    """Two unpaired measurements: the ratio of their medians, its interval that × (1 ± the two spreads added).
    A conservative guess with no error rate: where it does not decide, re-measure with `compare`."""
    return Ratio([num.median / den.median], num=num.label, den=den.label, unpaired=num.spread + den.spread)


@dataclass
class Comparison:
    """Per-variant medians of each paired round, and the ratios between them."""

    rounds: dict[str, list[float]]  # variant -> its median time (s) in each round
    seconds: float = 0.0  # wall time spent measuring
    timings: dict[str, timing.Timing] = field(default_factory=dict, repr=False)  # last round's Timing per variant
    lacking: str = ""  # set when max_time stopped the rounds short of the rule's minimum: then nothing is decided

    @property
    def names(self) -> list[str]:
        return list(self.rounds)

    def median(self, name: str) -> float:
        return statistics.median(self.rounds[name])

    def ratio(self, num: str, den: str) -> Ratio:
        return Ratio([a / b for a, b in zip(self.rounds[num], self.rounds[den])], num=num, den=den,
                     lacking=self.lacking)

    def over_rounds(self) -> dict[str, timing.Timing]:
        """Every variant as `timing(name)`: what a table beside the rounds' sentences prints (not `timings`)."""
        return {n: self.timing(n) for n in self.names}

    def timing(self, name: str) -> timing.Timing:
        """`name` over the paired rounds as a Timing: the median and IQR of its per-round values, to print beside
        a sentence the rounds decided; method and device from the last round's Timing."""
        last = self.timings[name]
        values = list(self.rounds[name])
        med = statistics.median(values)
        q1, _m, q3 = _quartiles(values)
        return dataclasses.replace(last, median=med, iqr=q3 - q1, samples=values,
                                   method=f"{last.method}, median of {count(len(values), 'paired round')}")

    def say(self, num: str, den: str, template: str, tie: str | None = None, **extra) -> str:
        return self.ratio(num, den).say(template, tie=tie, **extra)

    def ranked(self) -> list[str]:
        return sorted(self.names, key=self.median)

    def fastest(self) -> str | None:
        """The fastest variant, when its lead over the runner-up is decided; else None."""
        order = self.ranked()
        if len(order) == 1:
            return order[0]
        return order[0] if self.ratio(order[1], order[0]).faster == order[0] else None

    def say_fastest(self, template: str, tie: str | None = None) -> str:
        """`template` with name, runner_up and r (runner-up's time over the fastest's); `tie` when the two
        are within `TIE`; the not-decided sentence otherwise."""
        order = self.ranked()
        if len(order) == 1:
            return template.format(name=order[0], runner_up="-", r=1.0)
        return self.ratio(order[1], order[0]).say(template, tie=tie, name=order[0], runner_up=order[1])

    def __str__(self) -> str:
        """Each variant's median over the rounds, fastest first, then who is fastest (or a tie, or not decided)."""
        lines = [f"{n}: {timing.fmt_time(self.median(n))} per call (median of {count(len(self.rounds[n]), 'paired round')})"
                 for n in self.ranked()]
        if len(self.rounds) > 1:
            lines.append(self.say_fastest("{name} is fastest, {r:.2f}× ahead of {runner_up}",
                                          tie="{name} and {runner_up} tie (within the noise rule's band)"))
        return "\n".join(lines)

    def undecided(self, pairs=None) -> list[Ratio]:
        """The needed ratios (`pairs`; by default each variant against the fastest) not decided yet."""
        order = self.ranked()
        pairs = pairs or [(n, order[0]) for n in order[1:]]
        return [r for r in (self.ratio(a, b) for a, b in pairs) if not r.decided]


def _looks(rounds: int, max_rounds: int) -> tuple[int, ...]:
    """The rounds a comparison looks at: `rounds` and `max_rounds` (by default `LOOKS`), neither below
    `MIN_ROUNDS`. Never more than two, so each look's `ERROR_PER_LOOK` keeps the whole within `ALPHA`."""
    first = max(rounds, MIN_ROUNDS)
    return tuple(sorted({first, max(max_rounds, first)}))


def _paired(measure_round: Callable[[list[str], bool, float | None], dict[str, timing.Timing]], names: list[str],
            rounds: int, max_rounds: int, max_time: float | None, pairs, statistic: str = "median",
            settled: Callable[[Comparison], bool] | None = None) -> Comparison:
    """Rounds up to each look (`_looks`), stopping at the first that decides the needed ratios (or `settled`).
    With max_time, each measurement gets a time limit (`timing.measure(max_time=)`): what is left, shared among
    the rounds still needed for the first look and the variants; past it a round starts only when the rounds
    so far say it fits, and the round where the next would not is the last look. A round takes at least a
    warm-up and a timed call of each variant: when what is left cannot hold the first look's rounds at that,
    the rounds stop and the comparison says it is not decided for lack of time."""
    looks = _looks(rounds, max_rounds)
    least = looks[0]
    start = time.perf_counter()
    per: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, timing.Timing] = {}
    r, floor = 0, 0.0  # rounds done; the least a round can take (two calls of each variant)
    while True:
        limit = None
        if max_time is not None:
            left = max_time - (time.perf_counter() - start)
            if r < least and r and left < (least - r) * floor:
                return Comparison(per, time.perf_counter() - start, last, lacking=(
                    f"the time limit ({max_time:g} s) left room for {r} of the {least} paired rounds the noise "
                    f"rule needs (each takes at least {timing.fmt_time(floor)}): give it more time"))
            limit = max(left, 0.0) / max(least - r, 1) / len(names)
        order = names if r % 2 == 0 else names[::-1]
        last = measure_round(order, r == 0, limit)
        for n in names:
            per[n].append(getattr(last[n], statistic))
        floor = sum(2 * last[n].median for n in names)
        r += 1
        elapsed = time.perf_counter() - start
        over = max_time is not None and elapsed + elapsed / r > max_time  # the next round would not fit
        if r < least or (r not in looks and not over):
            continue
        cmp = Comparison(per, elapsed, last)
        if r >= looks[-1] or over or (settled(cmp) if settled else not cmp.undecided(pairs)):
            return cmp


def compare(fns: dict[str, Callable[[], object]], *, rounds: int = ROUNDS, max_rounds: int = MAX_ROUNDS,
            min_run_time: float = 0.02, max_time: float | None = 8.0, pairs=None,
            statistic: str = "median", block: float | None = None, device=None,
            num_threads: dict[str, int] | None = None,
            settled: Callable[[Comparison], bool] | None = None) -> Comparison:
    """Time zero-argument callables in paired, alternating rounds, looking at `rounds` and `max_rounds` rounds
    (`LOOKS`; neither below `MIN_ROUNDS`) and stopping at the first look that decides the needed ratios.

    pairs: the (num, den) ratios the sentence needs (default: each variant against the fastest); only
        these decide whether to run on to the next look.
    settled: instead of `pairs`, a function of the Comparison at a look: True when the sentence's question is
        answered (a checker's bar, say: `grading.speed_check`). Stopping earlier or later never adds a look.
    max_time: seconds for the whole comparison: each measurement gets its share of what is left (`_paired`);
        when the first look's rounds cannot fit, nothing is decided and the sentences say so.
    statistic: what a round keeps of each measurement: "median" (the time a reader's calls take), or "least"
        (`Timing.least`: for ranking ways to do the same work on a machine whose noise only adds time).
    block: seconds per sample on a CPU (`timing.measure(block=...)`); with "least" it ranks on a busy machine.
    device: where the callables run (they take no arguments, so the harness cannot read it: pass it).
    num_threads: CPU threads per variant (`timing.measure(num_threads=...)`); others get torch's count.

    Each round calls `timing.measure` once per variant, looked up then: the seam where a test puts draws from a
    known distribution (`noise_sim.Draws`) to check the rule's error rates.
    """
    if len(fns) < 1:
        raise ValueError("compare() needs at least one variant.")

    def one_round(order, first, limit):
        return {n: timing.measure(fns[n], label=n, min_run_time=min_run_time,
                                  warmup=timing.WARMUP_CALLS if first else 1, min_samples=3, device=device,
                                  num_threads=(num_threads or {}).get(n), max_time=limit,
                                  **({"block": block} if block else {})) for n in order}

    return _paired(one_round, list(fns), rounds, max_rounds, max_time, pairs, statistic, settled)


def compare_lesson(lesson, params: dict, device=None, dtype=None, variants=None, *, rounds: int = ROUNDS,
                   max_rounds: int = MAX_ROUNDS, min_run_time: float = 0.02, max_time: float | None = 8.0,
                   pairs=None, statistic: str = "median", block: float | None = None) -> Comparison:
    """`compare` where each round is `lesson.run(params, ..., variants=order)`: the lesson makes its inputs
    and checks the shape fits, exactly as in its notebook. max_time as in `compare`: each round's
    `Lesson.run(max_time=)` is its variants' share of what is left."""
    import torch

    names = lesson.variant_names(variants)

    def one_round(order, first, limit):
        return lesson.run(params, device, dtype or torch.float32, variants=order, min_run_time=min_run_time,
                          max_time=limit, **({"block": block} if block else {})).timings

    return _paired(one_round, names, rounds, max_rounds, max_time, pairs, statistic)


def settle(measure_once: Callable[[], float], *, rounds: int | None = None, max_rounds: int | None = None,
           rel_tol: float = RATIO_SPREAD, abs_tol: float | None = None, max_time: float | None = 8.0,
           ratio: bool = False, settled: Callable[[Estimate], bool] | None = None) -> Estimate:
    """Call `measure_once` (one number per call: a fitted exponent, a ratio from one pass) until the values
    decide (or `settled(estimate)` says the question is answered), within `max_time` seconds.

    A plain value: at least `rounds` (3) and at most `max_rounds` (9) calls, until they agree (`Estimate`).
    ratio=True: each call is a paired round's ratio of two times: a `Ratio`, judged at the rule's looks (as in
        `compare`); a time limit that leaves fewer than `MIN_ROUNDS` decides nothing and says so."""
    looks = _looks(rounds or ROUNDS, max_rounds or MAX_ROUNDS) if ratio else (rounds or 3, max_rounds or 9)
    start = time.perf_counter()
    est = (Ratio if ratio else Estimate)([], rel_tol=rel_tol, abs_tol=abs_tol)
    while True:
        est.values.append(float(measure_once()))
        n, elapsed = len(est.values), time.perf_counter() - start
        over = max_time is not None and elapsed + elapsed / n > max_time  # the next call would not fit
        if ratio and n < looks[0] and over:
            est.lacking = (f"the time limit ({max_time:g} s) left room for {n} of the {looks[0]} rounds the noise "
                           "rule needs: give it more time")
            return est
        if n < looks[0] or (ratio and n not in looks and not over):
            continue
        if (settled(est) if settled else est.decided) or n >= looks[-1] or over:
            return est
