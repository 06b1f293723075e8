"""Lesson 00's demos: each mistake that times real torch code, next to the honest harness.

`sizes` picks the demos' shapes from the device; a `Demo` holds what the wrong way reports next to
what `timing.measure` measures, with a verdict through the noise rule. The pretend GPU's traps
(seed 000) are in pretend_gpu.py.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import claim_table, noise, timing
from ..device import CPU_THREADS, check_fits, last_level_cache_bytes, pick
from ..timing import Timing, fmt_time
from .variants import pseudo_linear, pseudo_linear_fresh_input

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
    paired_extra: dict = field(default_factory=dict)  # extra timing's name -> its Ratio to `wrong`, paired

    @property
    def ratio(self) -> float:
        """The wrong number divided by the honest median."""
        return self.wrong.median / self.honest.median

    @property
    def estimate(self) -> noise.Ratio:
        """wrong / honest through the noise rule: the paired rounds where the demo ran them, else the
        two measurements with their spreads added (a one-sample wrong way has no spread of its own)."""
        return self.paired if self.paired is not None else noise.from_timings(self.wrong, self.honest)

    def _inverted(self) -> bool:
        """One thread decided faster than torch's threads: said as "one thread ran N× faster"."""
        est = self.estimate
        return self.key == "one_thread" and est.decided and est.median < 1

    def _shown(self) -> noise.Ratio:
        """wrong / honest as the table prints it and the verdict quotes it, named by the rows; for one thread that
        ran faster than torch's threads, inverted (honest / wrong): both then say "N× faster" with one number."""
        est = self.estimate
        if self._inverted():
            return dataclasses.replace(est, values=[1 / v for v in est.values], num=self.honest.label,
                                       den=self.wrong.label)
        return dataclasses.replace(est, num=self.wrong.label, den=self.honest.label)

    def verdict(self) -> str:
        """What this run measured, or "not decided on this run" when its spread cannot decide it. Its number is
        the one the demo's table prints (`claim_table.ratio_text` of the same Ratio)."""
        if self.key == "one_thread" and self.shape.get("threads") == 1:
            return self._one_thread_now()
        est = self._shown()
        if not est.decided:
            return est.not_decided()
        r, x = est.median, claim_table.ratio_text(est.median)
        if abs(math.log(r)) < math.log(1.15):
            return f"the two agree within 15% ({x})"
        # decided by the size of the gap, not by agreeing rounds: say how wide the spread was
        wide = f"; spread {est.spread:.0%}, far smaller than the gap" if est.spread > est.rel_tol else ""
        if self._inverted():  # one thread really was faster here: not a number too low
            n = self.shape.get("threads")
            return (f"one thread ran {x} faster than {f'{n} threads' if n else 'every thread'}{wide}: this machine's "
                    "cores are busy (see below), and one thread is the right count for it")
        return (f"the wrong way reports {x} the honest median"
                + (f" ({1 / r:.3g}× too low{wide})" if r < 1 else f" ({wide[2:]})" if wide else ""))

    def _one_thread_now(self) -> str:
        """torch runs on one thread now (setup() chose it on a busy machine): the Timer's default times what the
        reader's code runs, so it is not the wrong number here; every core's timing says why."""
        out = "torch runs on one thread here now (setup() chose it), so the Timer's default times what your code runs"
        for name, r in self.paired_extra.items():
            x = claim_table.ratio_text(r.median)
            if not r.decided:
                out += f"; {name}: {r.not_decided()}"
            elif abs(math.log(r.median)) < math.log(1.15):
                out += f"; {name} take about the same time ({x})"
            else:
                out += (f"; {name} take {x} one thread's time"
                        + (": the cores are busy, so one thread is right here" if r.median > 1 else
                           ": on a quieter machine every core is the count to time"))
        return out

    def paired_ratios(self) -> list[noise.Ratio]:
        """The paired rounds' ratios, named by this demo's rows (wrong / honest, each extra / wrong): what its
        table prints and its verdict quotes (`claim_table`)."""
        if self.paired is None:
            return []
        return [self._shown()] + [dataclasses.replace(r, num=self.extra[name].label, den=self.wrong.label)
                                  for name, r in self.paired_extra.items()]

    def __str__(self) -> str:
        shape = ", ".join(f"{k}={v}" for k, v in self.shape.items())
        if self.paired is not None:  # the paired rounds' ratio in the table, the number the verdict quotes
            timings = [self.wrong, self.honest, *self.extra.values()]
            how = [f"  {t.label}: {t.method.removeprefix('WRONG: ')}" for t in timings if t.method.startswith("WRONG")]
            return "\n".join([f"{self.mistake} ({shape}, {self.honest.device})", *how,
                              claim_table.table(timings, self.paired_ratios()), "  → " + self.verdict()])
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


def _paired(wrong_label: str, wrong_fn, honest_fn, min_run_time: float,
            device: torch.device) -> tuple[Timing, Timing, noise.Ratio]:
    """Both sides re-timed in alternating rounds by the noise rule (each side is a zero-argument
    call the harness can time, on `device`: a closure cannot tell the harness where it runs).
    Returns the two sides over the rounds (median and IQR of the rounds' medians) and the paired ratio."""
    cmp = noise.compare({wrong_label: wrong_fn, "harness": honest_fn}, min_run_time=min_run_time / 4,
                        pairs=[(wrong_label, "harness")], max_time=5.0, device=device)  # the rule's 10-15 rounds
    return cmp.timing(wrong_label), cmp.timing("harness"), cmp.ratio(wrong_label, "harness")


def _square(n: int, dev: torch.device) -> torch.Tensor:
    return torch.randn(n, n, device=dev)


# --- the mistakes, one function each -----------------------------------------------------


def demo_no_sync(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """Wall-clock a loop of matmuls with no synchronize (seed 001), next to the harness.

    On a GPU the loop only queues kernels, so it times the launches. On a CPU every op
    finishes before it returns, so the two numbers agree: there is nothing to miss.
    """
    dev = timing.timing_device(device)
    n = _check_size(n, "n", 1, 16384) or sizes(dev).matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, dev, what=f"a {n}×{n} matmul")
    a = _square(n, dev)
    wrong = timing.wrong_no_sync(torch.mm, a, a, repeats=20, label="no synchronize", device=dev)
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time, device=dev)
    return Demo("no_sync", "Timing a loop without synchronizing", {"matmul": f"{n}×{n}"}, wrong, honest)


def first_call_in_fresh_process(device: str, n: int, min_run_time: float) -> dict:
    """Run in a child process: time the first matmul a fresh Python ever runs, then the harness."""
    dev = torch.device(device)
    a = _square(n, dev)  # on a GPU this creates the CUDA context, before the clock starts
    first = timing.wrong_first_call(torch.mm, a, a, label="first call", device=dev)
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time, device=dev)
    return {"wrong": first.as_dict(with_samples=True), "honest": honest.as_dict(with_samples=True)}


def demo_first_call(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """Time the very first call (seed 001 has no warm-up). Runs in a fresh Python process,
    so that it is really the first: cuBLAS handles and kernel loading on a GPU, library
    initialisation and fresh memory pages on a CPU. Rerunning it gives a cold call again."""
    dev = timing.timing_device(device)
    n = _check_size(n, "n", 1, 16384) or sizes(dev).matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, dev, what=f"a {n}×{n} matmul")
    code = ("import json, sys; from lessons_lib.lesson00_timing.demos import first_call_in_fresh_process as f; "
            f"print(json.dumps(f({str(dev)!r}, {int(n)}, {float(min_run_time)})))")
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # so the child imports this same lessons_lib
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError("The fresh Python process for the first-call demo failed:\n" + proc.stderr[-2000:])
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return Demo("first_call", "Timing the first call (in a fresh Python process)", {"matmul": f"{n}×{n}"},
                Timing(**data["wrong"]), Timing(**data["honest"]))


def demo_random_data(device=None, rows: int | None = None, width: int | None = None,
                     min_run_time: float = 0.2) -> Demo:
    """Time `f(torch.randn(...))` (seed 003) against `f(x)` with `x` made beforehand."""
    dev = timing.timing_device(device)
    s = sizes(dev)
    rows = _check_size(rows, "rows", 1, 1 << 24) or s.rows
    width = _check_size(width, "width", 1, 1 << 20) or s.width
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * rows * width * 4, dev, what=f"a {rows}×{width} input")
    x = torch.randn(rows, width, device=dev)
    w, b = torch.randn(width, device=dev), torch.randn(width, device=dev)
    wrong, honest, paired = _paired("randn inside", lambda: pseudo_linear_fresh_input(rows, w, b),
                                    lambda: pseudo_linear(x, w, b), min_run_time, dev)
    wrong.method = "WRONG: harness, but the input is made inside the timed call"
    return Demo("data_in_timed_region", "Generating the input inside the timed region",
                {"x": f"{rows}×{width}"}, wrong, honest, paired=paired)


def demo_single_run(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """One warm, synchronized call: honest in method, but one sample is one roll of the dice."""
    dev = timing.timing_device(device)
    n = _check_size(n, "n", 1, 16384) or sizes(dev).matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, dev, what=f"a {n}×{n} matmul")
    a = _square(n, dev)
    wrong = timing.wrong_single_run(torch.mm, a, a, label="one run", device=dev)
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time, device=dev)
    return Demo("single_run", "Timing a single run", {"matmul": f"{n}×{n}"}, wrong, honest)


def demo_mean(device=None, n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """The mean of per-call times with the first call included: outliers drag it up."""
    dev = timing.timing_device(device)
    n = _check_size(n, "n", 1, 16384) or sizes(dev).matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, dev, what=f"a {n}×{n} matmul")
    a = _square(n, dev)
    wrong = timing.wrong_mean_with_cold_start(torch.mm, a, a, repeats=20, label="mean of 20", device=dev)
    honest = timing.measure(torch.mm, a, a, label="harness", min_run_time=min_run_time, device=dev)
    return Demo("mean_with_cold_start", "Averaging 20 calls, the first included", {"matmul": f"{n}×{n}"},
                wrong, honest)


def demo_one_thread(n: int | None = None, min_run_time: float = 0.2) -> Demo:
    """torch.utils.benchmark.Timer's default of one CPU thread, against the harness at the threads torch runs
    with now (`torch.get_num_threads()`: what the reader's code gets), and, where that is fewer, every core
    (`CPU_THREADS`: setup() may have chosen one thread on a busy machine). Paired, alternating rounds.

    Which number is right depends on the threads the code really runs with: the verdict says which.
    Always on CPU tensors: the mistake is about CPU timings (on a GPU it is harmless)."""
    n = _check_size(n, "n", 1, 16384) or sizes("cpu").matmul
    _check_seconds(min_run_time, "min_run_time")
    check_fits(3 * n * n * 4, "cpu", what=f"a {n}×{n} matmul")
    cpu = torch.device("cpu")
    a = _square(n, cpu)
    now = torch.get_num_threads()
    counts = {"Timer default": 1, "harness": now}
    every = f"all {CPU_THREADS} threads" if CPU_THREADS > now else None
    if every:
        counts[every] = CPU_THREADS
    pairs = [("Timer default", "harness")] + ([(every, "Timer default")] if every else [])
    cmp = noise.compare({k: (lambda: torch.mm(a, a)) for k in counts}, min_run_time=min_run_time / 4, pairs=pairs,
                        max_time=6.0, device=cpu, num_threads=counts)  # the rule's 10-15 rounds of up to 3
    wrong, honest = cmp.timing("Timer default"), cmp.timing("harness")  # the rounds the verdict reads
    wrong.method = "WRONG: torch.utils.benchmark.Timer.blocked_autorange (1 thread)"
    honest.label = f"harness ({now} thread{'s' if now > 1 else ''}, as torch runs now)"
    extra = {every: cmp.timing(every)} if every else {}
    return Demo("one_thread", "Timing with one CPU thread", {"matmul": f"{n}×{n}", "threads": now}, wrong, honest,
                extra=extra, paired=cmp.ratio("Timer default", "harness"),
                paired_extra={every: cmp.ratio(every, "Timer default")} if every else {})


def demo_hot_cache(device=None, nbytes: int | None = None, rotate_bytes: int | None = None,
                   min_run_time: float = 0.2, flush: bool = True) -> Demo:
    """A memory-bound op (a sum) on one small input, again and again, so it sits in cache,
    against the same op rotating through copies that together far exceed the cache.
    With `flush=True`, also the harness's per-call cache flush."""
    dev = timing.timing_device(device)
    s = sizes(dev)
    nbytes = _check_size(nbytes, "nbytes", 4096, 1 << 34) or s.cache_bytes
    rotate_bytes = _check_size(rotate_bytes, "rotate_bytes", 4096, 1 << 36) or s.rotate_bytes
    _check_seconds(min_run_time, "min_run_time")
    copies = max(2, rotate_bytes // nbytes)
    check_fits(copies * nbytes + (timing.flush_bytes(dev) if flush else 0), dev, what="the cache demo's buffers")
    bufs = [torch.empty(nbytes // 4, device=dev).fill_(1.0) for _ in range(copies)]  # fill: touch every page
    ring = itertools.cycle(bufs)
    wrong, honest, paired = _paired("same input", lambda: torch.sum(bufs[0]), lambda: torch.sum(next(ring)),
                                    min_run_time / 2, dev)
    wrong.method = "WRONG: harness, but the same input every call (hot cache)"
    honest.label = f"rotate {copies} copies"
    extra = {}
    if flush:  # each flushed call writes twice the cache first: a few dozen calls, not hundreds
        extra["flushed"] = timing.measure(torch.sum, bufs[0], label="flush_cache=True", flush_cache=True,
                                          min_run_time=min(min_run_time, 0.001), min_samples=5, max_time=1.5,
                                          device=dev)
    shape = {"input": timing_bytes(nbytes), "rotated": f"{copies} × {timing_bytes(nbytes)}"}
    if copies * nbytes < 2 * last_level_cache_bytes(dev):
        shape["rotated"] += f" (under twice the {timing_bytes(last_level_cache_bytes(dev))} cache: partly cached)"
    return Demo("hot_cache", "Timing an input that sits in cache", shape, wrong, honest, extra, paired)


def timing_bytes(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n / 1024:g} KiB"
