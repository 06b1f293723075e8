"""The noise rule: a sentence that a measurement decides is printed only when the measurement decides it.

On a busy machine one variant can be timed in a quiet moment and the next in a storm, and a single pass
then "finds" 90× where there is 3×. Every sentence in the course that states a winner, a ratio, an
exponent or a regime from a measurement goes through this module:

1. **Paired rounds.** Each round times every variant once with the one harness (`timing.measure`), in
   alternating order (as listed, then reversed). A drift that lasts a round hits both sides of a ratio,
   and the per-round ratio cancels it. The ratio is the median of the per-round ratios.
2. **Decided or not.** A ratio is decided in either of two ways:
   - *its rounds agree*: the inter-quartile range of the per-round ratios is at most `RATIO_SPREAD` of
     their median (the ratio's size is known to within that);
   - *the gap is far larger than its spread* (`Ratio.far`), judged in log space, where a ratio and its
     inverse are the same distance from 1: every round points the same way, the whole IQR lies beyond
     the tie band (below 1 - `TIE` or above 1 + `TIE`), and the median's distance from 1, |log median|,
     is at least `EFFECT` times the IQR's width, log(q3 / q1). If the per-round log ratios scatter like a
     normal distribution, an IQR is 1.35 standard deviations, so a single round would have to fall more
     than 4 of them from its median to land on the other side of 1. So 26.9 µs against 5.72 ms with a 32%
     spread is decided (212×: in log space the IQR is a sixteenth of the gap); 1.3× with a 32% spread is not
     (the spread alone could make it). The sentence then gives the median; its IQR is `low`–`high`.
   A *winner* is decided when, in addition, the whole IQR lies on one side of 1 by more than `TIE`; a
   ratio decided but inside that band is a tie. A NaN in any round never decides.
3. **Re-measure, then say so.** When a needed ratio is not decided after `rounds`, more rounds are run
   (up to `MAX_ROUNDS`, within `max_time`). If it still is not decided, the sentence becomes
   ``not decided on this run (spread N%): rerun on a quieter machine``.

A number computed once per round (an exponent fitted from a small sweep, a measured overhead) goes
through `settle`, which repeats it until the values agree (`Estimate`).

    cmp = noise.compare({"loop": lambda: loop(x), "batched": lambda: batched(x)})
    print(cmp.say("loop", "batched", "the loop takes {r:.1f}× the batched time"))
    print(cmp.say_fastest("{name} is fastest, {r:.1f}× ahead of {runner_up}"))
    cmp = noise.compare_lesson(L.LESSON, params, device)       # each round is a `Lesson.run`
    est = noise.settle(lambda: fit_exponent(sweep_once()), abs_tol=0.1)
    print(est.say("time grows as width^{v:.2f}"))
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from . import timing
from .display import count

RATIO_SPREAD = 0.25  # IQR / median of the per-round ratios above this: the rounds disagree
TIE = 0.05  # a decided ratio within 5% of 1 is a tie, not a winner
EFFECT = 3.0  # a ratio is decided whatever its spread when |log median| ≥ EFFECT × log(q3 / q1) (see above)
ROUNDS = 5
MIN_ROUNDS = 3  # fewer rounds than this decide nothing, whatever the budget
MAX_ROUNDS = 15
NOT_DECIDED = "not decided on this run (spread {spread:.0%}): rerun on a quieter machine"
# the same for a figure read from a recorded file: its reader cannot rerun the recording
NOT_DECIDED_RECORDED = "not decided when recorded (spread {spread:.0%})"


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
        return _quartiles(self.values)[1]

    @property
    def low(self) -> float:
        return _quartiles(self.values)[0]

    @property
    def high(self) -> float:
        return _quartiles(self.values)[2]

    @property
    def spread(self) -> float:
        """IQR relative to the median (inf when the median is 0)."""
        m = abs(self.median)
        return (self.high - self.low) / m if m else float("inf")

    @property
    def far(self) -> bool:
        """Whether the value is far from what the sentence compares it with, whatever the spread. A plain
        estimate (an exponent, an overhead) states its value, so only its spread can decide it: False.
        `Ratio` overrides it: a gap far larger than its spread is decided."""
        return False

    @property
    def decided(self) -> bool:
        if self.lacking or not self.values or any(v != v for v in self.values):  # NaN never decides
            return False
        if self.abs_tol is not None and (self.high - self.low) / 2 <= self.abs_tol:
            return True
        return self.spread <= self.rel_tol or self.far

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
    """time(num) / time(den), one value per paired round (> 1: `num` is slower)."""

    num: str = ""
    den: str = ""

    @property
    def far(self) -> bool:
        """A gap far larger than its spread (the module's rule 2): every round on the same side of 1, the
        IQR beyond the tie band, and |log median| ≥ EFFECT × log(q3 / q1). Ratios of times are positive;
        a value ≤ 0 or NaN (a spread added past the median, a broken round) never decides this way."""
        vals = self.values
        if not vals or any(not v > 0 or v == math.inf for v in vals) or self.low <= 0:
            return False
        same_way = all(v > 1 for v in vals) or all(v < 1 for v in vals)
        beyond_tie = self.low > 1 + TIE or self.high < 1 - TIE
        width = math.log(self.high / self.low)
        return same_way and beyond_tie and abs(math.log(self.median)) >= EFFECT * width

    @property
    def tie(self) -> bool:
        return self.decided and self.low <= 1 + TIE and self.high >= 1 - TIE

    @property
    def faster(self) -> str | None:
        """The faster of the two, when decided and outside the tie band; else None."""
        if not self.decided or self.tie:
            return None
        return self.den if self.low > 1 else self.num if self.high < 1 else None

    def say(self, template: str, tie: str | None = None, recorded: bool = False, **extra) -> str:
        """`template` formatted with r (the median ratio), low, high, num and den; `tie` (same fields)
        instead when the ratio is decided but within `TIE` of 1; the not-decided sentence otherwise
        (recorded=True: a recorded file's, which says "when recorded" instead of "rerun")."""
        if not self.decided:
            return self.not_decided(recorded)
        fields = dict(r=self.median, v=self.median, low=self.low, high=self.high, num=self.num, den=self.den, **extra)
        if tie is not None and self.tie:
            if abs(self.median - 1) > TIE:  # the IQR reaches the band, the median does not: neither a tie nor a win
                return (f"no winner on this run: the rounds put it at {self.median:.2f}×, but their IQR "
                        f"({self.low:.2f}–{self.high:.2f}×) reaches within {TIE:.0%} of a tie"
                        + ("" if recorded else ": rerun on a quieter machine"))
            return tie.format(**fields)
        return template.format(**fields)


def from_timings(num: timing.Timing, den: timing.Timing) -> Ratio:
    """A ratio from two unpaired measurements: the median ratio, with the two spreads added (a
    conservative guess at how much it could move). When it is not decided, re-measure with `compare`."""
    r = num.median / den.median
    d = r * (num.spread + den.spread)  # three values whose IQR is r × (the two spreads added)
    return Ratio([r - d, r, r + d], num=num.label, den=den.label)


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
        """Every variant as `timing(name)`: what a table beside the rounds' sentences should print (`timings` holds
        the last round's, which can disagree with the sentence)."""
        return {n: self.timing(n) for n in self.names}

    def timing(self, name: str) -> timing.Timing:
        """`name` over the paired rounds as a Timing: the median and IQR of its per-round values (each round's
        median), the numbers to print beside a sentence the rounds decided; method and device from the last
        round's Timing."""
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
        """Each variant's median over the paired rounds, fastest first, then who is fastest: decided,
        a tie, or the not-decided sentence. What `print(noise.compare(...))` shows."""
        lines = [f"{n}: {timing.fmt_time(self.median(n))} per call (median of {count(len(self.rounds[n]), 'paired round')})"
                 for n in self.ranked()]
        if len(self.rounds) > 1:
            lines.append(self.say_fastest("{name} is fastest, {r:.2f}× ahead of {runner_up}",
                                          tie="{name} and {runner_up} tie (within the noise rule's band)"))
        return "\n".join(lines)

    def undecided(self, pairs=None) -> list[Ratio]:
        pairs = pairs or _adjacent(self)
        return [r for r in (self.ratio(a, b) for a, b in pairs) if not r.decided]


def _adjacent(cmp: Comparison) -> list[tuple[str, str]]:
    """The ratios a sentence usually needs: each variant against the fastest."""
    order = cmp.ranked()
    return [(n, order[0]) for n in order[1:]]


def _paired(measure_round: Callable[[list[str], bool, float | None], dict[str, timing.Timing]], names: list[str],
            rounds: int, max_rounds: int, max_time: float | None, pairs, statistic: str = "median") -> Comparison:
    """Rounds until the needed ratios are decided. With max_time, each measurement in a round gets a time limit
    (`timing.measure(max_time=)`): what is left, shared among the rounds still needed for the rule's minimum and
    the variants; a round past the minimum starts only when the rounds so far say it fits. A round cannot be
    shorter than a warm-up call and a timed call of each variant: when what is left cannot hold the minimum's
    rounds at that, the rounds stop and the comparison says it is not decided for lack of time."""
    start = time.perf_counter()
    per: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, timing.Timing] = {}
    least = min(rounds, MIN_ROUNDS)
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
        cmp = Comparison(per, elapsed, last)
        over = max_time is not None and elapsed + elapsed / r > max_time  # the next round would not fit
        if r < least or (r < rounds and not over):
            continue
        if r >= max_rounds or over or not cmp.undecided(pairs):
            return cmp


def compare(fns: dict[str, Callable[[], object]], *, rounds: int = ROUNDS, max_rounds: int = MAX_ROUNDS,
            min_run_time: float = 0.02, max_time: float | None = 8.0, pairs=None,
            statistic: str = "median", block: float | None = None, device=None,
            num_threads: dict[str, int] | None = None) -> Comparison:
    """Time zero-argument callables in paired, alternating rounds until the needed ratios are decided.

    pairs: the (num, den) ratios the sentence needs (default: each variant against the fastest); only
        these decide whether more rounds are run.
    max_time: a budget in seconds for the whole comparison: each measurement is limited to its share of
        what is left (see `_paired`), and no round starts past it; when the noise rule's minimum of
        rounds cannot fit, nothing is decided and the sentences say so.
    statistic: what each round keeps of each measurement: "median" (the time a reader's calls take), or
        "least" (its fastest sample, `Timing.least`: for ranking ways to do the same work on a machine
        whose noise only adds time).
    block: seconds per sample on a CPU (`timing.measure(block=...)`); with statistic="least" it ranks on
        a busy machine.
    device: where the callables run. They take no arguments, so the harness cannot read it from them:
        pass it (a GPU run is otherwise labelled and timed as "cpu").
    num_threads: CPU threads per variant (`timing.measure(num_threads=...)`); a variant not named gets
        torch's current count.
    """
    if len(fns) < 1:
        raise ValueError("compare() needs at least one variant.")

    def one_round(order, first, limit):
        return {n: timing.measure(fns[n], label=n, min_run_time=min_run_time,
                                  warmup=timing.WARMUP_CALLS if first else 1, min_samples=3, device=device,
                                  num_threads=(num_threads or {}).get(n), max_time=limit,
                                  **({"block": block} if block else {})) for n in order}

    return _paired(one_round, list(fns), rounds, max_rounds, max_time, pairs, statistic)


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


def settle(measure_once: Callable[[], float], *, rounds: int = 3, max_rounds: int = 9,
           rel_tol: float = RATIO_SPREAD, abs_tol: float | None = None, max_time: float | None = 8.0,
           ratio: bool = False) -> Estimate:
    """Call `measure_once` (one number per call: a fitted exponent, a ratio from one pass) until the values
    agree, at most `max_rounds` times and within `max_time` seconds.

    ratio: the values are ratios of two times: the result is a `Ratio`, so a gap far larger than its
        spread is decided too (and `tie` / `faster` apply)."""
    start = time.perf_counter()
    est = (Ratio if ratio else Estimate)([], rel_tol=rel_tol, abs_tol=abs_tol)
    while True:
        est.values.append(float(measure_once()))
        n, elapsed = len(est.values), time.perf_counter() - start
        if n < rounds:
            continue
        if est.decided or n >= max_rounds or (max_time is not None and elapsed + elapsed / n > max_time):
            return est
