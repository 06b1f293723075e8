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

    def duration(self, i: int) -> float:
        if (self.kind == "cold" and i == 0) or (self.kind == "outliers" and i in OUTLIER_CALLS):
            return SLOW
        return STEADY

    def __call__(self):
        i, self.calls = self.calls, self.calls + 1
        if i >= MAX_CALLS:
            raise TooManyCalls(f"more than {MAX_CALLS} calls")
        if self.gpu is not None:
            self.gpu.launch(self.duration(i))
        else:
            t0 = time.perf_counter()
            wait_until(t0 + self.duration(i))
            self.served.append(time.perf_counter() - t0)

    def served_per_call(self) -> float:
        """The most an honest benchmark can report per ordinary call on this machine, now: the ordinary
        calls' median as the machine served them (a busy machine ends a 5 ms wait late, and an honest
        benchmark sees that too), or, for queued work, STEADY plus the median lateness of a sync. The
        least it can report is STEADY: noise only adds time."""
        steady = [s for i, s in enumerate(self.served) if self.duration(i) == STEADY]
        if steady:
            return max(STEADY, statistics.median(steady))
        return STEADY + (statistics.median(self.late) if self.late else 0.0)

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


def _grade_one(kind: str, result, served: float = STEADY) -> tuple[bool, str]:
    """(ok, advice) for one fake workload: right when within TOLERANCE of STEADY below and of what the
    machine `served` per call above (FakeWorkload.served_per_call), so a busy machine never fails an honest
    benchmark. The advice never contains a measured number."""
    if isinstance(result, bool) or not isinstance(result, (int, float)) or not math.isfinite(result) or result <= 0:
        return False, "return the seconds per call as a positive number"
    if 1 - TOLERANCE <= result / STEADY and result / served <= 1 + TOLERANCE:
        return True, ""
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
        ok, advice = _grade_one(kind, result, work.served_per_call())
        v.check(_WORKLOAD_TITLES[kind], ok, advice)
    gpu_name = f"agrees with timing.measure on a {GPU_CHECK_N}×{GPU_CHECK_N} matmul"
    if not has_cuda():
        v.on_gpu(gpu_name, None)
        return v
    a = torch.randn(GPU_CHECK_N, GPU_CHECK_N, device="cuda")
    truth = timing.measure(torch.mm, a, a, max_time=10).median
    calls = [0]

    def one_matmul():  # capped like the fake workloads: a benchmark that never stops is cut off
        calls[0] += 1
        if calls[0] > MAX_CALLS:
            raise TooManyCalls(f"more than {MAX_CALLS} calls")
        return torch.mm(a, a)

    mine, problem = grading.call_reader(my_benchmark, one_matmul, torch.cuda.synchronize, limit=WORKLOAD_TIME_LIMIT)
    torch.cuda.synchronize()
    if problem:
        ok, detail = False, problem
    else:
        ok = isinstance(mine, (int, float)) and not isinstance(mine, bool) and mine > 0 and abs(mine / truth - 1) <= TOLERANCE
        detail = "" if ok else ("reports too little: sync before you stop the clock"
                                if isinstance(mine, (int, float)) and mine < truth
                                else "reports too much or not a number of seconds: warm up, and take the median")
    v.on_gpu(gpu_name, ok, detail)
    return v


