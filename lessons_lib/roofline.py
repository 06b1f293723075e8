"""How fast could this possibly run? FLOPs, bytes and dispatched ops against the device's peaks.

A variant's floor is the largest of three lower bounds (Horace He's three regimes):
compute (FLOPs / peak FLOP/s), memory (bytes the ops read and write / bandwidth) and overhead
(dispatched ops × the cost of one tiny op). Work is counted from the op trace, so it is a
property of the code and the shape, not of the machine, and it can be computed on `meta`.

The overhead term is real on a CPU too: every op pays Python, dispatch and allocation before
it does any work, so many small ops cost more than one op doing the same work (a loop of twelve
small matmuls pays it twelve times, one batched matmul once). Where a loop beats one broadcast
matmul, the one op loses on bytes (it copies), not on this term. `overhead` measures it with the
harness on a one-element op.

Two facts of a GPU that a trace on `meta` marks and the GPU's peaks apply (`Peaks.cuda`):
- TF32. A float32 GEMM or convolution the trace marks `tf32` runs at the TF32 tensor-core rate
  (`Peaks.tf32`) where the GPU has one. PyTorch's defaults: off for matmuls since torch 1.12
  (`torch.backends.cuda.matmul.fp32_precision`, since torch 2.9; before it `allow_tf32` or
  `torch.set_float32_matmul_precision("high")`), on for cuDNN convolutions
  (`torch.backends.cudnn.conv.fp32_precision`; before 2.9 `torch.backends.cudnn.allow_tf32`).
  `tf32_settings()` says which applies now.
- cuBLASLt's bias epilogue. `addmm` with a 1-D bias copies no bias into its output on CUDA
  (trace.py says when); the bytes of that copy (`Work.lt_bias_bytes`) count on a CPU only.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

import torch

from . import timing, trace
from .device import describe, last_level_cache_bytes, synchronize


@dataclass
class Work:
    flops: int
    bytes: int  # bytes the ops read and write, as dispatched (trace.OpTrace.accessed_bytes; not DRAM traffic)
    launches: int  # ops that do work (a GPU kernel each, at least)
    tf32_flops: int = 0  # of `flops`, those of float32 GEMMs/convolutions that may run in TF32 on a GPU
    lt_bias_bytes: int = 0  # of `bytes`, addmm's bias copy, which cuBLASLt's epilogue skips on CUDA

    def bytes_on(self, cuda: bool) -> int:
        """Bytes on a CUDA GPU (no addmm bias copy) or elsewhere (the copy is real)."""
        return self.bytes - self.lt_bias_bytes if cuda else self.bytes

    @classmethod
    def of(cls, fn, *args) -> "Work":
        """Count the work of `fn(*args)` from its op trace; pass meta tensors to allocate nothing."""
        return cls.from_trace(trace.trace_ops(fn, *args))

    @classmethod
    def from_trace(cls, t: "trace.OpTrace") -> "Work":
        return cls(t.flops, t.accessed_bytes, len(t.compute_ops), t.tf32_flops, t.lt_saved_bytes)

    @classmethod
    def from_ops(cls, ops) -> "Work":
        """The work of some of a trace's ops (one op, say), counted as `from_trace` counts a whole trace."""
        return cls.from_trace(trace.OpTrace(list(ops)))


@dataclass
class Peaks:
    flops: float  # FLOP/s
    bandwidth: float  # bytes/s
    launch: float  # seconds per dispatched op: the measured cost of a tiny op (CPU and GPU alike)
    source: str
    tf32: float | None = None  # FLOP/s of TF32 tensor cores for work marked tf32 (None: no TF32 here)
    cuda: bool = False  # a CUDA GPU: addmm's bias goes through cuBLASLt's epilogue (no copy)

    def terms(self, work: Work) -> dict[str, float]:
        """The three lower bounds in seconds: compute, memory and overhead."""
        tf32 = min(work.tf32_flops, work.flops) if self.tf32 else 0
        compute = (work.flops - tf32) / self.flops + (tf32 / max(self.tf32, self.flops) if tf32 else 0.0)
        return {"compute": compute, "memory": work.bytes_on(self.cuda) / self.bandwidth,
                "overhead": work.launches * self.launch}

    def floor(self, work: Work) -> float:
        return max(self.terms(work).values())

    def regime(self, work: Work) -> str:
        """"compute", "memory" or "overhead": whichever bound is the floor."""
        parts = self.terms(work)
        return max(parts, key=parts.get)

    def runner_up(self, work: Work) -> tuple[str, float]:
        """The second-largest bound and its size as a fraction of the floor (0 when the floor is 0):
        near 1, the call sits close to the boundary between two regimes."""
        parts = sorted(self.terms(work).items(), key=lambda kv: kv[1], reverse=True)
        top = parts[0][1]
        return parts[1][0], (parts[1][1] / top if top > 0 else 0.0)

    def regime_words(self, work: Work, close: float = 0.5) -> str:
        """The regime in words ("memory-bound"), with the runner-up named when its bound is at least
        `close` of the floor ("memory-bound, overhead close behind (0.8×)"): a measurement there may
        go either way."""
        words = REGIME_WORDS[self.regime(work)]
        other, frac = self.runner_up(work)
        return f"{words}, {other} close behind ({frac:.2f}×)" if frac >= close else words

    def op_terms(self, op: "trace.Op") -> dict[str, float]:
        """One traced op's compute and memory bounds in seconds (its FLOPs at the TF32 rate where the trace
        marks it and this device has TF32; on CUDA without the addmm bias copy cuBLASLt skips)."""
        return {k: v for k, v in self.terms(Work.from_ops([op])).items() if k != "overhead"}

    def serial_time(self, t: "trace.OpTrace", compute_efficiency: float = 1.0, memory_efficiency: float = 1.0,
                    overlap: bool = True) -> float:
        """Seconds for the ops of `t` run one after another, as kernels in one CUDA stream run: each op's
        compute bound over `compute_efficiency` and memory bound over `memory_efficiency`, the larger of the
        two where an op overlaps them (overlap=True; with both efficiencies 1 this is the serial floor, never
        below `floor`'s compute and memory terms), their sum where it cannot (a kernel at the ridge, whose
        short inner loop cannot hide its loads). Never below the overhead bound: the host issues the next
        op while the device runs this one."""
        if not (0 < compute_efficiency <= 1 and 0 < memory_efficiency <= 1):
            raise ValueError("compute_efficiency and memory_efficiency are fractions of the peaks, in (0, 1].")
        total = 0.0
        for op in t.compute_ops:
            c, m = self.op_terms(op).values()
            c, m = c / compute_efficiency, m / memory_efficiency
            total += max(c, m) if overlap else c + m
        return max(total, len(t.compute_ops) * self.launch)


# What each regime is called in prose, and what helps in it.
REGIME_WORDS = {"overhead": "overhead-bound", "memory": "memory-bound", "compute": "compute-bound"}
REGIME_REMEDY = {
    "overhead": "fewer, fatter ops: fuse (torch.compile), batch more work per call, CUDA graphs",
    "memory": "fewer bytes: fuse elementwise chains, avoid temporaries and copies, smaller dtypes",
    "compute": "fewer or cheaper FLOPs: tensor cores (TF32, fp16/bf16), a better algorithm",
}


def regime_spans(values, regimes: list[str]) -> str:
    """One variant's regimes across a sweep, as runs of equal regime: "overhead-bound at 16–32,
    memory-bound at 64–512" (`values`: the swept values; `regimes`: Peaks.regime at each)."""
    spans: list[tuple[str, object, object]] = []
    for v, r in zip(values, regimes):
        if spans and spans[-1][0] == r:
            spans[-1] = (r, spans[-1][1], v)
        else:
            spans.append((r, v, v))
    return ", ".join(f"{REGIME_WORDS.get(r, r)} at {a}" + (f"–{b}" if b != a else "") for r, a, b in spans)


# Datasheet peaks, dense (no sparsity). Per GPU: TFLOP/s fp32 (CUDA cores), TF32 tensor cores
# (None: no TF32), fp16 tensor cores, bf16 tensor cores (None: no bf16 hardware), memory GB/s.
# Sources, NVIDIA's product datasheets (sparsity figures halved to dense):
#   T4: "NVIDIA T4 Tensor Core GPU" datasheet: 8.1 fp32, 65 mixed fp16/fp32, 320 GB/s GDDR6; Turing
#       (sm_75) has neither TF32 nor bf16 tensor cores.
#   L4: "NVIDIA L4 Tensor Core GPU" datasheet: 30.3 fp32, 120 TF32 / 242 fp16 and bf16 with sparsity, 300 GB/s.
#   V100: "NVIDIA Tesla V100 GPU Accelerator" datasheet (SXM2): 15.7 fp32, 125 tensor, 900 GB/s; no TF32/bf16.
#   A10G: AWS's A10G is an A10 variant; "NVIDIA A10 Tensor Core GPU" datasheet: 31.2 fp32,
#       125 TF32 / 250 fp16 and bf16 with sparsity, 600 GB/s.
#   A100: "NVIDIA A100 Tensor Core GPU" datasheet: 19.5 fp32, 156 TF32, 312 fp16/bf16; 1,555 GB/s
#       (40GB), 2,039 GB/s (80GB SXM), 1,935 GB/s (80GB PCIe).
#   H100: "NVIDIA H100 Tensor Core GPU" datasheet: SXM 67 fp32, 989 TF32 / 1,979 fp16 and bf16 with
#       sparsity, 3.35 TB/s; PCIe 51 fp32, 756 TF32 / 1,513 with sparsity, 2 TB/s.
#   H200: "NVIDIA H200 Tensor Core GPU" datasheet: as H100 SXM, 4.8 TB/s.
DATASHEET = {
    "T4": (8.1, None, 65.0, None, 320),
    "L4": (30.3, 60.0, 121.0, 121.0, 300),
    "V100": (15.7, None, 125.0, None, 900),
    "A10G": (31.2, 62.5, 125.0, 125.0, 600),
    "A100": (19.5, 156.0, 312.0, 312.0, 1555),
    "A100-SXM4-80GB": (19.5, 156.0, 312.0, 312.0, 2039),
    "A100 80GB PCIe": (19.5, 156.0, 312.0, 312.0, 1935),
    "H100 PCIe": (51.0, 378.0, 756.0, 756.0, 2000),
    "H100": (67.0, 494.5, 989.0, 989.0, 3350),
    "H200": (67.0, 494.5, 989.0, 989.0, 4800),
}
# float64 TFLOP/s: datasheets' V100 7.8, A100 19.5, H100 PCIe 51, H100 SXM and H200 67 (FP64 tensor cores, which
# cuBLAS's DGEMM uses); T4, L4, A10G list none: derived as 1/32 (Turing) and 1/64 (Ada, GA102) of fp32 (whitepapers).
FP64 = {"T4": 8.1 / 32, "L4": 30.3 / 64, "V100": 7.8, "A10G": 31.2 / 64, "A100": 19.5, "A100-SXM4-80GB": 19.5,
        "A100 80GB PCIe": 19.5, "H100 PCIe": 51.0, "H100": 67.0, "H200": 67.0}
# The GPUs the course's model records and presets name: Colab's T4 and two datacenter parts.
MODEL_GPUS = ("T4", "A100", "H100")
# Seconds per dispatched op when nothing is measured (model files): host time, not a datasheet figure. MEASURED
# on one host, the H200's (2026-11-26): a one-element add on the GPU took 6.9-7.6 µs in four measurements, median
# 7.3 (call1-probes.log line 56; h200.json's "launch" of lessons 01, 04, 05, 07 and 04's overhead table), and is
# used for every GPU: on another host (Colab's is slower) it is an assumption. It was an assumed 5 µs before.
# A training step pays more per op (autograd; h200.json: 13 µs an op for nn.Linear(1, 1) forward + backward).
# Measure it with `overhead`.
ASSUMED_LAUNCH = {name: 7.3e-6 for name in DATASHEET}


_tf32_on = trace.tf32_allowed  # whether float32 matmuls may use TF32 now (PyTorch's default: no)


def _precision_key() -> tuple:
    """The float32 matmul settings that change a measured float32 peak (TF32 on CUDA, bf16/TF32 in oneDNN on
    a CPU), read so that it never raises: the old `torch.get_float32_matmul_precision()` does once a program
    has set the new per-backend API (torch 2.9+) apart from it."""
    try:
        return (torch.backends.cuda.matmul.fp32_precision, torch.backends.mkldnn.matmul.fp32_precision)
    except (AttributeError, RuntimeError):
        return (torch.get_float32_matmul_precision(), _tf32_on())


TF32_FLAGS = (  # (what float32 work, the setting since torch 2.9, the flag before it, trace.tf32_enabled's key)
    ("GEMMs (cuBLAS)", "torch.backends.cuda.matmul.fp32_precision", "torch.backends.cuda.matmul.allow_tf32", "matmul"),
    ("convolutions (cuDNN)", "torch.backends.cudnn.conv.fp32_precision", "torch.backends.cudnn.allow_tf32", "conv"),
)


def tf32_settings() -> str:
    """Which float32 work may run in TF32 on a CUDA GPU (compute capability 8.0+) now, per backend, with the
    setting that controls it: since torch 2.9 `torch.backends.<backend>.<op>.fp32_precision` ("tf32" or
    "ieee"; "none" inherits `torch.backends.cudnn.fp32_precision`, then `torch.backends.fp32_precision`),
    beside the older flags, which set the same state (mixing the two makes the old getters raise).
    The same on every machine: these are settings, not measurements."""
    from .display import text_table

    rows = [("float32 work", "setting (torch 2.9+)", "value", "older flag", "on a GPU now")]
    for what, new, old, op in TF32_FLAGS:
        owner = torch
        for part in new.split(".")[1:-1]:  # torch.backends.cudnn.conv: absent before torch 2.9
            owner = getattr(owner, part, None)
        value = getattr(owner, "fp32_precision", None)
        rows.append((what, new if value is not None else "(not in this torch)", repr(value) if value else "-",
                     old, "TF32" if trace.tf32_enabled(op) else "full float32"))
    return text_table(rows)


def datasheet(name: str, dtype: torch.dtype = torch.float32, tf32: bool | None = None) -> Peaks | None:
    """A named GPU's datasheet peaks for `dtype`, or None (unknown GPU, or a dtype its hardware
    lacks: bf16 on a T4 or V100). float32 uses TF32 tensor cores where `tf32` (default: whatever
    PyTorch's float32 matmul precision allows now) and the GPU has them; either way, work the trace
    marks tf32 runs at the TF32 peak (`Peaks.tf32`); float64 has its own (FP64). A key matches as a whole word
    ("Tesla T4"), never inside another ("L40S" is no L4). Datasheet figures: a model, not a measurement."""
    for key in sorted(DATASHEET, key=len, reverse=True):  # "H100 PCIe" before "H100"
        if re.search(rf"(?<![a-z0-9]){re.escape(key.lower())}(?![a-z0-9])", name.lower()):
            fp32, tf32_peak, fp16, bf16, gbs = DATASHEET[key]
            if dtype == torch.float32:
                use_tf32 = _tf32_on() if tf32 is None else tf32
                tf, how = (tf32_peak, "TF32") if use_tf32 and tf32_peak else (fp32, "fp32")
            elif dtype == torch.float16:
                tf, how = fp16, "fp16 tensor cores"
            elif dtype == torch.bfloat16:
                tf, how = bf16, "bf16 tensor cores"
            elif dtype == torch.float64:
                tf, how = FP64[key], "fp64"
            else:
                return None
            if tf is None:
                return None
            tf32_rate = tf32_peak * 1e12 if dtype == torch.float32 and tf32_peak else None
            return Peaks(tf * 1e12, gbs * 1e9, ASSUMED_LAUNCH[key],
                         f"datasheet ({key}: {tf:g} TFLOP/s {how}, {gbs:g} GB/s; "
                         f"{ASSUMED_LAUNCH[key] * 1e6:g} µs per op, the H200 host's)", tf32=tf32_rate, cuda=True)
    return None


_overheads: dict[tuple, float] = {}


def overhead(device: torch.device | str, dtype: torch.dtype = torch.float32) -> float:
    """Seconds one tiny op costs on `device` (cached): the fastest sample (`_best`) of adding two
    one-element tensors, where the work is nothing and only the per-op overhead remains
    (Python, dispatch, allocation and, on a GPU, the launch)."""
    dev = torch.device(device)
    key = (dev.type, dev.index, dtype)
    if key not in _overheads:
        one = torch.ones(1, device=dev, dtype=dtype)
        _overheads[key] = _best(torch.add, one, one, label="per-op overhead", min_run_time=0.1, max_time=2.0,
                                device=dev)
    return _overheads[key]


# A floor bounds time from below only if its peaks are the most the machine can do: busy medians made them low,
# and lesson 04's points "beat their lower bound" (× floor 0.3). So a peak is the fastest of many short samples
# (`timing.measure(block=...)` on a CPU, blocks between the scheduler's interruptions): noise only slows it.
PEAK_BLOCK = 1e-3  # seconds per sample on a CPU


def _best(fn, *args, **kw) -> float:
    """Seconds a call of fn(*args) takes at best here: the least of the harness's samples (short blocks on a CPU)."""
    dev = torch.device(kw["device"])
    return timing.measure(fn, *args, **kw, **({"block": PEAK_BLOCK} if dev.type == "cpu" else {})).least


# What a point under its floor means, for every sentence that finds one: the floor is no bound there.
BEATEN = ("the peak measurement was beaten there, so that floor is no lower bound at that shape: the peaks come "
          "from large calls, which a busy machine interrupts more often than short ones even in the fastest of many "
          "samples, and the bandwidth from buffers larger than the cache, where data that stays in cache moves faster")


_measured: dict[tuple, Peaks] = {}
# Side of the square matmul that measures the peak: big enough to fill a GPU's SMs (and a CPU's cores).
PEAK_MATMUL_N = {"cuda": 8192, "cpu": 512}  # CPU: ~3 ms calls, some uninterrupted at load 14 (86 GFLOP/s; 1024: 33)
PEAK_MAX_TIME = 2.0  # seconds at most per peak measurement (a slow path's 2 s calls took 20 s under the harness)


def _copy_elements(dev: torch.device) -> int:
    """float32 elements of a copy buffer well beyond the last-level cache (twice it, 64 MiB at least)."""
    nbytes = max(64 * 2**20, 2 * last_level_cache_bytes(dev))
    return nbytes // 4


def measure_peaks(device: torch.device | str, dtype: torch.dtype = torch.float32) -> Peaks:
    """Measure peak matmul FLOP/s, copy bandwidth and per-op overhead on this device (cached per
    device, dtype and float32 matmul precision, since TF32 changes the float32 peak). Each is the fastest
    sample (`_best`), so the floors are lower bounds on time on a busy machine too."""
    dev = torch.device(device)
    key = (dev.type, dev.index, dtype, *_precision_key())
    if key in _measured:
        return _measured[key]
    n = PEAK_MATMUL_N.get(dev.type, PEAK_MATMUL_N["cpu"])
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    b = _faster_order(a, b, dev)
    t_mm = _best(torch.mm, a, b, label="peak matmul", min_run_time=0.3, device=dev, max_time=PEAK_MAX_TIME)
    del a, b
    src = torch.empty(_copy_elements(dev), device=dev)  # well beyond cache
    dst = torch.empty_like(src)
    # CPU: 4 MiB pieces in turn, cold when they come round (64 MiB at once: interrupted in every sample at load 17)
    k = max(1, src.nbytes // (4 << 20)) if dev.type == "cpu" else 1
    t_copy = _best(torch.Tensor.copy_, label="peak copy", min_run_time=0.3, device=dev, max_time=PEAK_MAX_TIME,
                   rotate=list(zip(dst.chunk(k), src.chunk(k))))
    bandwidth = 2 * src.nbytes / k / t_copy
    del src, dst
    launch = overhead(dev, dtype)
    tf32 = _measure_tf32(dev, n) if dtype == torch.float32 else None
    synchronize(dev)
    peaks = Peaks(
        flops=2 * n**3 / t_mm,
        bandwidth=bandwidth,
        launch=launch,
        source=f"measured on {describe(dev).name} (the fastest of many samples)",
        tf32=tf32,
        cuda=dev.type == "cuda",
    )
    _measured[key] = peaks
    return peaks


def _faster_order(a: torch.Tensor, b: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """On a CPU, `b` in whichever memory order runs `a @ b` faster (timed at 256, a few ms each); elsewhere `b`.

    Where no BLAS or oneDNN kernel takes the dtype (float16 without AVX512-FP16), ATen's fallback GEMM
    (aten/src/ATen/native/cpu/BlasKernel.cpp) runs a @ b as rank-1 updates (gemm_notrans_) but a @ b stored
    column-major as dot products (gemm_transa_): on a 2-core AMD EPYC, 1 thread, 0.9 against 16.6 GFLOP/s at
    1024. Timing one order gave a float16 "peak" 15x under what lesson 03's variants reach: floors above
    every bar, and 20 s of 2 s calls to measure it."""
    if dev.type != "cpu":
        return b
    k = min(256, a.shape[0])
    small_a = a[:k, :k].contiguous()

    def best(bb) -> float:
        small_b = bb[:k, :k]
        torch.mm(small_a, small_b)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            torch.mm(small_a, small_b)
            times.append(time.perf_counter() - t0)
        return min(times)

    col = b.t().contiguous().t()
    return col if best(col) < best(b) else b


def _measure_tf32(dev: torch.device, n: int) -> float | None:
    """FLOP/s of a float32 mm with TF32 allowed, on a CUDA GPU that has TF32 (compute capability 8.0+);
    None elsewhere (a CPU has no TF32)."""
    if dev.type != "cuda" or torch.cuda.get_device_capability(dev) < (8, 0):
        return None
    a = torch.randn(n, n, device=dev)
    matmul = torch.backends.cuda.matmul
    new = getattr(matmul, "fp32_precision", None)  # torch 2.9+; None before
    try:  # the old setter keeps both APIs in step (old ATen code paths check that they agree)
        old = matmul.allow_tf32
    except RuntimeError:  # the program has mixed the two APIs already: its old getter raises
        old = None
    if old is None:
        matmul.fp32_precision = "tf32"
    else:
        matmul.allow_tf32 = True
    try:
        t = _best(torch.mm, a, a, label="peak matmul, TF32", min_run_time=0.3, device=dev, max_time=PEAK_MAX_TIME)
    finally:
        if old is not None:
            matmul.allow_tf32 = old
        if new is not None:
            matmul.fp32_precision = new  # exactly as found ("none" stays "none", not the old setter's "ieee")
    return 2 * n**3 / t


def speedup_asymptote(peaks: Peaks, element_size: int = 4, tf32: bool = False) -> float:
    """Slope s of Linear's time over PseudoLinear's at large width N: ratio → s · N.

    Per layer at batch B: Linear is compute-bound, 2·B·N² FLOPs at F FLOP/s; eager PseudoLinear is
    memory-bound, two ops each reading and writing B·N elements of e bytes, 4·B·N·e bytes at BW.
    Their ratio, (2·B·N²/F) / (4·B·N·e/BW) = N · BW / (2·e·F), grows linearly in N with slope
    1 / (2·e·balance), where balance = F / BW is the device's FLOPs per byte. The batch cancels.
    So the speed-up never converges: it grows without bound, more slowly the more FLOPs the device
    does per byte (TF32 multiplies F, and divides the slope, by the TF32-to-fp32 ratio)."""
    f = peaks.tf32 if tf32 and peaks.tf32 else peaks.flops
    return peaks.bandwidth / (2 * element_size * f)
