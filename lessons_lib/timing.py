"""The one honest timing harness, and the wrong timers lesson 00 takes apart.

`measure` wraps `torch.utils.benchmark.Timer.blocked_autorange`, which synchronizes the
GPU around each block of calls. On top of it we warm up, use every CPU thread (the Timer's
default is one), keep every sample, and report the median and inter-quartile range.
`measure(..., flush_cache=True)` times calls one at a time instead, with CUDA events on a
GPU, so that a cache flush can sit between calls without being timed.
"""
from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.utils.benchmark as tbench

from .display import count
from .hardware import last_level_cache_bytes, pick, synchronize

MIN_SAMPLES = 7
WARMUP_CALLS = 3
NOISY_SPREAD = 0.25  # IQR / median above this: the samples disagree too much to trust small differences
MAX_FLUSHED_CALLS = 200  # per-call flushing is for ops slower than the flush; never loop thousands of times


def fmt_time(seconds: float) -> str:
    """Three significant figures, in the largest unit that keeps them >= 1 (0.9996 s is "1 s")."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(float(f"{seconds:.3g}")) >= scale:
            return f"{float(f'{seconds / scale:.3g}'):g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


@dataclass
class Timing:
    """Seconds per call of one function: the median and IQR of many samples."""

    label: str
    median: float
    iqr: float
    samples: list[float] = field(repr=False)  # seconds per call, one entry per sample
    calls_per_sample: int
    method: str
    device: str

    @property
    def spread(self) -> float:
        """IQR relative to the median; under ~0.05 is a steady measurement."""
        return self.iqr / self.median if self.median else float("nan")

    @property
    def least(self) -> float:
        """The fastest sample: the least disturbed one. Noise on a shared machine only adds time (a
        descheduled thread, another process in the cache), so where a busy machine must still rank two
        things that do the same work in different ways, compare this, not the median."""
        return min(self.samples) if self.samples else self.median

    @property
    def noisy(self) -> bool:
        """The harness flags its own spread: a busy machine shows as a wide IQR."""
        return len(self.samples) > 1 and self.spread > NOISY_SPREAD

    def noise_note(self) -> str:
        if not self.noisy:
            return ""
        return f"spread {self.spread:.0%} of the median: the machine is busy or the op is erratic; rerun before trusting it"

    def __str__(self) -> str:
        return (
            f"{self.label}: {fmt_time(self.median)} per call "
            f"(IQR {fmt_time(self.iqr)}, {count(len(self.samples), 'sample')} × "
            f"{count(self.calls_per_sample, 'call')})"
        )

    def as_dict(self, with_samples: bool = False) -> dict:
        d = asdict(self)
        if not with_samples:
            d.pop("samples")
        return d


def _stats(samples: list[float]) -> tuple[float, float]:
    if len(samples) < 2:
        return samples[0], 0.0
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return statistics.median(samples), q[2] - q[0]


def timing_device(device=None) -> torch.device:
    """Where a public timing function runs, resolved once: `device.pick`'s checks (a device type the course
    does not run on, a GPU this machine lacks: one sentence each), and `meta` refused, since a meta tensor
    has no values and takes no time (shape-only analyses take meta; timings do not)."""
    dev = pick(device)
    if dev.type == "meta":
        raise ValueError("Timings run on 'cpu' or 'cuda', not 'meta': a meta tensor has no values and takes no time.")
    return dev


def resolve_device(device, args) -> torch.device:
    """The device passed, else the first non-CPU tensor argument's (a closure has none: pass it)."""
    return torch.device(device) if device is not None else _device_of(args)


def _device_of(args) -> torch.device:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device
        if isinstance(a, (tuple, list)):
            d = _device_of(a)
            if d.type != "cpu":
                return d
    return torch.device("cpu")


def measure(
    fn,
    *args,
    label: str | None = None,
    min_run_time: float = 0.2,
    warmup: int = WARMUP_CALLS,
    rotate: list[tuple] | None = None,
    flush_cache: bool = False,
    num_threads: int | None = None,
    min_samples: int = MIN_SAMPLES,
    max_time: float | None = None,
    block: float | None = None,
    device: torch.device | str | None = None,
) -> Timing:
    """Time `fn(*args)` honestly and return its median and IQR per call.

    rotate: a list of argument tuples to cycle through, so that repeated calls do not
        find their inputs already in cache (use instead of `args`).
    flush_cache: overwrite a buffer larger than the last-level cache before every call.
    num_threads: CPU threads for the measurement; defaults to all that torch uses.
    max_time: an upper bound in seconds on the whole measurement, warm-up included (explorers
        budget with it): a block of calls starts only when the calls timed before it say it ends in
        time, so it ends within max_time plus about one call. Fewer samples are taken when it binds;
        at least one.
    block: on a CPU, seconds per sample: each sample is a block of about that many calls' worth
        (`Timer.timeit(number)` with `number` sized from a single call), not `blocked_autorange`'s
        blocks of at least 3 ms (its overhead rule: 1e-4 of a 0.3 µs timer). A busy machine's
        scheduler hands out slices of a few ms, so it interrupts nearly every 3-15 ms block and few
        of 0.5 ms ones: `Timing.least` of short blocks is the undisturbed speed (ranking, not reporting).
    device: where `fn` runs. Pass it whenever `fn` takes no tensor arguments (a closure): it is otherwise
        read from the arguments, and a zero-argument closure has none, so a GPU run would be labelled
        "cpu", timed with CPU blocks and not synchronized around the warm-up.
    """
    label = label or getattr(fn, "__name__", "fn")
    if rotate is not None and not rotate:
        raise ValueError("rotate= needs at least one tuple of arguments (or leave it out).")
    arg_sets = rotate if rotate is not None else [args]
    device = resolve_device(device, arg_sets[0])
    start = time.perf_counter()
    budget = _Budget(max_time, start)
    for k, call_args in enumerate(itertools.islice(itertools.cycle(arg_sets), max(warmup, len(arg_sets)))):
        if k and not budget.fits(1):
            break  # with max_time, a warm-up call starts only if the last one says it ends in time
        t0 = time.perf_counter()
        fn(*call_args)
        if budget.deadline is not None:  # each call waited for, so its time is known
            synchronize(device)
            budget.saw(time.perf_counter() - t0, 1)
    synchronize(device)
    if max_time is not None:
        left = max_time - (time.perf_counter() - start)
        min_run_time = max(min(min_run_time, left / 2), 1e-3)
    if flush_cache:
        return _measure_per_call(fn, arg_sets, label, device, min_run_time, min_samples, budget)

    threads = num_threads or torch.get_num_threads()
    cycle = itertools.cycle(arg_sets)
    timer = tbench.Timer(
        stmt="fn(*next(cycle))",
        globals={"fn": fn, "cycle": cycle},
        num_threads=threads,
        label=label,
    )
    if block is not None and device.type == "cpu":
        return _measure_short_blocks(timer, label, threads, block, min_run_time, min_samples, budget)
    samples, number = _autorange(timer, min_run_time, min_samples, budget, 1e-3 if device.type == "cuda" else 1e-4)
    median, iqr = _stats(samples)
    method = "torch.utils.benchmark.Timer.blocked_autorange"
    if device.type == "cpu":
        method += f" ({count(threads, 'thread')})"
    return Timing(label, median, iqr, samples, number, method, device.type)


class _Budget:
    """`max_time` as a deadline. A block of calls starts only when the last calls timed say it ends before the
    deadline (the first of each kind always runs: nothing is known before it), so a measurement ends within
    max_time plus about one call (two when a single call is longer than max_time)."""

    def __init__(self, max_time: float | None, start: float):
        self.deadline = None if max_time is None else start + max_time
        self.per_call = 0.0  # seconds per call, from the last calls timed

    def fits(self, calls: float) -> bool:
        return self.deadline is None or time.perf_counter() + calls * self.per_call <= self.deadline

    def saw(self, seconds: float, calls: int) -> None:
        self.per_call = seconds / max(calls, 1)


def _autorange(timer, min_run_time: float, min_samples: int, budget: _Budget, overhead_share=1e-4) -> tuple[list, int]:
    """`Timer.blocked_autorange` step by step (torch/utils/benchmark/utils/timer.py), on the Timer's clock (it syncs the
    GPU), with `budget` between blocks: a block grows 1, 10, 100... calls until the Timer's overhead is at most
    `overhead_share` of it and it lasts min_run_time / 1000, or it lasts over min_run_time; then blocks of that size
    to min_run_time; then, for slow calls, `Timer.timeit` blocks up to min_samples. torch's loop cannot stop (a 3 s
    max_time lasted 15× that on the H200). Its 1e-4 suits a CPU, whose overhead is a clock read (3 ms blocks); on a
    GPU it is a sync (~5-15 µs): 50-500 ms blocks, 0.3-3 s a median (h200.json). measure gives a GPU 1e-3: a time
    biased by at most 0.1%, far under the noise rule's 5% tie band, in ~5-15 ms blocks."""
    from torch.utils.benchmark.utils.common import set_torch_threads

    with set_torch_threads(timer._task_spec.num_threads):
        overhead = statistics.median(timer._timeit(0) for _ in range(5))
        number, last = 1, 0.0
        while True:
            if last and not budget.fits(number):
                number //= 10  # the next block would not end in time: keep the last size
                break
            last = timer._timeit(number)
            budget.saw(last, number)
            if (overhead / last <= overhead_share and last >= min_run_time / 1000) or last > min_run_time \
                    or number * 10 > 2147483647:
                break
            number *= 10
        samples: list[float] = []
        while sum(samples) * number < min_run_time and budget.fits(number):
            t = timer._timeit(number)
            budget.saw(t, number)
            samples.append(t / number)
    samples = samples or [last / number]  # no block fitted after the size search: its last block is the sample
    while len(samples) < min_samples and budget.fits(number + max(number // 100, 2)):
        more = timer.timeit(number).times  # already divided by the block size
        budget.saw(more[0] * number, number)
        samples.extend(more)
    return samples, number


def _measure_short_blocks(timer, label, threads, block, min_run_time, min_samples, budget) -> Timing:
    """`measure(block=...)` on a CPU: samples of about `block` seconds each (see measure)."""
    singles: list[float] = []
    for _ in range(3):  # a single call, least disturbed of three (Timer.timeit(1): 2 untimed calls, 1 timed)
        if singles and not budget.fits(3):
            break
        singles.append(timer.timeit(1).times[0])
        budget.saw(singles[-1], 1)
    number = max(1, round(block / max(min(singles), 1e-9)))
    samples: list[float] = singles if number == 1 else []  # a call as long as a block: those were samples
    while True:
        done = sum(samples) * number >= min_run_time and len(samples) >= min_samples
        if done or not budget.fits(number + max(number // 100, 2)):
            break
        samples.extend(timer.timeit(number).times)  # per call: already divided by `number`
        budget.saw(samples[-1] * number, number)
    samples, number = (samples, number) if samples else (singles, 1)  # no block fitted: the single calls
    median, iqr = _stats(samples)
    method = f"torch.utils.benchmark.Timer.timeit, blocks of ~{fmt_time(block)} ({count(threads, 'thread')})"
    return Timing(label, median, iqr, samples, number, method, "cpu")


def flush_bytes(device: torch.device) -> int:
    """Twice the measured last-level cache: one pass over it evicts what the call touched.

    (A fixed 256 MiB buffer is smaller than some servers' L3: this CPU reports 260 MiB.)"""
    return 2 * last_level_cache_bytes(device)


def _measure_per_call(fn, arg_sets, label, device, min_run_time, min_samples, budget: _Budget) -> Timing:
    """One call per sample, a cache flush before each (untimed).

    The flush writes a buffer twice the last-level cache, so the call's inputs must come back
    from DRAM, and on a CPU the cache is then full of dirty lines that must be written back as
    the call reads: this is why a flushed time can exceed a rotated one (rotation leaves clean,
    evicted inputs). Both are honest; they answer "cold inputs" vs "inputs not just touched".
    """
    on_gpu = device.type == "cuda"
    scratch = torch.empty(flush_bytes(device) // 4, dtype=torch.float32, device=device)
    samples: list[float] = []
    spent = 0.0
    for call_args in itertools.cycle(arg_sets):
        if samples and not budget.fits(1):  # one flush and call, as long as the last (the wall clock)
            break
        t_wall = time.perf_counter()
        scratch.fill_(1.0)  # evicts the inputs from cache
        if on_gpu:  # events time the call alone, on the GPU
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn(*call_args)
            end.record()
            end.synchronize()
            dt = begin.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            fn(*call_args)
            dt = time.perf_counter() - t0
        budget.saw(time.perf_counter() - t_wall, 1)
        samples.append(dt)
        spent += dt
        if spent >= min_run_time and len(samples) >= min_samples:
            break
        if len(samples) >= max(MAX_FLUSHED_CALLS, min_samples):
            break  # a tiny op: more flushes would cost seconds and add nothing
    median, iqr = _stats(samples)
    method = "CUDA events, cache flushed per call" if on_gpu else "perf_counter, cache flushed per call"
    return Timing(label, median, iqr, samples, 1, method, device.type)


def table(timings: list[Timing], baseline: str | None = None) -> str:
    """A text table of timings, with the speed-up over `baseline` if named."""
    base = next((t for t in timings if t.label == baseline), None)
    width = max(len(t.label) for t in timings)
    lines = []
    for t in timings:
        line = f"{t.label.ljust(width)}  {fmt_time(t.median):>9}  ± {fmt_time(t.iqr / 2):>9}"
        if base is not None:
            line += f"   {base.median / t.median:6.2f}× vs {base.label}"
        if t.noisy:
            line += "   ⚠ noisy"
        lines.append(line)
    noisy = [t for t in timings if t.noisy]
    if noisy:
        lines.append(f"⚠ {noisy[0].label}: {noisy[0].noise_note()}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The wrong ways. Each is a mistake from a forum thread; lesson 00 shows what it reports.
# Never use these for a real measurement.
# --------------------------------------------------------------------------------------


def _wrong(label, median, samples, method, device) -> Timing:
    _m, iqr = _stats(samples) if len(samples) > 1 else (median, 0.0)
    return Timing(label, median, iqr, samples, 1, "WRONG: " + method, device)


# Each takes device= like `measure`: where `fn` runs, read from its tensor arguments when not given (a
# zero-argument closure has none, so a GPU run would be synchronized as, and labelled, "cpu").


def wrong_no_sync(fn, *args, repeats: int = 100, label: str = "no sync", device=None) -> Timing:
    """Mistake: wall-clock a loop without synchronizing. On a GPU this times the launches,
    not the kernels, because the calls return before the GPU has finished."""
    device = resolve_device(device, args)
    fn(*args)
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn(*args)
    per_call = (time.perf_counter() - t0) / repeats
    return _wrong(label, per_call, [per_call], "perf_counter around a loop, no synchronize", device.type)


def wrong_first_call(fn, *args, label: str = "first call", device=None) -> Timing:
    """Mistake: time one cold call. It pays for lazy initialisation: CUDA context, cuBLAS
    handles, kernel loading, allocator growth."""
    device = resolve_device(device, args)
    synchronize(device)
    t0 = time.perf_counter()
    fn(*args)
    synchronize(device)
    dt = time.perf_counter() - t0
    return _wrong(label, dt, [dt], "one cold call", device.type)


def wrong_single_run(fn, *args, label: str = "single run", device=None) -> Timing:
    """Mistake: one warm call. Synchronized, but a single sample is at the mercy of noise."""
    device = resolve_device(device, args)
    fn(*args)
    synchronize(device)
    t0 = time.perf_counter()
    fn(*args)
    synchronize(device)
    dt = time.perf_counter() - t0
    return _wrong(label, dt, [dt], "one warm call", device.type)


def wrong_mean_with_cold_start(fn, *args, repeats: int = 20, label: str = "mean incl. cold start",
                               device=None) -> Timing:
    """Mistake: average every call including the first. One slow outlier drags the mean."""
    device = resolve_device(device, args)
    samples = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn(*args)
        synchronize(device)
        samples.append(time.perf_counter() - t0)
    return _wrong(label, statistics.fmean(samples), samples, "mean of per-call times, cold call included", device.type)


def wrong_one_thread(fn, *args, label: str = "one CPU thread", **kw) -> Timing:
    """Mistake: `torch.utils.benchmark.Timer`'s default of one CPU thread. Harmless on a GPU;
    on CPU it times a machine with one core."""
    t = measure(fn, *args, label=label, num_threads=1, **kw)
    t.method = "WRONG: " + t.method
    return t
