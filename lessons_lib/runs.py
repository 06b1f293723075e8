"""What `Lesson.run`, `.sweep` and `.calibrate` return, and the harness's time model.

`Run` and `Sweep` (timings, work, metrics), `metrics_table`, `crossover`; `Calibration`,
`timer_overhead` and `harness_seconds` (how long `timing.measure` takes on a call, step by step),
which the explorer's estimates stand on. Split from lesson.py (issue 21); lesson.py re-exports them.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field

import torch

from . import roofline, timing
from .display import text_table


@dataclass
class Run:
    lesson: str
    params: dict
    dtype: str
    device: str
    timings: dict[str, timing.Timing]
    work: dict[str, roofline.Work]
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # variant -> {"name (unit)": value}
    prepare_seconds: dict[str, float] = field(default_factory=dict)  # variant -> compile/capture cost, untimed
    paired: list[str] = field(default_factory=list)  # variants re-measured in paired rounds to decide the winner
    winner: str = ""  # the winner sentence (widgets.Explorer.decide), from these same timings

    def table(self, baseline: str | None = None) -> str:
        """The timings; the variants re-measured in paired rounds carry a *, and a line under the table says
        so (their first pass's numbers are not shown: the sentence and the table are one measurement)."""
        shown = [dataclasses.replace(t, label=f"{t.label} *") if n in self.paired else t
                 for n, t in self.timings.items()]
        base = f"{baseline} *" if baseline in self.paired else baseline
        text = timing.table(shown, base)
        if self.paired:
            rounds = len(self.timings[self.paired[0]].samples)
            names = [n for n in self.timings if n in self.paired]
            which = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
            rest = "; the others: one measurement each" if len(names) < len(self.timings) else ""
            text += (f"\n* {which}: median of {rounds} paired rounds, re-measured to decide the winner (their first "
                     f"timings did not decide it){rest}")
        return text

    def metrics_table(self) -> str:
        """The lesson's metrics (if it declares any), one variant a line; "" when there are none."""
        return metrics_table(self.metrics)

    def floors(self, peaks: roofline.Peaks) -> dict[str, float]:
        return {n: peaks.floor(self.work[n]) for n in self.timings}


@dataclass
class Sweep:
    lesson: str
    param: str
    values: list[int]  # the values measured (all of them, unless stopped)
    runs: list[Run]
    stopped: bool = False  # Stop ended it: `values` are the points finished before
    planned: list[int] | None = None  # every value asked for, when stopped

    def medians(self) -> dict[str, list[float]]:
        names = self.runs[0].timings.keys()
        return {n: [r.timings[n].median for r in self.runs] for n in names}

    def iqrs(self) -> dict[str, list[float]]:
        names = self.runs[0].timings.keys()
        return {n: [r.timings[n].iqr for r in self.runs] for n in names}

    def metric_series(self) -> dict[str, dict[str, list[float]]]:
        """{metric: {variant: one value per swept value}}; empty when the lesson has no metrics."""
        first = self.runs[0].metrics
        names = list(dict.fromkeys(m for per in first.values() for m in per))
        return {m: {v: [r.metrics[v][m] for r in self.runs] for v in first} for m in names}


def metrics_table(metrics: dict[str, dict[str, float]]) -> str:
    """{variant: {metric: value}} as a fixed-width table (values to 3 significant figures)."""
    if not metrics:
        return ""
    names = list(dict.fromkeys(m for per in metrics.values() for m in per))
    rows = [("variant", *names)]
    rows += [(v, *(f"{per[m]:.3g}" if m in per else "-" for m in names)) for v, per in metrics.items()]
    return text_table(rows, numbers=True)


CALIBRATION_FLOOR = 0.02  # seconds: a variant's floor at its first calibration shape
CALIBRATION_CALL = 0.1  # seconds: calibration also times the asked shape when a call there is predicted under this
CALIBRATION_CALLS = 3  # timed calls per shape (after one untimed), when a call is fast
# seconds torch's Timer counts as its own overhead around a block, when it cannot be measured (measured here,
# idle and under load: 0.3-0.5 µs; its block-size search aims at 1e-4 of it)
_TIMER_OVERHEAD = 5e-7
# how far one measure()'s Timer overhead and block time may stray from the calibration's (each is one noisy
# reading in torch's block-size search): a block size near the threshold is either of two, see harness_seconds
_BLOCK_NOISE = 1.5


@dataclass
class Calibration:
    """Calls of each variant timed on this machine, now, at small shapes (`Lesson.calibrate`)."""

    points: dict[str, list[tuple[dict, float, float]]]  # variant -> [(shape, floor, seconds a call)] at its last shape
    dtype: torch.dtype
    device: str
    metric_s: dict[str, float]  # variant -> seconds of the lesson's metrics (0 without metrics)
    inputs_s: dict[str, float]  # variant -> seconds to make the inputs at its last shape
    peaks: roofline.Peaks
    timer_overhead: float = _TIMER_OVERHEAD  # seconds, as torch's Timer measures its own (`timer_overhead`)


def timer_overhead(rounds: int = 3) -> float:
    """The overhead torch's Timer sizes its blocks by, measured as it does (the median of five empty
    timings of the harness's own statement, `Timer._estimate_block_size`), median of `rounds` such."""
    import itertools

    import torch.utils.benchmark as tbench

    try:
        timer = tbench.Timer(stmt="fn(*next(cycle))", globals={"fn": lambda: None, "cycle": itertools.cycle([()])},
                             num_threads=torch.get_num_threads())
        return statistics.median(statistics.median(timer._timeit(0) for _ in range(5)) for _ in range(rounds))
    except Exception:  # a private method of torch's: if it moves, the constant measured here
        return _TIMER_OVERHEAD


def harness_seconds(per_call: float, min_run_time: float, max_time: float | None = None,
                    overhead: float = _TIMER_OVERHEAD) -> float:
    """Wall time `timing.measure` takes on a call of `per_call` seconds, `overhead` being the Timer's
    (`timer_overhead`): see `_schedule`. torch sizes the block from one timed block and one
    measured overhead; where either's noise could move the block to the next power of ten (a
    10× block means fewer than MIN_SAMPLES blocks fill min_run_time, then samples up to it: up to
    4× the time), this is the geometric mean of the two schedules, within 2× of either."""
    lo = _schedule(per_call, min_run_time, max_time, overhead / _BLOCK_NOISE)
    hi = _schedule(per_call, min_run_time, max_time, overhead * _BLOCK_NOISE)
    return math.sqrt(lo * hi)


def _schedule(per_call: float, min_run_time: float, max_time: float | None, overhead: float) -> float:
    """`timing.measure`, step by step: its warm-up calls (and with max_time, min_run_time cut to half
    what is left of it); torch's block-size search (1, 10, 100… calls until the Timer's overhead is at
    most 1e-4 of a block and the block at least min_run_time/1000, or the block is over
    min_run_time); blocks until min_run_time; then one-block samples up to `timing.MIN_SAMPLES`, each
    after `Timer.timeit`'s own warm-up (max(number // 100, 2) calls). With max_time, a warm-up call or a
    block after the first starts only if it ends within max_time (torch/utils/benchmark/utils/timer.py,
    lessons_lib/timing.py `_Budget`, `_autorange`)."""
    c = max(per_call, 1e-9)

    def fits(calls):
        return max_time is None or total + calls * c <= max_time

    total = c
    for _ in range(timing.WARMUP_CALLS - 1):
        if fits(1):
            total += c
    if max_time is not None:
        min_run_time = max(min(min_run_time, (max_time - total) / 2), 1e-3)
    number, searched = 1, False
    while True:  # Timer._estimate_block_size
        if searched and not fits(number):
            number //= 10
            break
        block, searched = number * c, True
        total += block
        if (overhead / block <= 1e-4 and block >= min_run_time / 1000) or block > min_run_time \
                or number * 10 > 2147483647:
            break
        number *= 10
    block, samples = number * c, 0
    while samples * block < min_run_time and fits(number):  # Timer._threaded_measurement_loop
        total += block
        samples += 1
    samples = max(samples, 1)  # none fitted: the search's last block is the sample
    while samples < timing.MIN_SAMPLES and fits(number + max(number // 100, 2)):
        total += block + max(number // 100, 2) * c
        samples += 1
    return total


def crossover(values: list[int], a: list[float], b: list[float]) -> int | None:
    """The first value at which series `a` stops being slower than `b` (or vice versa)."""
    for i in range(1, len(values)):
        if (a[i - 1] > b[i - 1]) != (a[i] > b[i]):
            return values[i]
    return None
