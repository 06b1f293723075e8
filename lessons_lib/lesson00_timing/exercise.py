"""Lesson 00's exercise: fix a broken benchmark, graded on fake workloads of known duration.

Each fake workload takes a known time per call (a cold first call, rare outliers, or work that
is only queued on a pretend GPU), so the verdict reads the same on every machine. Everything
the reader's benchmark does (raise, loop forever, call too often, return milliseconds or
garbage) comes back as a verdict line: calls are capped per workload and each workload has a
wall-time limit, so a broken benchmark cannot hang the kernel or a test run.
"""
from __future__ import annotations

import inspect
import math
import random
import statistics
import time

import torch

from .. import grading, timing
from ..device import has_cuda
from ..grading import Verdict
from ..launch_queue import SimulatedGPU, wait_until

# --- fake workloads of known duration (the exercise's test bench) ------------------------

STEADY = 0.005  # seconds per ordinary call of every fake workload
SLOW = 0.100  # seconds of a cold first call or an outlier
MAX_CALLS = 1000
# Outliers: about 1 call in 25, at fixed (seeded) positions, so every run sees the same ones.
_rng = random.Random(2024)
OUTLIER_CALLS = frozenset({1, 4} | {i for i in range(MAX_CALLS) if _rng.random() < 0.04})


class TooManyCalls(RuntimeError):
    pass


class FakeWorkload:
    """A callable that takes a known time per call. `sync()` waits for its queued work.

    kind "cold": the first call takes SLOW, later ones STEADY.
    kind "outliers": STEADY, but the calls in OUTLIER_CALLS take SLOW.
    kind "async": each call queues STEADY on a SimulatedGPU and returns at once.
    """

    KINDS = ("cold", "outliers", "async")

    def __init__(self, kind: str):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}.")
        self.kind = kind
        self.calls = 0
        self.gpu = SimulatedGPU() if kind == "async" else None
        self.served: list[float] = []  # seconds each host call really took (a busy machine stretches them)
        self.late: list[float] = []  # how long after the queued work was done each sync() returned
        self.starts: list[float] = []  # when each call began: the time from one call to the next

    def duration(self, i: int) -> float:
        if (self.kind == "cold" and i == 0) or (self.kind == "outliers" and i in OUTLIER_CALLS):
            return SLOW
        return STEADY

    def __call__(self):
        i, self.calls = self.calls, self.calls + 1
        if i >= MAX_CALLS:
            raise TooManyCalls(f"more than {MAX_CALLS} calls")
        self.starts.append(time.perf_counter())
        if self.gpu is not None:
            self.gpu.launch(self.duration(i))
        else:
            t0 = time.perf_counter()
            wait_until(t0 + self.duration(i))
            self.served.append(time.perf_counter() - t0)

    def served_per_call(self) -> float:
        """The most an honest benchmark can report per ordinary call on this machine, now: the larger of the
        ordinary calls' median as the machine served them (a busy machine ends a 5 ms wait late), STEADY plus
        the median lateness of a sync (queued work), and the median time from an ordinary call's start to the
        next call's start, which holds everything the benchmark's own loop does around that call (its clock, a
        sync, a descheduled moment), and the mean of those: a harness that times blocks of calls (torch's Timer)
        reports each block's mean, and on a loaded machine the descheduled moments put the mean of the periods
        well above their median (CI's simulated-GPU leg at load 6: an honest harness failed "asynchronous").
        An honest benchmark cannot exceed these, however busy the machine: the verdict never rests on how
        accurately a loaded machine sleeps. The least an honest benchmark can report is STEADY: a wait never
        ends early, and noise only adds time."""
        steady = [s for i, s in enumerate(self.served) if self.duration(i) == STEADY]
        periods = [b - a for i, (a, b) in enumerate(zip(self.starts, self.starts[1:])) if self.duration(i) == STEADY]
        bounds = [STEADY, STEADY + (statistics.median(self.late) if self.late else 0.0)]
        bounds += [statistics.median(x) for x in (steady, periods) if x]
        bounds += [statistics.fmean(periods)] if periods else []
        return max(bounds)

    def served_at_worst(self) -> float:
        """The most an honest benchmark may report on this machine, now, when it takes the median of a handful of
        samples: the 90th percentile of the ordinary calls as served, of their periods, and of a sync's lateness
        (at load 14, 7 honest one-call samples had a median 4 ms above the periods' median and mean). Between
        `served_per_call` and this, a report cannot be told from a mistake: not decided."""
        steady = [s for i, s in enumerate(self.served) if self.duration(i) == STEADY]
        periods = [b - a for i, (a, b) in enumerate(zip(self.starts, self.starts[1:])) if self.duration(i) == STEADY]
        late = [STEADY + x for x in self.late]
        highs = [statistics.quantiles(x, n=10, method="inclusive")[-1] for x in (steady, periods, late) if len(x) > 1]
        return max([self.served_per_call(), *highs])

    def sync(self):
        if self.gpu is not None:
            due = self.gpu.drained_at
            self.gpu.synchronize()
            if due is not None:
                self.late.append(max(0.0, time.perf_counter() - due))


_WORKLOAD_TITLES = {
    "cold": f"cold start: first call {SLOW * 1e3:.0f} ms, then {STEADY * 1e3:.0f} ms a call",
    "outliers": f"rare outliers: {STEADY * 1e3:.0f} ms a call, about 1 call in 25 takes {SLOW * 1e3:.0f} ms",
    "async": f"asynchronous: each call queues {STEADY * 1e3:.0f} ms of work and returns at once",
}
_ADVICE_HIGH = {
    "cold": "reports too much: warm up before you start the clock",
    "outliers": "reports too much: take the median of many timed calls, not the mean or one call",
    "async": "reports too much",
}
_ADVICE_LOW = {
    "cold": "reports too little",
    "outliers": "reports too little",
    "async": "reports too little: call sync() before you stop the clock",
}


# --- the exercise ------------------------------------------------------------------------


def broken_benchmark(fn, sync, repeats=20):
    """Seconds per call of fn(), measured the way forum threads often do. Fix it!"""
    start = time.time()
    for _ in range(repeats):
        fn()
    return (time.time() - start) / repeats


TOLERANCE = 0.3  # a correct benchmark lands within ±30% of the true time per call
GPU_CHECK_N = 4096


NOT_DECIDED = ("not decided on this run: the machine was too busy to tell your report from this mistake (it lies "
               "within what interruptions add to an honest median of a few samples): rerun on a quieter machine")


def _grade_one(kind: str, result, served: float = STEADY, at_worst: float | None = None) -> tuple[bool, str]:
    """(ok, advice) for one fake workload: right when at least STEADY less TOLERANCE of it, and at most what the
    machine `served` per call (FakeWorkload.served_per_call) plus TOLERANCE of STEADY; too much above what it
    served `at_worst` (FakeWorkload.served_at_worst) plus that margin; in between, not decided (ok False, said so).
    So the margin a mistake may hide in stays TOLERANCE of the true call (a margin of TOLERANCE of `served` grew
    with the load: at load 8, 20 ms periods for a 5 ms call, it passed a cold first call averaged into 25, 3.8 ms
    a call), and a busy machine never calls an honest benchmark wrong. The advice never contains a number."""
    if isinstance(result, bool) or not isinstance(result, (int, float)) or not math.isfinite(result) or result <= 0:
        return False, "return the seconds per call as a positive number"
    if 1 - TOLERANCE <= result / STEADY and result <= served + TOLERANCE * STEADY:
        return True, ""
    if 1 - TOLERANCE <= result / STEADY and result <= (at_worst or served) + TOLERANCE * STEADY:
        return False, NOT_DECIDED
    r = result / served
    if 300 <= r <= 3000:
        return False, "looks like milliseconds: return seconds"
    return False, (_ADVICE_HIGH if r > 1 else _ADVICE_LOW)[kind]


WORKLOAD_TIME_LIMIT = 30.0  # seconds one workload may take: MAX_CALLS × STEADY plus outliers, with margin


def starter_source() -> str:
    """The starter as code a reader can paste and edit in place, imports included."""
    return "import time\n\n\n" + inspect.getsource(broken_benchmark).replace(
        "def broken_benchmark(", "def my_benchmark(")


def check_exercise(my_benchmark) -> Verdict:
    """Grade `my_benchmark(fn, sync) -> seconds per call` on workloads of known duration.

    Each fake workload takes a known time per call (see FakeWorkload), so the verdict reads
    the same on every machine. On a CUDA GPU it also compares with `timing.measure` on a
    real matmul.
    """
    if not callable(my_benchmark):
        raise ValueError("check_exercise needs your benchmark function itself: check_exercise(my_benchmark), "
                         "not the number it returns.")
    v = Verdict("Exercise 00: an honest benchmark")
    for kind in FakeWorkload.KINDS:
        work = FakeWorkload(kind)
        try:
            with grading.time_limit(WORKLOAD_TIME_LIMIT):
                result = my_benchmark(work, work.sync)
        except TooManyCalls:
            hint = " (and each call looks instant until you sync())" if kind == "async" else ""
            v.check(_WORKLOAD_TITLES[kind], False, f"it called fn more than {MAX_CALLS} times: a few dozen is enough{hint}")
            continue
        except grading.TimeLimit:
            v.check(_WORKLOAD_TITLES[kind], False, f"it ran for more than {WORKLOAD_TIME_LIMIT:g} s: is there an "
                    "endless loop?")
            continue
        except Exception as err:  # the reader's code: report, don't crash the checker
            v.check(_WORKLOAD_TITLES[kind], False, f"your benchmark raised {type(err).__name__}")
            continue
        finally:
            work.sync()  # drain what a benchmark without sync left queued
        ok, advice = _grade_one(kind, result, work.served_per_call(), work.served_at_worst())
        v.check(_WORKLOAD_TITLES[kind], ok, advice)
    gpu_name = f"agrees with timing.measure on a {GPU_CHECK_N}×{GPU_CHECK_N} matmul"
    if not has_cuda():
        v.on_gpu(gpu_name, None)
        return v
    v.on_gpu(*agreement_check(my_benchmark, torch.device("cuda"), GPU_CHECK_N))
    return v


class _ReaderProblem(Exception):
    """What the reader's benchmark did in a round, as the verdict's one line."""


def agreement_check(my_benchmark, device, n: int = GPU_CHECK_N, max_time: float = 20.0) -> tuple[str, bool, str]:
    """(name, ok, detail): the reader's benchmark on a real n×n matmul against `timing.measure`, in
    alternating rounds (the noise rule, `noise.settle`): each round times the matmul with both, and the
    line passes when the rule's interval for the ratio (yours / the harness's) lies within TOLERANCE of 1,
    and fails when it lies clear of that; otherwise it is not decided. One harness timing against one
    reader's number failed an honest benchmark on a shared H200.
    Runs on any `device` (the tests use a small n on a CPU); the checker calls it on a CUDA GPU."""
    from .. import noise
    from ..hardware import synchronize

    device = torch.device(device)
    name = f"agrees with timing.measure on a {n}×{n} matmul"
    a = torch.randn(n, n, device=device)
    calls = [0]

    def one_matmul():  # capped like the fake workloads: a benchmark that never stops is cut off
        calls[0] += 1
        if calls[0] > MAX_CALLS:
            raise TooManyCalls(f"more than {MAX_CALLS} calls")
        return torch.mm(a, a)

    def yours() -> float:
        calls[0] = 0
        mine, problem = grading.call_reader(my_benchmark, one_matmul, lambda: synchronize(device),
                                            limit=WORKLOAD_TIME_LIMIT)
        synchronize(device)  # drain what a benchmark without sync left queued
        if problem:
            raise _ReaderProblem(problem)
        if isinstance(mine, bool) or not isinstance(mine, (int, float)) or not math.isfinite(mine) or mine <= 0:
            raise _ReaderProblem("return the seconds per call as a positive number")
        return mine

    rounds = [0]

    def one_round() -> float:  # alternating order, so a slow spell does not always hit the same side
        rounds[0] += 1
        harness = lambda: timing.measure(torch.mm, a, a, max_time=max_time / 8, device=device).median  # noqa: E731
        if rounds[0] % 2:
            truth = harness()
            return yours() / truth
        mine = yours()
        return mine / harness()

    low, high = 1 - TOLERANCE, 1 + TOLERANCE

    def answered(r) -> bool:  # the noise rule's interval inside ±TOLERANCE (agrees), or clear of it (does not)
        return low <= r.low and r.high <= high or r.high < low or r.low > high

    try:
        r = noise.settle(one_round, max_time=max_time, ratio=True, settled=answered)
    except _ReaderProblem as problem:
        return name, False, str(problem)
    if r.lacking or r.high == math.inf:
        return name, False, r.not_decided()
    if not answered(r):
        return name, False, (f"not decided on this run: {len(r.values)} paired rounds put yours / the harness's at "
                             f"{r.low:.2f}–{r.high:.2f}× ({noise.LEVEL} interval), reaching past ±{TOLERANCE:.0%}: "
                             f"{noise.RERUN}")
    if r.high <= high and r.low >= low:
        return name, True, ""
    return name, False, ("reports too little: sync before you stop the clock" if r.high < low
                         else "reports too much: warm up, and take the median")
