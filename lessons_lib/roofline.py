"""How fast could this possibly run? FLOPs, bytes and launches against the device's peaks.

A variant's floor is the largest of three lower bounds (Horace He's three regimes):
compute (FLOPs / peak FLOP/s), memory (bytes moved / bandwidth) and overhead
(kernel launches × launch cost). Work is counted from the op trace, so it is a property of
the code and the shape, not of the machine, and it can be computed on `meta`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import timing, trace
from .device import describe, synchronize


@dataclass
class Work:
    flops: int
    bytes: int  # bytes read + written by ops that do work (at least)
    launches: int  # ops that launch work (a GPU kernel each, at least)

    @classmethod
    def of(cls, fn, *args) -> "Work":
        """Count the work of `fn(*args)` from its op trace; pass meta tensors to allocate nothing."""
        return cls.from_trace(trace.trace_ops(fn, *args))

    @classmethod
    def from_trace(cls, t: "trace.OpTrace") -> "Work":
        return cls(t.flops, t.moved_bytes, len(t.compute_ops))


@dataclass
class Peaks:
    flops: float  # FLOP/s
    bandwidth: float  # bytes/s
    launch: float  # seconds per kernel launch (0 on CPU, where there is no launch queue)
    source: str

    def floor(self, work: Work) -> float:
        return max(work.flops / self.flops, work.bytes / self.bandwidth, work.launches * self.launch)

    def regime(self, work: Work) -> str:
        parts = {
            "compute": work.flops / self.flops,
            "memory": work.bytes / self.bandwidth,
            "overhead": work.launches * self.launch,
        }
        return max(parts, key=parts.get)


# Datasheet peaks, dense (no sparsity): TFLOP/s for fp32 (no TF32) and for fp16/bf16 tensor
# cores, and memory bandwidth in GB/s. Used when there is no time to measure.
DATASHEET = {
    "T4": (8.1, 65.0, 320),
    "L4": (30.3, 121.0, 300),
    "V100": (15.7, 125.0, 900),
    "A10G": (31.2, 125.0, 600),
    "A100": (19.5, 312.0, 1555),
    "H100 PCIe": (51.0, 756.0, 2000),
    "H100": (67.0, 989.0, 3350),
    "H200": (67.0, 989.0, 4800),
}


def datasheet(name: str, dtype: torch.dtype) -> Peaks | None:
    for key in sorted(DATASHEET, key=len, reverse=True):  # "H100 PCIe" before "H100"
        if key.lower() in name.lower():
            fp32, half, gbs = DATASHEET[key]
            tf = fp32 if dtype == torch.float32 else half
            return Peaks(tf * 1e12, gbs * 1e9, 5e-6, f"datasheet ({key})")
    return None


_measured: dict[tuple, Peaks] = {}


def measure_peaks(device: torch.device | str, dtype: torch.dtype = torch.float32) -> Peaks:
    """Measure peak matmul FLOP/s, copy bandwidth and launch cost on this device (cached)."""
    dev = torch.device(device)
    key = (dev.type, dev.index, dtype)
    if key in _measured:
        return _measured[key]
    gpu = dev.type == "cuda"
    n = 8192 if gpu else 1024
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    t_mm = timing.measure(torch.mm, a, b, label="peak matmul", min_run_time=0.3)
    src = torch.empty((256 if gpu else 64) * 2**20 // 4, device=dev)  # well beyond cache
    dst = torch.empty_like(src)
    t_copy = timing.measure(dst.copy_, src, label="peak copy", min_run_time=0.3)
    launch = 0.0
    if gpu:
        tiny = torch.zeros(1, device=dev)
        launch = timing.measure(tiny.add_, 1.0, label="launch", min_run_time=0.2).median
    synchronize(dev)
    peaks = Peaks(
        flops=2 * n**3 / t_mm.median,
        bandwidth=2 * src.nbytes / t_copy.median,
        launch=launch,
        source=f"measured on {describe(dev).name}",
    )
    _measured[key] = peaks
    return peaks
