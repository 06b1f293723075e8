"""Lesson 00: timing GPU code honestly.

Every forum thread in this course times something, and most time it wrong: seed 000 puts
`torch.cuda.synchronize()` inside some of the timed functions but not others and sums
`timeit` totals; seed 001 uses `time.time()` with no warm-up (one variant has no
synchronize at all); seed 003 generates its random input inside the timed function.

Each `demo_*` function below makes one of those mistakes with a wrong timer from
`lessons_lib.timing` and measures the same code with the honest harness, `timing.measure`.
`launch_queue.SimulatedGPU` stands in for a CUDA stream on machines without one, so that the
asynchronous mistakes can be shown on a CPU. The exercise (a broken benchmark to fix, graded on
fake workloads of known duration) lives in `lesson00_exercise`.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import noise, results, timing
from .device import CPU_THREADS, check_fits, last_level_cache_bytes, pick
from .display import show_source  # noqa: F401  (the notebook calls L.show_source)
from .launch_queue import QUEUE_DEPTH, Op, SimulatedGPU, WallClock, schedule  # noqa: F401  (the notebook uses them)
from .syncs import host_syncs  # noqa: F401  (the notebook uses it)
from .lesson00_exercise import (SLOW, STEADY, FakeWorkload, TooManyCalls, broken_benchmark,  # noqa: F401 (for
                                check_exercise, starter_source)  # the notebook)
from .timing import Timing, fmt_time

KEY = "00_timing"
MiB = 2**20
ROTATE_CAP = 256 * MiB  # a CPU's rotation set in the cache demo: twice the cache, but no more than this


# --- shapes, sized by device ------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """The shapes the demos use: small on a CPU, realistic on a GPU."""

    matmul: int  # n of the n×n float32 matmul timed in most demos
    rows: int  # seed 003's pseudo-linear layer: input is rows × width
    width: int
    cache_bytes: int  # the memory-bound op's input: fits in the last-level cache
    rotate_bytes: int  # all rotated copies together: at least twice the cache


def sizes(device=None) -> Sizes:
    """Default shapes for `device`. A CPU gets shapes that time in milliseconds.

    The cache demo is sized from the measured last-level cache (a GPU's L2, a CPU's L3): its
    input fits in a quarter of it, and the rotated copies together are twice its size (enough to
    evict it), at most ROTATE_CAP: some VMs report a host's whole L3 (260 MiB here), and a CPU reader's
    notebook should not fill a gigabyte. Where the cap binds, the demo's printout says so."""
    dev = pick(device)
    llc = last_level_cache_bytes(dev)
    rotate = max(64 * MiB, min(2 * llc, ROTATE_CAP)) if dev.type != "cuda" else max(64 * MiB, 2 * llc)
    if dev.type == "cuda":
        return Sizes(matmul=4096, rows=32768, width=1024, cache_bytes=llc // 4, rotate_bytes=rotate)
    return Sizes(matmul=512, rows=4096, width=256, cache_bytes=min(2 * MiB, llc // 4), rotate_bytes=rotate)


def _check_size(value, name: str, lo: int = 1, hi: int = 1 << 40):
    """Demo sizes enter here: a whole number in range, or a sentence saying what to change."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be a whole number from {lo:,} to {hi:,}, got {value!r}.")
    return value


def _check_seconds(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}.")
    return float(value)


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
    paired: noise.Ratio | None = None  # wrong / honest from paired rounds, where both sides can be re-timed

    @property
    def ratio(self) -> float:
        """The wrong number divided by the honest median."""
        return self.wrong.median / self.honest.median

    @property
    def estimate(self) -> noise.Ratio:
        """wrong / honest through the noise rule: the paired rounds where the demo ran them, else the
        two measurements with their spreads added (a one-sample wrong way has no spread of its own)."""
        return self.paired if self.paired is not None else noise.from_timings(self.wrong, self.honest)

    def verdict(self) -> str:
        """What this run measured, or "not decided on this run" when its spread cannot decide it."""
        est = self.estimate
        if not est.decided:
            return est.not_decided()
        r = est.median
        if abs(math.log(r)) < math.log(1.15):
            return f"the two agree within 15% ({r:.2f}×)"
        return f"the wrong way reports {r:.3g}× the honest median" + (f" ({1 / r:.3g}× too low)" if r < 1 else "")

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

        out = {"mistake": self.mistake, "shape": self.shape, "wrong": one(self.wrong), "honest": one(self.honest),
               **{name: one(t) for name, t in self.extra.items()}}
        if self.paired is not None:  # wrong / honest, one value per paired round
            out["paired_ratios"] = list(self.paired.values)
        return out


def _paired(wrong_label: str, wrong_fn, honest_fn, min_run_time: float) -> tuple[Timing, Timing, noise.Ratio]:
    """Both sides re-timed in alternating rounds by the noise rule (each side is a zero-argument
    call the harness can time). Returns the last round's two timings and the paired ratio."""
    cmp = noise.compare({wrong_label: wrong_fn, "harness": honest_fn}, min_run_time=min_run_time / 4,
                        pairs=[(wrong_label, "harness")], max_time=2.5)
    return cmp.timings[wrong_label], cmp.timings["harness"], cmp.ratio(wrong_label, "harness")


def _square(n: int, dev: torch.device) -> torch.Tensor:
    return torch.randn(n, n, device=dev)


# --- the mistakes, one function each -----------------------------------------------------


def demo_no_sync(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """Wall-clock a loop of matmuls with no synchronize (seed 001), next to the harness.

    On a GPU the loop only queues kernels, so it times the launches. On a CPU every op
    finishes before it returns, so the two numbers agree: there is nothing to miss.
    """
    dev = pick(device)
    n = _check_size(n, "n", 1, 16384) or sizes(dev).matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, dev, what=f"a {n}×{n} matmul")
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
    n = _check_size(n, "n", 1, 16384) or sizes(dev).matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, dev, what=f"a {n}×{n} matmul")
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
    rows = _check_size(rows, "rows", 1, 1 << 24) or s.rows
    width = _check_size(width, "width", 1, 1 << 20) or s.width
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * rows * width * 4, dev, what=f"a {rows}×{width} input")
    x = torch.randn(rows, width, device=dev)
    w, b = torch.randn(width, device=dev), torch.randn(width, device=dev)
    wrong, honest, paired = _paired("randn inside", lambda: pseudo_linear_fresh_input(rows, w, b),
                                    lambda: pseudo_linear(x, w, b), min_run_time)
    wrong.method = "WRONG: harness, but the input is made inside the timed call"
    return Demo("data_in_timed_region", "Generating the input inside the timed region",
                {"x": f"{rows}×{width}"}, wrong, honest, paired=paired)


def demo_single_run(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """One warm, synchronized call: honest in method, but one sample is one roll of the dice."""
    dev = pick(device)
    n = _check_size(n, "n", 1, 16384) or sizes(dev).matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, dev, what=f"a {n}×{n} matmul")
    a = _square(n, dev)
    wrong = timing.wrong_single_run(torch.mm, a, a, label="one run")
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time)
    return Demo("single_run", "Timing a single run", {"matmul": f"{n}×{n}"}, wrong, honest)


def demo_mean(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """The mean of per-call times with the first call included: outliers drag it up."""
    dev = pick(device)
    n = _check_size(n, "n", 1, 16384) or sizes(dev).matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, dev, what=f"a {n}×{n} matmul")
    a = _square(n, dev)
    wrong = timing.wrong_mean_with_cold_start(torch.mm, a, a, repeats=20, label="mean of 20")
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time)
    return Demo("mean_with_cold_start", "Averaging 20 calls, the first included", {"matmul": f"{n}×{n}"},
                wrong, honest)


def demo_one_thread(n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """torch.utils.benchmark.Timer's default of one CPU thread, against every thread torch uses.

    Always on CPU tensors: the mistake is about CPU timings (on a GPU it is harmless).
    """
    n = _check_size(n, "n", 1, 16384) or sizes("cpu").matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, "cpu", what=f"a {n}×{n} matmul")
    a = _square(n, torch.device("cpu"))
    wrong = timing.wrong_one_thread(torch.mm, a, a, label="Timer default", min_run_time=min_run_time)
    # every core, as torch starts (setup() may have chosen 1 thread on a busy machine: this demo shows why)
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time, num_threads=CPU_THREADS)
    return Demo("one_thread", "Timing with one CPU thread", {"matmul": f"{n}×{n}", "threads": CPU_THREADS},
                wrong, honest)


def demo_hot_cache(device=None, nbytes: int | None = None, rotate_bytes: int | None = None,
                   min_run_time: float = 0.2, flush: bool = True) -> Demo:
    """A memory-bound op (a sum) on one small input, again and again, so it sits in cache,
    against the same op rotating through copies that together far exceed the cache.
    With `flush=True`, also the harness's per-call cache flush."""
    dev = pick(device)
    s = sizes(dev)
    nbytes = _check_size(nbytes, "nbytes", 4096, 1 << 34) or s.cache_bytes
    rotate_bytes = _check_size(rotate_bytes, "rotate_bytes", 4096, 1 << 36) or s.rotate_bytes
    _check_seconds(min_run_time, "min_run_time")
    copies = max(2, rotate_bytes // nbytes)
    check_fits(copies * nbytes + (timing.flush_bytes(dev) if flush else 0), dev, what="the cache demo's buffers")
    bufs = [torch.empty(nbytes // 4, device=dev).fill_(1.0) for _ in range(copies)]  # fill: touch every page
    ring = itertools.cycle(bufs)
    wrong, honest, paired = _paired("same input", lambda: torch.sum(bufs[0]), lambda: torch.sum(next(ring)),
                                    min_run_time / 2)
    wrong.method = "WRONG: harness, but the same input every call (hot cache)"
    honest.label = f"rotate {copies} copies"
    extra = {}
    if flush:  # each flushed call writes twice the cache first: a few dozen calls, not hundreds
        extra["flushed"] = timing.measure(torch.sum, bufs[0], label="flush_cache=True", flush_cache=True,
                                          min_run_time=min(min_run_time, 0.001), min_samples=5, max_time=1.5)
    shape = {"input": timing_bytes(nbytes), "rotated": f"{copies} × {timing_bytes(nbytes)}"}
    if copies * nbytes < 2 * last_level_cache_bytes(dev):
        shape["rotated"] += f" (under twice the {timing_bytes(last_level_cache_bytes(dev))} cache: partly cached)"
    return Demo("hot_cache", "Timing an input that sits in cache", shape, wrong, honest, extra, paired)


def timing_bytes(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n / 1024:g} KiB"


# --- seed 000: a sync in one variant, and work billed to the next one timed --------------
#
# Three traps, all in the thread's script. (1) Timed without a sync of its own, a variant that does
# not synchronize reports its launches, not its kernels. (2) A synchronize inside the timed function
# costs the host one launch and one sync a call that it can no longer hide behind device work: real
# launches and syncs cost microseconds, so with millisecond kernels this is well under 1%. (3) The
# unsynchronized variant's clock stops with up to a queue's worth of work unfinished, and that work
# is paid by whatever is timed next: in K. Frank's script, run_batched (no sync, timed first) and
# run_batched2 (sync inside, timed next) run the same op, yet report 6.83 s and 11.51 s.


def thread000_variants(gpu: SimulatedGPU, kernel: float = 0.002):
    """Seed 000's pattern on the pretend GPU: the SAME launch, once with a synchronize inside
    the function (as in the thread's functions) and once without (as K. Frank's run_batched).
    Returns (syncs_inside, no_sync)."""

    def syncs_inside():
        gpu.launch(kernel)
        gpu.synchronize()

    def no_sync():
        gpu.launch(kernel)

    return syncs_inside, no_sync


# The pretend GPU's costs in traps 1 and 2: 2 ms of device work a call, 0.5 ms for the host to issue
# it and 0.1 ms for a synchronize. Real launches and syncs cost microseconds; these are scaled up
# several hundred times so that a wall clock on a busy machine resolves them, which makes trap 2
# look far bigger here than it is with real millisecond kernels.
SIM_KERNEL, SIM_LAUNCH, SIM_SYNC = 0.002, 0.0005, 0.0001
_HARNESS_CALLS = 10  # calls per harness sample on the pretend GPU, then one synchronize


def demo_sync_in_one_variant(min_run_time: float = 0.2) -> dict[str, Timing]:
    """Traps 1 and 2 on the pretend GPU: a wall clock around 20 calls of each variant (wrong), and
    the harness around blocks of calls that end with the pretend GPU's synchronize.

    The wrong way ranks the variant without a sync as faster: it timed its launches only. The
    harness shows the same kernel time for both, plus, for the variant with a sync inside, the
    launch and sync it cannot hide (scaled up here: see SIM_LAUNCH)."""
    _check_seconds(min_run_time, "min_run_time")
    gpu = SimulatedGPU(launch_cost=SIM_LAUNCH, sync_cost=SIM_SYNC)
    syncs_inside, no_sync = thread000_variants(gpu, SIM_KERNEL)
    out = {}
    for name, fn in (("syncs inside", syncs_inside), ("no sync", no_sync)):
        gpu.synchronize()  # start each timing with an empty queue
        out[f"{name} · wrong"] = timing.wrong_no_sync(fn, repeats=20, label=f"{name} · wrong")
        gpu.synchronize()
        out[f"{name} · harness"] = _harness_with_sync(fn, gpu, name, min_run_time)
    gpu.synchronize()
    return out


def _harness_block(fn, gpu, calls: int = _HARNESS_CALLS):
    def block():
        for _ in range(calls):
            fn()
        gpu.synchronize()

    return block


def _harness_with_sync(fn, gpu, name, min_run_time):
    """The harness on a pretend GPU: its block of calls ends with the pretend GPU's synchronize,
    as torch.utils.benchmark ends each block with torch.cuda.synchronize()."""
    calls = _HARNESS_CALLS
    t = timing.measure(_harness_block(fn, gpu, calls), label=f"{name} · harness", min_run_time=min_run_time)
    scaled = [x / calls for x in t.samples]
    return Timing(t.label, t.median / calls, t.iqr / calls, scaled, t.calls_per_sample * calls,
                  t.method + f", {calls} calls then one synchronize per sample", t.device)


def sim_estimates(max_time: float = 6.0) -> dict[str, noise.Estimate]:
    """The three traps' ratios on the pretend GPU, each re-measured by the noise rule:
    "wrong": the wrong way's 'syncs inside' / 'no sync' (trap 1: it times the launches only),
    "harness": the harness's 'syncs inside' / 'no sync' in paired rounds (trap 2),
    "order": in the thread's order, the second-timed total / the first (trap 3, `demo_order`)."""
    gpu = SimulatedGPU(launch_cost=SIM_LAUNCH, sync_cost=SIM_SYNC)
    syncs_inside, no_sync = thread000_variants(gpu, SIM_KERNEL)

    def wrong_ratio():
        gpu.synchronize()
        a = timing.wrong_no_sync(syncs_inside, repeats=20).median
        gpu.synchronize()
        b = timing.wrong_no_sync(no_sync, repeats=20).median
        gpu.synchronize()
        return a / b

    def order_ratio():
        r = demo_order()
        return r.totals["syncs inside"] / r.totals["no sync"]

    return {
        "wrong": noise.settle(wrong_ratio, max_time=max_time / 4),
        "harness": noise.compare({"syncs inside": _harness_block(syncs_inside, gpu),
                                  "no sync": _harness_block(no_sync, gpu)}, min_run_time=0.02,
                                 max_time=max_time / 2, pairs=[("syncs inside", "no sync")])
                        .ratio("syncs inside", "no sync"),
        "order": noise.settle(order_ratio, max_time=max_time / 4),
    }


def sim_verdicts(est: dict[str, noise.Estimate]) -> list[str]:
    """`sim_estimates` as sentences: each says what the rounds agree on, or that they did not."""
    return [
        "trap 1, wrong way: " + est["wrong"].say("'no sync' looks {v:.1f}× faster than 'syncs inside' "
                                                 "(it timed its launches only)"),
        "trap 2, harness:   " + est["harness"].say(
            "'syncs inside' takes {r:.2f}× the time of 'no sync' for the same kernels (the launch and sync it "
            "cannot hide, scaled up here)", tie="the two take the same time ({r:.2f}×)"),
        "trap 3, order:     " + est["order"].say(
            "timed second, 'syncs inside' reports {v:.2f}× the total of 'no sync' timed first, for the same "
            "kernels (the model predicts {pred:.2f}×; on a busy machine every synchronize also waits for "
            "the scheduler)", pred=order_model_ratio()),
    ]


def sync_timeline(calls: int = 4):
    """The same two variants in the model (launch_queue.schedule): when each call is issued and
    run. With a sync inside, the device idles while the host issues the next launch."""
    inside = [Op(f"call {i}", SIM_LAUNCH, SIM_KERNEL, sync=True) for i in range(calls)]
    free = [Op(f"call {i}", SIM_LAUNCH, SIM_KERNEL) for i in range(calls)] + [Op("sync", 0.0, 0.0, sync=True)]
    return {"syncs inside": schedule(inside, sync_cost=SIM_SYNC), "no sync": schedule(free, sync_cost=SIM_SYNC)}


# --- trap 3: the thread's order, on the pretend GPU and in the model ---------------------------

# The pretend GPU for trap 3, scaled down so it runs in a fraction of a second: each call queues
# ORDER_LAUNCHES kernels of ORDER_KERNEL seconds, and the queue holds ORDER_QUEUE launches (a real
# one holds about QUEUE_DEPTH; see launch_queue). ORDER_CALLS calls are timed per variant, as
# timeit times 1000 in the thread.
ORDER_CALLS, ORDER_LAUNCHES, ORDER_KERNEL, ORDER_QUEUE = 12, 4, 0.002, 16


@dataclass
class OrderRun:
    """timeit-style totals of two variants that run the same kernels, timed one after the other."""

    order: tuple[str, str]  # which was timed first
    totals: dict[str, float]  # seconds for ORDER_CALLS calls
    true_total: float  # the device work of ORDER_CALLS calls

    def line(self) -> str:
        a, b = self.order
        return (f"{a} timed first: {fmt_time(self.totals[a])}, then {b}: {fmt_time(self.totals[b])} "
                f"(each ran {fmt_time(self.true_total)} of kernels)")


def demo_order(first: str = "no sync", final_sync: bool = False, clock=None) -> OrderRun:
    """Trap 3 on the pretend GPU: total each variant over ORDER_CALLS calls with a wall clock, one
    after the other, like `timeit` in the thread. `final_sync=True` waits for the device before each
    clock stops (what the harness does), so nothing is billed to the next variant. `clock`: the wall
    clock, or a `launch_queue.ManualClock` for the exact numbers of the rules (tests)."""
    if first not in ("no sync", "syncs inside"):
        raise ValueError("first must be 'no sync' or 'syncs inside'.")
    clock = clock or WallClock()
    gpu = SimulatedGPU(queue_depth=ORDER_QUEUE, clock=clock)

    def no_sync():
        for _ in range(ORDER_LAUNCHES):
            gpu.launch(ORDER_KERNEL)

    def syncs_inside():
        no_sync()
        gpu.synchronize()

    fns = {"no sync": no_sync, "syncs inside": syncs_inside}
    order = (first, "syncs inside" if first == "no sync" else "no sync")
    totals = {}
    for name in order:
        t0 = clock.now()
        for _ in range(ORDER_CALLS):
            fns[name]()
        if final_sync:
            gpu.synchronize()
        totals[name] = clock.now() - t0
    gpu.synchronize()
    return OrderRun(order, totals, ORDER_CALLS * ORDER_LAUNCHES * ORDER_KERNEL)


def order_model_ratio() -> float:
    """What launch_queue.schedule predicts for demo_order's pretend GPU, in the thread's order."""
    per_call = [Op("k", 0.0, ORDER_KERNEL)] * ORDER_LAUNCHES
    a = [op for _ in range(ORDER_CALLS) for op in per_call]
    b = [op for _ in range(ORDER_CALLS) for op in per_call[:-1] + [Op("k", 0.0, ORDER_KERNEL, sync=True)]]
    t = schedule(a + b, queue_depth=ORDER_QUEUE)
    first = t.slots[len(a) - 1].cpu_end
    return (t.total - first) / first


@dataclass
class ThreadQueue:
    """K. Frank's two totals explained by the queue: what the model predicts from the reported sum."""

    label: str  # the reported record
    reported: tuple[float, float]  # run_batched (no sync, timed first), run_batched2 (sync, next)
    calls: int
    launches_per_call: int
    queue_depth: int
    per_call: float  # device seconds a call, from the reported sum
    predicted: tuple[float, float]

    @property
    def queued_calls(self) -> float:
        """Calls' worth of work left queued when the first clock stopped, from the reported gap."""
        return (self.reported[1] - self.reported[0]) / 2 / self.per_call

    def lines(self) -> list[str]:
        (a, b), (pa, pb) = self.reported, self.predicted
        return [f"{self.label}",
                f"  reported:  run_batched (no sync) {a:.2f} s, then run_batched2 (sync inside) {b:.2f} s",
                f"  the model: {pa:.2f} s, then {pb:.2f} s  (one true cost, {self.per_call * 1e3:.2f} ms a call, "
                f"from the sum; {self.launches_per_call} launches a call; a queue of {self.queue_depth})",
                f"  the reported gap leaves {self.queued_calls:.0f} calls queued: "
                f"{self.queued_calls * self.launches_per_call:.0f} launches"]


def thread000_launches_per_call() -> int:
    """Ops that launch work in one call of the thread's broadcast matmul, traced on `meta`
    (2 copies, the bmm and the bias add; cuBLAS may run more than one kernel for the bmm)."""
    from .trace import trace_ops

    x = torch.empty(13, 16, 512, device="meta")
    w, b = torch.empty(12, 512, 512, device="meta"), torch.empty(12, 512, device="meta")
    t = trace_ops(lambda: x.unsqueeze(0) @ w.unsqueeze(1).transpose(-2, -1) + b.unsqueeze(1).unsqueeze(2))
    return len(t.compute_ops)


def thread000_queue(queue_depth: int = QUEUE_DEPTH, host_per_launch: float = 20e-6) -> list[ThreadQueue]:
    """For each reported record of K. Frank's run (seed 000): the model's totals for run_batched
    then run_batched2, when both cost the same per call and the queue holds `queue_depth` launches.

    Pure arithmetic (launch_queue.schedule), the same on every machine. The one number taken from
    the thread is the per-call cost, from the SUM of the two totals; the gap between them is then
    the model's prediction. `host_per_launch` (an assumption: tens of µs of Python and launch a
    kernel) only needs to be far below the device time per launch."""
    k = thread000_launches_per_call()
    out = []
    for rec in results.for_lesson("01_broadcast_matmul", kinds=("reported",), gpu_only=True):
        v = rec.lesson("01_broadcast_matmul")["headline"]["variants"]
        first, second = v.get("broadcast matmul"), v.get("broadcast matmul (views made once)")
        if not first or not second or "without" not in first.get("note", "").lower():
            continue  # only the run whose first variant had no synchronize
        n = int(first["calls"])
        a, b = first["total_s"], second["total_s"]
        per_call = (a + b) / (2 * n)
        op = Op("launch", host_per_launch, per_call / k)
        no_sync = [op] * (k * n)
        with_sync = ([op] * (k - 1) + [Op("launch", host_per_launch, per_call / k, sync=True)]) * n
        t = schedule(no_sync + with_sync, queue_depth=queue_depth)
        pa = t.slots[len(no_sync) - 1].cpu_end
        out.append(ThreadQueue(rec.label(), (a, b), n, k, queue_depth, per_call, (pa, t.total - pa)))
    return out


def implicit_syncs_example(x):
    """A training-loop fragment with four hidden synchronizations (see host_syncs)."""
    loss = (x * 2).pow(2).mean()
    print(f"loss {loss:.3f}")  # formats a tensor: reads its value
    if loss > 1:  # a tensor in an if: reads its value
        x = x / 2
    kept = x[x > 0]  # boolean mask: the output size depends on the data
    return kept.sum().item()  # .item(): reads the value


# --- try it on your own function ---------------------------------------------------------


@dataclass
class Compared:
    """Every wrong timer next to the harness on one function, with each ratio decided by the noise rule."""

    timings: list[Timing]  # the first call, then the last round's wrong timers, then the harness
    ratios: dict[str, noise.Ratio]  # wrong timer label -> wrong / harness, one value per round
    rounds: int

    def verdicts(self) -> list[str]:
        out = []
        for label, r in self.ratios.items():
            out.append(f"{label:22s} " + r.say("reports {r:.3g}× the harness median",
                                               tie="agrees with the harness ({r:.2f}×)"))
        return out

    def __str__(self) -> str:
        return (timing.table(self.timings) + f"\n\nwrong / harness, over {self.rounds} alternating rounds "
                "(the first call: one cold sample, it cannot be repeated):\n" + "\n".join(self.verdicts()))

    def __repr__(self) -> str:
        return str(self)


def compare(fn, *args, min_run_time: float = 0.05, rounds: int = noise.ROUNDS, max_time: float = 8.0) -> Compared:
    """Every wrong timer and the harness on `fn(*args)`. Use it on your own function.

    The first call is timed once (it is only cold if nothing ran `fn` before in this process). The
    other wrong timers and the harness then run in alternating rounds, and each wrong / harness
    ratio is decided by the noise rule: said when the rounds agree, "not decided" when they do not."""
    if not callable(fn):
        raise ValueError("compare(fn, *args) needs a function first, e.g. compare(torch.mm, a, b).")
    first = timing.wrong_first_call(fn, *args)
    timers = {
        "no sync": lambda: timing.wrong_no_sync(fn, *args, repeats=20),
        "single run": lambda: timing.wrong_single_run(fn, *args),
        "mean incl. cold start": lambda: timing.wrong_mean_with_cold_start(fn, *args),
        "one CPU thread": lambda: timing.wrong_one_thread(fn, *args, min_run_time=min_run_time),
        "harness": lambda: timing.measure(fn, *args, label="harness", min_run_time=min_run_time),
    }
    per: dict[str, list[float]] = {n: [] for n in timers}
    last: dict[str, Timing] = {}
    start, names = time.perf_counter(), list(timers)
    for r in range(noise.MAX_ROUNDS):
        for n in names if r % 2 == 0 else names[::-1]:
            last[n] = timers[n]()
            per[n].append(last[n].median)
        done = r + 1
        elapsed = time.perf_counter() - start
        ratios = {n: noise.Ratio([a / h for a, h in zip(per[n], per["harness"])], num=n, den="harness")
                  for n in names[:-1]}
        if done < noise.MIN_ROUNDS:
            continue
        if (done >= rounds and all(x.decided for x in ratios.values())) or elapsed * (done + 1) / done > max_time:
            break
    ratios = {"first call": noise.from_timings(first, last["harness"]), **ratios}
    return Compared([first, *(last[n] for n in names)], ratios, done)


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
            w, h = (Timing(d[side]["label"], d[side]["median"], d[side]["iqr"], [], 1, "recorded", "recorded")
                    for side in ("wrong", "honest"))
            ratio = noise.Ratio(d["paired_ratios"]) if d.get("paired_ratios") else noise.from_timings(w, h)
            lines.append(f"  {k.replace('_', ' '):22s} wrong {fmt_time(w.median):>9}   harness {fmt_time(h.median):>9}"
                         f"   ({ratio.say('{r:.3g}×')})")
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
     "demos": {key: {"mistake", "shape", "wrong": T, "honest": T[, "flushed": T][, "paired_ratios": [r, ...]]}},
     "sim": {"wrong" | "harness" | "order": [one ratio per round]}}
    with T = {"label", "median", "iqr", "samples", "calls_per_sample", "method"} (seconds).
    Demo keys: no_sync, first_call, data_in_timed_region, single_run,
    mean_with_cold_start, one_thread, hot_cache. "sim" holds `sim_estimates` (the pretend GPU's traps).
    """
    dev = pick(device)
    demos = run_all(dev, min_run_time=0.02 if quick else 0.2, flush=not quick)
    sim = sim_estimates(max_time=2.0 if quick else 6.0)
    return {"quick": bool(quick), "device": dev.type, "sizes": asdict(sizes(dev)),
            "demos": {d.key: d.as_dict() for d in demos}, "sim": {k: list(e.values) for k, e in sim.items()}}


def targets(device, section: dict) -> list[dict]:
    """This lesson's bars, judged on its recorded section (the timing comparisons unit tests must not make).

    Each value is the median of paired rounds. Bars: fresh random data costs more than the op it feeds
    (> 1.2×, on any device); on the pretend GPU, trap 1's wrong way ranks 'no sync' faster (model 5.2×,
    bar 1.67×), trap 2's sync inside costs at least 80% of its launch and sync (model 1.30×, bar 1.24×),
    and trap 3's second-timed variant reports more than the first (model 2.0×, bar 1.5×)."""
    import statistics

    out = []
    rand = section.get("demos", {}).get("data_in_timed_region")
    if rand:
        r = statistics.median(rand.get("paired_ratios") or [rand["wrong"]["median"] / rand["honest"]["median"]])
        out.append({"name": "00 randn inside the timed call / the op alone", "value": r, "bar": "> 1.2 (any device)",
                    "ok": r > 1.2})
    sim = section.get("sim", {})
    bars = {"wrong": ("00 pretend GPU, trap 1: wrong way's 'syncs inside' / 'no sync'", 1 / 0.6),
            "harness": ("00 pretend GPU, trap 2: harness's 'syncs inside' / 'no sync'",
                        1 + 0.8 * (SIM_LAUNCH + SIM_SYNC) / SIM_KERNEL),
            "order": ("00 pretend GPU, trap 3: second-timed total / first, thread's order", 1.5)}
    for key, (name, bar) in bars.items():
        if sim.get(key):
            v = statistics.median(sim[key])
            out.append({"name": name, "value": v, "bar": f">= {bar:.3g} (any machine)", "ok": v >= bar})
    return out
