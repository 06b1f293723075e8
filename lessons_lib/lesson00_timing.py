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

import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import results, timing
from .device import check_fits, last_level_cache_bytes, pick
from .display import show_source  # noqa: F401  (the notebook calls L.show_source)
from .launch_queue import Op, SimulatedGPU, schedule  # noqa: F401  (the notebook uses them)
from .syncs import host_syncs  # noqa: F401  (the notebook uses it)
from .lesson00_exercise import (SLOW, STEADY, FakeWorkload, TooManyCalls, broken_benchmark,  # noqa: F401 (for
                                check_exercise, starter_source)  # the notebook)
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


def sizes(device=None) -> Sizes:
    """Default shapes for `device`. A CPU gets shapes that time in milliseconds.

    The cache demo is sized from the measured last-level cache (a GPU's L2, a CPU's L3): its
    input fits in a quarter of it, and the rotated copies together are four times its size."""
    dev = pick(device)
    llc = last_level_cache_bytes(dev)
    rotate = max(64 * MiB, 4 * llc)
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

    @property
    def ratio(self) -> float:
        """The wrong number divided by the honest median."""
        return self.wrong.median / self.honest.median

    def verdict(self) -> str:
        """What this run measured (it can differ from machine to machine), and whether to trust it."""
        r = self.ratio
        if abs(math.log(r)) < math.log(1.15):
            text = f"the two agree within 15% ({r:.2f}×)"
        else:
            text = f"the wrong way reports {r:.3g}× the honest median" + (f" ({1 / r:.3g}× too low)" if r < 1 else "")
        noisy = [t for t in (self.honest, *self.extra.values()) if t.noisy]
        if noisy:
            text += f"; but {noisy[0].noise_note()}"
        return text

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
    wrong = timing.measure(pseudo_linear_fresh_input, rows, w, b, label="randn inside", min_run_time=min_run_time)
    wrong.method = "WRONG: harness, but the input is made inside the timed call"
    honest = timing.measure(pseudo_linear, x, w, b, label="harness", min_run_time=min_run_time)
    return Demo("data_in_timed_region", "Generating the input inside the timed region",
                {"x": f"{rows}×{width}"}, wrong, honest)


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
    nbytes = _check_size(nbytes, "nbytes", 4096, 1 << 34) or s.cache_bytes
    rotate_bytes = _check_size(rotate_bytes, "rotate_bytes", 4096, 1 << 36) or s.rotate_bytes
    _check_seconds(min_run_time, "min_run_time")
    copies = max(2, rotate_bytes // nbytes)
    check_fits(copies * nbytes + (timing.flush_bytes(dev) if flush else 0), dev, what="the cache demo's buffers")
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


# --- seed 000's sync-inside mistake, on the pretend GPU of launch_queue -------------


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


# The pretend GPU's costs in this demo: 2 ms of device work a call, 0.5 ms for the host to issue
# it and 0.1 ms for a synchronize. Real launches cost microseconds; these are scaled up so that a
# wall clock on a busy machine resolves them. What matters is the shape: the host's cost is
# hidden behind device work only when the host can run ahead.
SIM_KERNEL, SIM_LAUNCH, SIM_SYNC = 0.002, 0.0005, 0.0001


def demo_sync_in_one_variant(min_run_time: float = 0.2) -> dict[str, Timing]:
    """Seed 000's loop: a wall clock around each variant, one of which synchronizes inside.

    Both variants queue the same kernel on a pretend GPU with a non-zero launch and sync cost.
    The wrong way times 20 calls with a wall clock and no synchronize of its own: the variant
    without a sync looks as fast as its launches. The harness waits for the GPU after each block
    of calls, and shows the other half of the story: the sync inside is a real cost too, since
    the host can no longer issue the next launch while the device works.
    """
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


def _harness_with_sync(fn, gpu, name, min_run_time):
    """The harness on a pretend GPU: its block of calls ends with the pretend GPU's synchronize,
    as torch.utils.benchmark ends each block with torch.cuda.synchronize()."""
    calls = 50

    def block():
        for _ in range(calls):
            fn()
        gpu.synchronize()

    t = timing.measure(block, label=f"{name} · harness", min_run_time=min_run_time)
    scaled = [x / calls for x in t.samples]
    return Timing(t.label, t.median / calls, t.iqr / calls, scaled, t.calls_per_sample * calls,
                  t.method + f", {calls} calls then one synchronize per sample", t.device)


def sync_timeline(calls: int = 4):
    """The same two variants in the model (launch_queue.schedule): when each call is issued and
    run. With a sync inside, the device idles while the host issues the next launch."""
    inside = [Op(f"call {i}", SIM_LAUNCH, SIM_KERNEL, sync=True) for i in range(calls)]
    free = [Op(f"call {i}", SIM_LAUNCH, SIM_KERNEL) for i in range(calls)] + [Op("sync", 0.0, 0.0, sync=True)]
    return {"syncs inside": schedule(inside, sync_cost=SIM_SYNC), "no sync": schedule(free, sync_cost=SIM_SYNC)}


def implicit_syncs_example(x):
    """A training-loop fragment with four hidden synchronizations (see host_syncs)."""
    loss = (x * 2).pow(2).mean()
    print(f"loss {loss:.3f}")  # formats a tensor: reads its value
    if loss > 1:  # a tensor in an if: reads its value
        x = x / 2
    kept = x[x > 0]  # boolean mask: the output size depends on the data
    return kept.sum().item()  # .item(): reads the value


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
