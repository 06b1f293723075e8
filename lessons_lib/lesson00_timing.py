"""Lesson 00: timing GPU code honestly.

Every forum thread in this course times something, and most time it wrong: seed 000 puts
`torch.cuda.synchronize()` inside some of the timed functions but not others and sums
`timeit` totals; seed 001 uses `time.time()` with no warm-up (one variant has no
synchronize at all); seed 003 generates its random input inside the timed function.

Each `demo_*` function below makes one of those mistakes with a wrong timer from
`lessons_lib.timing` and measures the same code with the honest harness, `timing.measure`.
`SimulatedGPU` stands in for a CUDA stream on machines without one, so that the
asynchronous mistakes can be shown (and graded) on a CPU. `check_exercise` grades a
reader's benchmark on fake workloads whose true duration is known, so its verdict does not
depend on the machine.
"""
from __future__ import annotations

import collections
import json
import math
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import results, timing
from .device import check_fits, has_cuda, pick, synchronize
from .display import show_source  # noqa: F401  (the notebook calls L.show_source)
from .grading import Verdict
from .timing import Timing, fmt_time

KEY = "00_timing"
MiB = 2**20


# --- shapes, sized by device ------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """The shapes the demos use: small on a CPU, realistic on a GPU."""

    matmul: int  # n of the n×n float32 matmul timed in most demos
    rows: int  # seed 003's pseudo-linear layer: input is rows × width
    width: int
    cache_bytes: int  # the memory-bound op's input: fits in the last-level cache
    rotate_bytes: int  # all rotated copies together: far bigger than the cache


def _l2_bytes(dev: torch.device) -> int:
    props = torch.cuda.get_device_properties(dev.index if dev.index is not None else torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or 4 * MiB)  # attribute is missing in old releases


def sizes(device=None) -> Sizes:
    """Default shapes for `device`. A CPU gets shapes that time in milliseconds."""
    dev = pick(device)
    if dev.type == "cuda":
        l2 = _l2_bytes(dev)
        return Sizes(matmul=4096, rows=32768, width=1024, cache_bytes=l2 // 2, rotate_bytes=max(256 * MiB, 8 * l2))
    return Sizes(matmul=512, rows=4096, width=256, cache_bytes=2 * MiB, rotate_bytes=256 * MiB)


# --- what a demo returns ----------------------------------------------------------------


@dataclass
class Demo:
    """One mistake: what the wrong way reports next to what the harness measures."""

    key: str
    mistake: str  # one line: what the wrong way does
    shape: dict
    wrong: Timing
    honest: Timing
    extra: dict = field(default_factory=dict)  # more honest timings, e.g. {"flushed": Timing}

    @property
    def ratio(self) -> float:
        """The wrong number divided by the honest median."""
        return self.wrong.median / self.honest.median

    def verdict(self) -> str:
        r = self.ratio
        if abs(math.log(r)) < math.log(1.15):
            return f"the two agree within 15% ({r:.2f}×)"
        return f"the wrong way reports {r:.3g}× the honest median" + (
            f" ({1 / r:.3g}× too low)" if r < 1 else "")

    def __str__(self) -> str:
        shape = ", ".join(f"{k}={v}" for k, v in self.shape.items())
        rows = [(self.wrong.label, self.wrong.method.removeprefix("WRONG: "), self.wrong.median, None),
                (self.honest.label, "harness", self.honest.median, self.honest.iqr)]
        rows += [(t.label, "harness", t.median, t.iqr) for t in self.extra.values()]
        w = max(len(r[0]) for r in rows)
        lines = [f"{self.mistake} ({shape}, {self.honest.device})"]
        for label, how, med, iqr in rows:
            spread = f"   IQR {fmt_time(iqr)}" if iqr is not None else ""
            lines.append(f"  {label.ljust(w)}  {fmt_time(med):>9}{spread}   [{how}]")
        lines.append("  → " + self.verdict())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def as_dict(self) -> dict:
        def one(t: Timing) -> dict:
            return {"label": t.label, "median": t.median, "iqr": t.iqr, "samples": len(t.samples),
                    "calls_per_sample": t.calls_per_sample, "method": t.method}

        return {"mistake": self.mistake, "shape": self.shape, "wrong": one(self.wrong), "honest": one(self.honest),
                **{name: one(t) for name, t in self.extra.items()}}


def _square(n: int, dev: torch.device) -> torch.Tensor:
    return torch.randn(n, n, device=dev)


# --- the mistakes, one function each -----------------------------------------------------


def demo_no_sync(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """Wall-clock a loop of matmuls with no synchronize (seed 001), next to the harness.

    On a GPU the loop only queues kernels, so it times the launches. On a CPU every op
    finishes before it returns, so the two numbers agree: there is nothing to miss.
    """
    dev = pick(device)
    n = n or sizes(dev).matmul
    a = _square(n, dev)
    wrong = timing.wrong_no_sync(torch.mm, a, a, repeats=20, label="no synchronize")
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time)
    return Demo("no_sync", "Timing a loop without synchronizing", {"matmul": f"{n}×{n}"}, wrong, honest)


def first_call_in_fresh_process(device: str, n: int, min_run_time: float) -> dict:
    """Run in a child process: time the first matmul a fresh Python ever runs, then the harness."""
    dev = torch.device(device)
    a = _square(n, dev)  # on a GPU this creates the CUDA context, before the clock starts
    first = timing.wrong_first_call(torch.mm, a, a, label="first call")
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time)
    return {"wrong": first.as_dict(with_samples=True), "honest": honest.as_dict(with_samples=True)}


def demo_first_call(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """Time the very first call (seed 001 has no warm-up). Runs in a fresh Python process,
    so that it is really the first: cuBLAS handles and kernel loading on a GPU, library
    initialisation and fresh memory pages on a CPU. Rerunning it gives a cold call again."""
    dev = pick(device)
    n = n or sizes(dev).matmul
    code = ("import json, sys; from lessons_lib.lesson00_timing import first_call_in_fresh_process as f; "
            f"print(json.dumps(f({str(dev)!r}, {int(n)}, {float(min_run_time)})))")
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)  # so the child imports this same lessons_lib
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError("The fresh Python process for the first-call demo failed:\n" + proc.stderr[-2000:])
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return Demo("first_call", "Timing the first call (in a fresh Python process)", {"matmul": f"{n}×{n}"},
                Timing(**data["wrong"]), Timing(**data["honest"]))


def pseudo_linear(x, w, b):
    """Seed 003's PseudoLinear forward: a per-feature scale and shift instead of a matmul."""
    return x * w + b


def pseudo_linear_fresh_input(rows, w, b):
    """Seed 003's mistake: a new random input is generated inside the timed call."""
    x = torch.randn(rows, w.shape[0], device=w.device)
    return pseudo_linear(x, w, b)


def demo_random_data(device=None, rows: int | None = None, width: int | None = None,
                     min_run_time: float = 0.2) -> Demo:
    """Time `f(torch.randn(...))` (seed 003) against `f(x)` with `x` made beforehand."""
    dev = pick(device)
    s = sizes(dev)
    rows, width = rows or s.rows, width or s.width
    x = torch.randn(rows, width, device=dev)
    w, b = torch.randn(width, device=dev), torch.randn(width, device=dev)
    wrong = timing.measure(pseudo_linear_fresh_input, rows, w, b, label="randn inside", min_run_time=min_run_time)
    wrong.method = "WRONG: harness, but the input is made inside the timed call"
    honest = timing.measure(pseudo_linear, x, w, b, label="harness", min_run_time=min_run_time)
    return Demo("data_in_timed_region", "Generating the input inside the timed region",
                {"x": f"{rows}×{width}"}, wrong, honest)


def demo_single_run(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """One warm, synchronized call: honest in method, but one sample is one roll of the dice."""
    dev = pick(device)
    n = n or sizes(dev).matmul
    a = _square(n, dev)
    wrong = timing.wrong_single_run(torch.mm, a, a, label="one run")
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time)
    return Demo("single_run", "Timing a single run", {"matmul": f"{n}×{n}"}, wrong, honest)


def demo_mean(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """The mean of per-call times with the first call included: outliers drag it up."""
    dev = pick(device)
    n = n or sizes(dev).matmul
    a = _square(n, dev)
    wrong = timing.wrong_mean_with_cold_start(torch.mm, a, a, repeats=20, label="mean of 20")
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time)
    return Demo("mean_with_cold_start", "Averaging 20 calls, the first included", {"matmul": f"{n}×{n}"},
                wrong, honest)


def demo_one_thread(n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """torch.utils.benchmark.Timer's default of one CPU thread, against every thread torch uses.

    Always on CPU tensors: the mistake is about CPU timings (on a GPU it is harmless).
    """
    n = n or sizes("cpu").matmul
    a = _square(n, torch.device("cpu"))
    wrong = timing.wrong_one_thread(torch.mm, a, a, label="Timer default", min_run_time=min_run_time)
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time)
    return Demo("one_thread", "Timing with one CPU thread", {"matmul": f"{n}×{n}", "threads": torch.get_num_threads()},
                wrong, honest)


def demo_hot_cache(device=None, nbytes: int | None = None, rotate_bytes: int | None = None,
                   min_run_time: float = 0.2, flush: bool = True) -> Demo:
    """A memory-bound op (a sum) on one small input, again and again, so it sits in cache,
    against the same op rotating through copies that together far exceed the cache.
    With `flush=True`, also the harness's per-call cache flush."""
    dev = pick(device)
    s = sizes(dev)
    nbytes, rotate_bytes = nbytes or s.cache_bytes, rotate_bytes or s.rotate_bytes
    copies = max(2, rotate_bytes // nbytes)
    check_fits(copies * nbytes + (timing._FLUSH_BYTES if flush else 0), dev, what="the cache demo's buffers")
    bufs = [torch.empty(nbytes // 4, device=dev).fill_(1.0) for _ in range(copies)]  # fill: touch every page
    wrong = timing.measure(torch.sum, bufs[0], label="same input", min_run_time=min_run_time)
    wrong.method = "WRONG: harness, but the same input every call (hot cache)"
    honest = timing.measure(torch.sum, rotate=[(b,) for b in bufs], label=f"rotate {copies} copies",
                            min_run_time=min_run_time)
    extra = {}
    if flush:
        extra["flushed"] = timing.measure(torch.sum, bufs[0], label="flush_cache=True", flush_cache=True,
                                          min_run_time=min(min_run_time, 0.01))
    shape = {"input": timing_bytes(nbytes), "rotated": f"{copies} × {timing_bytes(nbytes)}"}
    return Demo("hot_cache", "Timing an input that sits in cache", shape, wrong, honest, extra)


def timing_bytes(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n / 1024:g} KiB"


# --- a pretend GPU, so the asynchronous mistakes show (and can be graded) on a CPU ------


_COARSE_SLEEP = sys.platform == "win32" and sys.version_info < (3, 11)  # ~15 ms timer ticks
_SLEEP_SLACK = 0.02 if _COARSE_SLEEP else 0.001


def _wait_until(deadline: float) -> None:
    """Sleep, then spin, until perf_counter() reaches `deadline` (sleep alone overshoots)."""
    while (left := deadline - time.perf_counter()) > 0:
        if left > _SLEEP_SLACK:
            time.sleep(left - _SLEEP_SLACK)


class SimulatedGPU:
    """A pretend CUDA stream. Nothing computes: it only keeps time, but it keeps the contract.

    `launch(seconds)` queues that much work and returns at once, like a kernel launch.
    `synchronize()` waits until every queued piece of work has finished, like
    `torch.cuda.synchronize()`. Like a real GPU, it runs queued work one piece after another,
    and a launch blocks only when `queue_depth` launches are already waiting.
    """

    def __init__(self, queue_depth: int = 1024):
        if queue_depth < 1:
            raise ValueError("queue_depth must be at least 1 (a real GPU queues about 1024 launches).")
        self.queue_depth = queue_depth
        self._finish = collections.deque()  # when each queued piece of work will be done

    def launch(self, seconds: float) -> None:
        now = time.perf_counter()
        while self._finish and self._finish[0] <= now:
            self._finish.popleft()
        if len(self._finish) >= self.queue_depth:  # queue full: wait for a slot, as CUDA does
            _wait_until(self._finish.popleft())
            now = time.perf_counter()
        start = max(now, self._finish[-1]) if self._finish else now
        self._finish.append(start + seconds)

    def synchronize(self) -> None:
        if self._finish:
            _wait_until(self._finish[-1])
            self._finish.clear()

    @property
    def pending(self) -> int:
        """Launches not finished yet."""
        now = time.perf_counter()
        return sum(1 for t in self._finish if t > now)


def seed000_variants(gpu: SimulatedGPU, work: float = 0.004, kernels: int = 12):
    """Two versions of seed 000's computation on the pretend GPU, with the SAME work.

    One synchronizes inside (as seed 000's functions do); the other does not (as one of
    the versions in the thread's reply). Returns (syncs_inside, no_sync).
    """

    def syncs_inside():
        gpu.launch(work)  # one batched kernel
        gpu.synchronize()

    def no_sync():
        for _ in range(kernels):  # a loop of smaller kernels, same total work
            gpu.launch(work / kernels)

    return syncs_inside, no_sync


def demo_sync_in_one_variant(work: float = 0.004, min_run_time: float = 0.2) -> dict[str, Timing]:
    """Seed 000's loop: a wall clock around each variant, one of which synchronizes inside.

    Both variants queue `work` seconds on a pretend GPU. The wrong way times each with a
    wall clock and no synchronize of its own; the harness waits for the GPU after every call.
    """
    gpu = SimulatedGPU()
    syncs_inside, no_sync = seed000_variants(gpu, work)
    out = {}
    for name, fn in (("syncs inside", syncs_inside), ("no sync", no_sync)):
        gpu.synchronize()  # start each timing with an empty queue
        out[f"{name} · wrong"] = timing.wrong_no_sync(fn, repeats=20, label=f"{name} · wrong")
        gpu.synchronize()
        out[f"{name} · harness"] = timing.measure(lambda f=fn: (f(), gpu.synchronize()), label=f"{name} · harness",
                                                  min_run_time=min_run_time)
    gpu.synchronize()
    return out


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
            _wait_until(time.perf_counter() + self.duration(i))

    def sync(self):
        if self.gpu is not None:
            self.gpu.synchronize()


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


def _grade_one(kind: str, result) -> tuple[bool, str]:
    """(ok, advice) for one fake workload. The advice never contains a measured number."""
    if isinstance(result, bool) or not isinstance(result, (int, float)) or not math.isfinite(result) or result <= 0:
        return False, "return the seconds per call as a positive number"
    r = result / STEADY
    if abs(r - 1) <= TOLERANCE:
        return True, ""
    if 300 <= r <= 3000:
        return False, "looks like milliseconds: return seconds"
    return False, (_ADVICE_HIGH if r > 1 else _ADVICE_LOW)[kind]


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
            result = my_benchmark(work, work.sync)
        except TooManyCalls:
            hint = " (and each call looks instant until you sync())" if kind == "async" else ""
            v.check(_WORKLOAD_TITLES[kind], False, f"it called fn more than {MAX_CALLS} times: a few dozen is enough{hint}")
            continue
        except Exception as err:  # the reader's code: report, don't crash the checker
            v.check(_WORKLOAD_TITLES[kind], False, f"your benchmark raised {type(err).__name__}")
            continue
        finally:
            work.sync()  # drain what a benchmark without sync left queued
        ok, advice = _grade_one(kind, result)
        v.check(_WORKLOAD_TITLES[kind], ok, advice)
    gpu_name = f"agrees with timing.measure on a {GPU_CHECK_N}×{GPU_CHECK_N} matmul"
    if not has_cuda():
        v.on_gpu(gpu_name, None)
        return v
    a = _square(GPU_CHECK_N, torch.device("cuda"))
    truth = timing.measure(torch.mm, a, a).median
    try:
        mine = my_benchmark(lambda: torch.mm(a, a), torch.cuda.synchronize)
        ok = isinstance(mine, (int, float)) and abs(mine / truth - 1) <= TOLERANCE
        detail = "" if ok else ("reports too little: sync before you stop the clock" if mine < truth
                                else "reports too much: warm up, and take the median")
    except Exception as err:
        ok, detail = False, f"your benchmark raised {type(err).__name__}"
    torch.cuda.synchronize()
    v.on_gpu(gpu_name, ok, detail)
    return v


# --- try it on your own function ---------------------------------------------------------


def compare(fn, *args, min_run_time: float = 0.2) -> list[Timing]:
    """Every wrong timer and the harness on `fn(*args)`. Use it on your own function.

    (The first call here is only cold if nothing ran `fn` before in this process.)
    """
    if not callable(fn):
        raise ValueError("compare(fn, *args) needs a function first, e.g. compare(torch.mm, a, b).")
    out = [
        timing.wrong_first_call(fn, *args),
        timing.wrong_no_sync(fn, *args, repeats=20),
        timing.wrong_single_run(fn, *args),
        timing.wrong_mean_with_cold_start(fn, *args),
        timing.wrong_one_thread(fn, *args, min_run_time=min_run_time),
        timing.measure(fn, *args, label="harness", min_run_time=min_run_time),
    ]
    return out


# --- plots' data, recorded results, and the record command ------------------------------


SHORT = {"no_sync": "no sync", "first_call": "first call", "data_in_timed_region": "randn inside",
         "single_run": "one run", "mean_with_cold_start": "mean of 20", "one_thread": "1 thread",
         "hot_cache": "hot cache"}  # axis labels for the demos


def rows_for_plot(demos: list[Demo], prefix: str = "") -> dict[str, dict[str, float]]:
    """{series: {mistake: seconds}} for plots.machines: the wrong way next to the harness."""
    return {f"{prefix}wrong way": {SHORT.get(d.key, d.key): d.wrong.median for d in demos},
            f"{prefix}harness": {SHORT.get(d.key, d.key): d.honest.median for d in demos}}


def recorded_rows(rec: results.Recorded) -> dict[str, dict[str, float]]:
    """The same rows from a recorded results file."""
    demos = rec.lesson(KEY)["demos"]
    name = rec.meta["name"].replace("NVIDIA ", "")
    return {f"{name}: wrong way": {SHORT.get(k, k): d["wrong"]["median"] for k, d in demos.items()},
            f"{name}: harness": {SHORT.get(k, k): d["honest"]["median"] for k, d in demos.items()}}


def recorded_gpu_summary(demo: str | None = None) -> str:
    """What recorded GPU results say about each mistake (or only `demo`), or that none exist yet."""
    recs = results.for_lesson(KEY, gpu_only=True)
    if not recs:
        return ("No GPU results are recorded for this lesson yet, so none are shown (we never make them up).\n"
                "On a machine with a CUDA GPU, run `python -m lessons_lib.record` to record them; "
                "this cell then shows them.")
    lines = []
    for rec in recs:
        lines.append(rec.label())
        for k, d in rec.lesson(KEY)["demos"].items():
            if demo is not None and k != demo:
                continue
            ratio = d["wrong"]["median"] / d["honest"]["median"]
            lines.append(f"  {k.replace('_', ' '):22s} wrong {fmt_time(d['wrong']['median']):>9}   "
                         f"harness {fmt_time(d['honest']['median']):>9}   ({ratio:.3g}×)")
    return "\n".join(lines)


def run_all(device=None, min_run_time: float = 0.2, flush: bool = True) -> list[Demo]:
    """Every mistake that times real torch code on `device`, at the default shapes."""
    dev = pick(device)
    return [
        demo_no_sync(dev, min_run_time=min_run_time),
        demo_first_call(dev, min_run_time=min_run_time),
        demo_random_data(dev, min_run_time=min_run_time),
        demo_single_run(dev, min_run_time=min_run_time),
        demo_mean(dev, min_run_time=min_run_time),
        demo_one_thread(min_run_time=min_run_time),
        demo_hot_cache(dev, min_run_time=min_run_time, flush=flush),
    ]


def record(device=None, quick: bool = False) -> dict:
    """This lesson's section of the recorded results (key "00_timing").

    {"quick": bool, "device": "cuda" | "cpu", "sizes": {Sizes fields},
     "demos": {key: {"mistake", "shape", "wrong": T, "honest": T[, "flushed": T]}}}
    with T = {"label", "median", "iqr", "samples", "calls_per_sample", "method"} (seconds).
    Demo keys: no_sync, first_call, data_in_timed_region, single_run,
    mean_with_cold_start, one_thread, hot_cache.
    """
    dev = pick(device)
    demos = run_all(dev, min_run_time=0.02 if quick else 0.2, flush=not quick)
    return {"quick": bool(quick), "device": dev.type, "sizes": asdict(sizes(dev)),
            "demos": {d.key: d.as_dict() for d in demos}}
