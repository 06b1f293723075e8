"""Which device we run on, what it is, and whether a job fits on it.

Every lesson asks this module three questions: which device should I use, how do I
describe it next to a number, and will this shape fit before I allocate it.
`synchronize` and `last_level_cache_bytes` live in hardware.py (below timing and compiling, which
this module imports inside functions) and are re-exported here.
"""
from __future__ import annotations

import traceback
import datetime
import gc
import os
import platform
import sys
from dataclasses import asdict, dataclass

import torch

from .hardware import COURSE_DEVICES, _parse_size, has_cuda, last_level_cache_bytes, pick, synchronize  # noqa: F401  (re-exported)
from .host import _host_available_bytes, _host_total_bytes  # noqa: F401  (torch-free, for the doctor; re-exported)

# The share of free memory a widget or sweep may plan to use. The rest is headroom for
# the allocator's rounding, cuBLAS workspaces and whatever the reader already holds.
USABLE_FRACTION = 0.7


class DoesNotFit(ValueError):
    """A shape would not fit in memory. The message says what to change."""


def is_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@dataclass
class DeviceInfo:
    """Everything a recorded number must name about the machine that produced it."""

    kind: str  # "cuda" or "cpu"
    name: str
    sm_count: int | None
    total_memory: int | None  # bytes
    torch: str
    cuda: str | None
    driver: str | None
    capability: str | None
    threads: int
    colab: bool
    date: str

    def line(self) -> str:
        mem = f", {self.total_memory / 2**30:.0f} GiB" if self.total_memory else ""
        sms = f", {self.sm_count} SMs" if self.sm_count else ""
        extra = f", CUDA {self.cuda}" if self.cuda else f", {self.threads} thread{'s' if self.threads != 1 else ''}"
        return f"{self.name} ({self.kind}{sms}{mem}) · torch {self.torch}{extra}"

    def slug(self) -> str:
        """A file-name-safe id, one recorded-results file per device name."""
        base = self.name.lower().replace("nvidia", "").strip()
        keep = "".join(c if c.isalnum() else "-" for c in base)
        return "-".join(p for p in keep.split("-") if p) or self.kind

    def as_dict(self) -> dict:
        return asdict(self)


def _driver_version() -> str | None:
    try:
        with open("/proc/driver/nvidia/version") as f:
            first = f.readline()
        for word in first.split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    except OSError:
        pass
    return None


def describe(device: torch.device | str | None = None) -> DeviceInfo:
    dev = pick(device)
    today = datetime.date.today().isoformat()
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        return DeviceInfo(
            kind="cuda",
            name=props.name,
            sm_count=props.multi_processor_count,
            total_memory=props.total_memory,
            torch=torch.__version__,
            cuda=torch.version.cuda,
            driver=_driver_version(),
            capability=f"{props.major}.{props.minor}",
            threads=torch.get_num_threads(),
            colab=is_colab(),
            date=today,
        )
    return DeviceInfo(
        kind=dev.type,
        name=_cpu_name() if dev.type == "cpu" else dev.type,
        sm_count=None,
        total_memory=_host_total_bytes(),
        torch=torch.__version__,
        cuda=None,
        driver=None,
        capability=None,
        threads=torch.get_num_threads(),
        colab=is_colab(),
        date=today,
    )


CPU_THREADS = torch.get_num_threads()  # torch's own choice at start-up (one a core); setup() may lower it
THREAD_PROBE_OPS, THREAD_PROBE_ELEMENTS = 16, 1 << 16  # 16 adds of 256 KiB: each above ATen's grain size, so each
# is one parallel region that every thread joins, as the hundreds of small ops of a training step are


def _thread_probe():
    """The default step `thread_choice` times: many short parallel regions, like a training step's ops. One
    16 MiB add (a single region of milliseconds) once kept 2 threads on a 2-core machine at load 6-7 where
    lesson 07's step then took 562.6 ms against 61.4 ms on one thread; at load 9 these 16 adds took
    0.5-2 s on 2 threads against 1 ms on one."""
    a = torch.ones(THREAD_PROBE_ELEMENTS)
    out = torch.empty_like(a)

    def probe():
        for _ in range(THREAD_PROBE_OPS):
            torch.add(a, a, out=out)

    return probe


def thread_choice(step=None, what: str = "", max_time: float = 1.0) -> tuple[int, str]:
    """(threads, sentence): how many CPU threads to time with here, now, decided by the noise rule on `step`
    (a zero-argument call: a lesson's own training step; by default `_thread_probe`), timed on all of
    torch's start-up threads and on one in paired, alternating rounds (`noise.compare(num_threads=...)`).

    A parallel op ends at a barrier that waits for its slowest thread: when other programs hold the cores,
    the OS deschedules one of torch's threads and every op waits a time slice for it (lesson 07's step
    10× slower, these small adds 500× and more, on 2 threads at load 9 on 2 cores). So all threads are
    kept only when the rounds decide they are faster, or tie; when one thread is decided faster, or the
    rounds cannot decide (a busy machine's 2-thread calls can take seconds, so few rounds fit), one thread:
    it loses at most the cores' factor, all threads on a busy machine can lose far more."""
    from . import noise
    from .display import count
    from .timing import fmt_time

    many, one = f"{CPU_THREADS} threads", "1 thread"
    if CPU_THREADS <= 1:
        return 1, "1 CPU thread: there is no thread count to choose."
    cmp = noise.compare({many: step or _thread_probe(), one: step or _thread_probe()}, pairs=[(many, one)],
                        num_threads={many: CPU_THREADS, one: 1}, min_run_time=0.01, max_time=max_time,
                        device=torch.device("cpu"))
    r = cmp.ratio(many, one)
    if r.decided and r.faster != one:
        return CPU_THREADS, (f"{CPU_THREADS} CPU threads: the noise rule decided they are not slower than one on "
                             f"{what or 'many small parallel ops'} here ({r.median:.2f}× one thread's time).")
    undo = f"torch.set_num_threads({CPU_THREADS}) undoes it."
    if r.decided:
        return 1, (f"Busy CPU: timing with 1 thread, not {CPU_THREADS}: on {what or 'many small parallel ops'}, "
                   f"{CPU_THREADS} threads took {r.median:.3g}× one thread's time here (paired rounds): other "
                   f"programs hold the cores, and a parallel op waits for its slowest thread. {undo}")
    seen = (f"over {count(len(r.values), 'paired round')}, {fmt_time(cmp.median(many))} on {CPU_THREADS} threads "
            f"against {fmt_time(cmp.median(one))} on 1")
    return 1, (f"Timing with 1 thread, not {CPU_THREADS}: the noise rule did not decide that {CPU_THREADS} threads are "
               f"faster on {what or 'many small parallel ops'} ({seen}), and a busy machine stalls every parallel op "
               f"on a descheduled thread. {undo}")


def fit_cpu_threads(step=None, what: str = "", max_time: float = 1.0) -> str:
    """Use `thread_choice`'s count (setup() calls this on a CPU; lesson 07 again on its own training step);
    a sentence when it chose fewer threads than torch's, "" when it kept them."""
    torch.set_num_threads(CPU_THREADS)
    threads, said = thread_choice(step, what, max_time)
    torch.set_num_threads(threads)
    return "" if threads == CPU_THREADS else said


def available_bytes(device: torch.device | str) -> int:
    """Bytes a job may still allocate on `device` (free memory, before our safety margin)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        # Blocks the caching allocator holds but does not use are free to us too.
        reserved = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        return free + max(reserved, 0)
    if dev.type == "meta":
        return 2**62
    return _host_available_bytes()


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def check_fits(nbytes: int, device: torch.device | str, what: str = "this shape") -> None:
    """Refuse, before allocating, a job whose estimated peak exceeds the usable memory."""
    budget = int(available_bytes(device) * USABLE_FRACTION)
    if nbytes > budget:
        raise DoesNotFit(
            f"{what} needs about {fmt_bytes(nbytes)} but only {fmt_bytes(budget)} of "
            f"{torch.device(device).type.upper()} memory is safely available. "
            "Make a dimension smaller and try again."
        )


def free_memory(device: torch.device | str | None = None) -> None:
    """Drop Python garbage and hand cached GPU blocks back, e.g. after an OOM."""
    gc.collect()
    if has_cuda() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.empty_cache()


def is_oom(err: BaseException) -> bool:
    # torch.OutOfMemoryError is new (2.5+); older releases raise torch.cuda.OutOfMemoryError
    # or, older still, a RuntimeError that says so.
    types = tuple(
        t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t
    )
    return isinstance(err, types) or (isinstance(err, RuntimeError) and "out of memory" in str(err).lower())


class oom_guard:
    """Turn an out-of-memory error into DoesNotFit after freeing what the failed job held.

    Freeing needs more than `empty_cache`: the OOM's traceback pins every frame of the failed
    step, and with them its tensors. So the frames are cleared first (their locals dropped),
    then the cache is emptied, and the DoesNotFit carries no traceback of the OOM. Tensors that
    live in the frame holding the `with` block itself cannot be cleared here: keep them in a
    function called inside the block (Lesson.run does).
    """

    def __init__(self, device: torch.device | str, what: str = "this shape"):
        self.device, self.what = device, what

    def __enter__(self):
        return self

    def __exit__(self, etype, err, tb):
        if err is None or not (is_oom(err) or isinstance(err, MemoryError)):
            return False
        traceback.clear_frames(tb)
        err.__traceback__ = None
        del err, tb
        free_memory(self.device)
        fresh = DoesNotFit(
            f"{self.what} ran out of {torch.device(self.device).type.upper()} memory. "
            "The memory was freed and the kernel is fine; make a dimension smaller."
        )
        fresh.__suppress_context__ = True
        raise fresh


def dtype_problem(dtype: torch.dtype, device: torch.device | str) -> str | None:
    """Why `dtype` cannot be used for matmul on `device`, or None if it can."""
    dev = torch.device(device)
    if dev.type == "cuda":
        major, _ = torch.cuda.get_device_capability(dev)
        if dtype == torch.bfloat16 and not _bf16_hardware(dev):
            return (f"{torch.cuda.get_device_name(dev)} has no bfloat16 hardware (compute capability {major}.x; "
                    "bf16 needs 8.0+, and torch would only emulate it slowly); use float16 or float32.")
        if dtype == torch.float16 and major < 6:
            return "float16 matmul needs a GPU of compute capability 6.0 or newer; use float32."
        return None
    if dev.type == "cpu" and dtype == torch.float16:
        try:
            torch.ones(2, 2, dtype=dtype) @ torch.ones(2, 2, dtype=dtype)
        except RuntimeError:
            return "This torch build has no float16 matmul on CPU; use float32 or bfloat16."
    return None


def _bf16_hardware(dev: torch.device) -> bool:
    """bf16 in hardware, not emulated: `is_bf16_supported()` counts emulation by default (True on a T4)."""
    import inspect

    fn = torch.cuda.is_bf16_supported
    if "including_emulation" in inspect.signature(fn).parameters:
        return bool(fn(including_emulation=False))
    return torch.cuda.get_device_capability(dev)[0] >= 8


def tf32_note(device: torch.device | str | None = None) -> str:
    """One sentence: does a float32 matmul here run in TF32 (10-bit mantissa) or full float32? Read through
    `op_costs.tf32_enabled`: torch 2.9's `torch.backends.cuda.matmul.fp32_precision` where it exists, since the
    old getters (`allow_tf32`, `torch.get_float32_matmul_precision()`) raise once a program mixes the two APIs."""
    from .op_costs import tf32_enabled

    dev = torch.device(device or "cpu")
    if dev.type != "cuda":
        return f"float32 matmuls on {dev.type.upper()} run in full float32 (TF32 is a GPU tensor-core format)."
    major, _ = torch.cuda.get_device_capability(dev)
    if major < 8:
        return "This GPU has no TF32 (it needs compute capability 8.0+): float32 matmuls run in full float32."
    new_api = isinstance(getattr(torch.backends.cuda.matmul, "fp32_precision", None), str)
    if tf32_enabled("matmul"):
        setting = ("torch.backends.cuda.matmul.fp32_precision='tf32'" if new_api else
                   f"float32_matmul_precision={torch.get_float32_matmul_precision()!r}")
        return (f"TF32 is ON for float32 matmuls here ({setting}): faster, with a 10-bit mantissa; PyTorch's default "
                "is off.")
    how = ("torch.backends.cuda.matmul.fp32_precision = 'tf32' (or the older torch.set_float32_matmul_precision("
           "'high'))" if new_api else "torch.set_float32_matmul_precision('high')")
    return f"TF32 is off for float32 matmuls (PyTorch's default); {how} turns it on."


def compile_problem(device: torch.device | str = "cpu", backend: str = "inductor") -> str | None:
    """Why torch.compile cannot run here, or None if it probably can (compiling.problem decides:
    Dynamo present, a working C++ compiler for CPU code, Triton for GPU code)."""
    from .compiling import problem

    return problem(device, backend)
