"""Microbenchmarks that fix a GPU model's constants BEFORE the measurement the model predicts.

DESIGN.md's "Predict, then measure": a claim's bar comes from a model whose constants were measured apart from the
run it is tested against. These are those measurements, on the device given, each in seconds:

* `device_seconds(fn, ...)`: the device's time per call, the host's launches hidden. The calls are queued behind
  a spin kernel (torch.cuda._sleep) long enough that the host has issued all of them before the device starts,
  so CUDA events around them time the kernels back to back (the gaps between kernels included), not the host.
* `gemm_seconds(shape, ...)`: one batched GEMM of a given (batch, m, n, k) shape, made here, alone.
* `serial_seconds(ops, gemms, bandwidth)`: a trace's kernels one after another, each GEMM at its measured time
  and every other kernel at its bytes over a measured copy bandwidth (roofline.measure_peaks).
* `sync_seconds(...)`: a host sync's round trip: a tiny op and torch.cuda.synchronize(), less the op's launch.

Nothing here is a bar by itself, and none of it runs on a CPU: a CPU has no device queue to hide the host behind.
"""
from __future__ import annotations

import statistics
import time

import torch

from . import timing
from .device import synchronize


def _cuda(device) -> torch.device:
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"device={str(device)!r}: these microbenchmarks time a CUDA device's queue; pass 'cuda'.")
    return dev


def _sleep(cycles: float) -> bool:
    """Queue a kernel that spins the device for `cycles` clock cycles (torch.cuda._sleep); False where there is
    none (the course's simulated GPU: nothing is queued then)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    try:
        sleep(max(1, int(cycles)))
    except (TypeError, AttributeError, RuntimeError):
        return False
    return True


def _spin_rate() -> float | None:
    """Cycles per second of torch.cuda._sleep on the current device (None where it cannot run)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    ran = _sleep(1e6)  # under a millisecond on any GPU's clock
    b.record()
    b.synchronize()
    ms = a.elapsed_time(b)
    return 1e6 / (ms * 1e-3) if ran and ms > 0 else None


def device_seconds(fn, *args, device="cuda", calls: int = 10, repeats: int = 5) -> float:
    """Device seconds per call of `fn(*args)`, the median of `repeats` runs of `calls` calls queued behind a spin
    kernel (see the module's docstring). The spin lasts twice what the host took to issue the calls, and doubles
    until the host finishes before the device does (the last event still pending when the host is done)."""
    dev = _cuda(device)
    if calls < 1 or repeats < 1:
        raise ValueError(f"calls={calls}, repeats={repeats}: pass whole numbers of at least 1.")
    fn(*args)
    synchronize(dev)
    rate = _spin_rate()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    host = time.perf_counter() - t0
    synchronize(dev)
    spin, out = 2 * host + 1e-3, []
    while len(out) < repeats:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        spun = rate is not None and _sleep(spin * rate)
        a.record()
        for _ in range(calls):
            fn(*args)
        b.record()
        ahead = not b.query()  # the host issued every call while the device still had work
        b.synchronize()
        if spun and not ahead and spin < 1.0:
            spin *= 2  # the spin ended before the host was done: the events timed the host too
            continue
        out.append(a.elapsed_time(b) * 1e-3 / calls)
    return statistics.median(out)


def gemm_seconds(shape: tuple[int, int, int, int], device="cuda", dtype=torch.float32) -> float:
    """Device seconds of one batched GEMM of `shape` = (batch, m, n, k), contiguous operands made here (a trace's
    `Op.gemm`): torch.bmm of batch × m × k by batch × k × n."""
    dev = _cuda(device)
    batch, m, n, k = shape
    a = torch.randn(batch, m, k, device=dev, dtype=dtype)
    b = torch.randn(batch, k, n, device=dev, dtype=dtype)
    return device_seconds(torch.bmm, a, b, device=dev, calls=5, repeats=5)


def gemm_table(ops, device="cuda", dtype=torch.float32) -> dict[tuple, float]:
    """{shape: device seconds} for each distinct GEMM shape among `ops` (trace.Op), each measured once, alone."""
    return {shape: gemm_seconds(shape, device, dtype) for shape in dict.fromkeys(op.gemm for op in ops if op.gemm)}


def kernel_seconds(op, gemms: dict[tuple, float], bandwidth: float, kernel_min: float = 0.0) -> float:
    """One traced op as a CUDA kernel: a GEMM at its measured time (`gemms`, keyed by its shape) plus the bias copy
    baddbmm/addmm make into their output (read and written at `bandwidth`; none where cuBLASLt's epilogue takes
    the bias); any other op at its bytes over `bandwidth` (bytes/s, a copy's). Never under `kernel_min`."""
    if op.gemm:
        if op.gemm not in gemms:
            raise ValueError(f"No measured time for the GEMM shape {op.gemm}: measure it with gemm_table first.")
        return gemms[op.gemm] + (2 * op.inner_copy_bytes - op.lt_saved_bytes) / bandwidth
    return max(op.accessed_bytes / bandwidth, kernel_min)


def serial_seconds(ops, gemms: dict[tuple, float], bandwidth: float, kernel_min: float = 0.0) -> float:
    """A trace's compute ops as kernels one after another, each at `kernel_seconds`: kernels of one stream run in
    order, so a step's device time is their sum (the gaps between them left out)."""
    return sum(kernel_seconds(op, gemms, bandwidth, kernel_min) for op in ops)


def sync_seconds(device="cuda", repeats: int = 50) -> float:
    """Host seconds a sync adds to a tiny op: median of (a one-element add, then torch.cuda.synchronize()) less the
    median of the add alone, queued without waiting (the launch)."""
    dev = _cuda(device)
    one = torch.ones(1, device=dev)
    synchronize(dev)
    both, alone = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.add(one, one)
        t1 = time.perf_counter()
        synchronize(dev)
        both.append(time.perf_counter() - t0)
        alone.append(t1 - t0)
    return max(0.0, statistics.median(both) - statistics.median(alone))


def host_seconds(fn, *args, device="cuda", calls: int = 50) -> float:
    """Host seconds per call, the device not awaited (lesson 00's no-sync timer: it times the launches), the least
    of 5 repeats. `calls` of a few kernels each stay far inside CUDA's launch queue, so none waits for the device."""
    dev = _cuda(device)
    return min(timing.wrong_no_sync(fn, *args, repeats=calls, device=dev).median for _ in range(5))


__all__ = ["device_seconds", "gemm_seconds", "gemm_table", "kernel_seconds", "serial_seconds", "sync_seconds", "host_seconds"]
