"""What the evidence costs on a named GPU: the course's roofline and launch model, never a measurement.

Every figure here is a MODEL, and says so: the GPU's datasheet peaks for the step's dtype (roofline.datasheet;
float32 without TF32, PyTorch's default; float16, bfloat16 and float64 at their own), each kernel at its roofline
time but never under launch_queue.KERNEL_MIN, and roofline.ASSUMED_LAUNCH of host time per eager op
(launch_queue.KERNEL_LAUNCH plus the rest as dispatch). A step's kernels are issued one by one into one stream
(launch_queue.schedule), with the host waiting where the sync detector saw it wait, each wait paying
launch_queue.SYNC_COST; a CUDA graph replays them with one launch (launch_queue.graph_ops).

The kernels are the ops that launch work on a GPU (trace.OpTrace.gpu_ops: on meta as CUDA runs it; on a CPU run
every compute op but allocations). A region that CUDA runs fused (fused.py) counts as CUDA runs it: one kernel
forward and one backward (cuDNN's RNNs, foreach clipping), or its GEMMs apart and one kernel for what lies between
them (an LSTM cell, a torch.compile'd function). An optimizer whose foreach setting is torch's default runs as
foreach on CUDA (torch/optim/optimizer.py, _default_to_fused_or_foreach), where meta and the CPU run its for loop:
its ops of one name count as one kernel here, as CUDA would launch them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import launch_queue, roofline
from ..device import fmt_bytes
from ..timing import fmt_time
from ..trace import NO_KERNEL, Op
from .fused import APART

HOST_PER_OP = roofline.ASSUMED_LAUNCH["T4"]  # the same for every GPU: the H200 host's, an assumption elsewhere
DISPATCH = HOST_PER_OP - launch_queue.KERNEL_LAUNCH  # so that dispatch + launch = the roofline's per-op cost


@dataclass(frozen=True)
class Kernel:
    index: int  # the op in the trace (the first, for merged ops)
    flops: int
    bytes: int


def kernels(ev) -> list[Kernel]:
    """The kernels one call launches on a CUDA GPU, in order (see the module's docstring)."""
    ops = ev.trace.ops
    launches = [i for i, op in enumerate(ops) if not (op.is_view or op.name in NO_KERNEL
                or (ev.device != "cpu" and op.device not in ("cuda", "meta")))]
    merged: dict[int, int] = {}  # op index -> the op whose foreach kernel does its work
    for o in ev.optimizers:
        if o.foreach is None and not o.fused and o.params and o.has_foreach and not o.differentiable:
            mine = [i for i in launches if o.first <= i < o.last]
            if mine and not any(ops[i].name.startswith(("_foreach", "_fused")) for i in mine):
                merged.update(_foreach_positions(ops, mine, o.params))
    regions: dict[tuple, int] = {}  # a region CUDA fuses (fused.py): one kernel a direction, or between GEMMs
    for i in launches:
        r = ev.info[i].region
        if r is None:
            continue
        if ev.fused_modes.get(r[0]) == APART:
            if ops[i].gemm:
                regions[(ev.info[i].step, *r)] = -1  # the next non-GEMM op starts a kernel of its own
                continue
            home = regions.get((ev.info[i].step, *r), -1)
            merged[i] = regions[(ev.info[i].step, *r)] = i if home == -1 else home
        else:
            merged[i] = regions.setdefault((ev.info[i].step, *r), i)
    out: list[Kernel] = []
    at: dict[int, int] = {}
    for i in launches:
        op = ops[i]
        nbytes = op.accessed_bytes - op.lt_saved_bytes
        home = merged.get(i, i)
        if home != i:  # this parameter's update is part of the foreach kernel at `home`
            k = out[at[home]]
            out[at[home]] = Kernel(k.index, k.flops + op.flops, k.bytes + nbytes)
            continue
        at[i] = len(out)
        out.append(Kernel(i, op.flops, nbytes))
    return out


def _foreach_positions(ops, idx: list[int], params: int) -> dict[int, int]:
    """A for loop's ops, a fixed run of k per parameter, as foreach runs them: one kernel per position of the run
    (SGD with momentum: mul_, add_, add_ per parameter -> three foreach ops). Without a fixed run: one per name."""
    k, rest = divmod(len(idx), params)
    runs = [idx[p * k:(p + 1) * k] for p in range(params)] if k and not rest else []
    if runs and all([ops[i].name for i in r] == [ops[i].name for i in runs[0]] for r in runs):
        return {i: runs[0][pos] for r in runs for pos, i in enumerate(r)}
    first: dict[str, int] = {}
    return {i: first.setdefault(ops[i].name, i) for i in idx}


@dataclass
class Gpu:
    """A named GPU's datasheet peaks and the launch model's assumptions, for one dtype."""

    name: str
    peaks: roofline.Peaks
    preset: launch_queue.Preset
    dtype: torch.dtype

    @classmethod
    def of(cls, name: str, dtype: torch.dtype = torch.float32) -> "Gpu":
        peaks = roofline.datasheet(name, dtype, tf32=False)
        if peaks is None and roofline.datasheet(name, torch.float32, tf32=False) is not None:
            dtype = torch.float32  # a dtype this GPU has no hardware for (bf16 on a T4): its float32 peaks
            peaks = roofline.datasheet(name, dtype, tf32=False)
        if peaks is None:
            raise ValueError(f"gpu={name!r}: no datasheet for it; choose one of {', '.join(roofline.DATASHEET)}.")
        p = launch_queue.Preset(name, peaks.flops, peaks.bandwidth, peaks.source.split(";")[0])
        return cls(name, peaks, p, dtype)

    @property
    def label(self) -> str:
        how = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}.get(
            self.dtype, str(self.dtype))
        return (f"model: {self.name} datasheet, {self.peaks.flops / 1e12:g} TFLOP/s {how}, "
                f"{self.peaks.bandwidth / 1e9:g} GB/s; {HOST_PER_OP * 1e6:g} µs of host time per launch and "
                f"{launch_queue.KERNEL_MIN * 1e6:g} µs per kernel at least, assumed")

    def kernel(self, flops: float, nbytes: float) -> float:
        """Device seconds of one kernel: its roofline time, never under KERNEL_MIN."""
        return self.preset.kernel_seconds(flops, nbytes)

    def eager(self, ks: list[Kernel], sync_after: set[int] = frozenset(), calls: int = 1) -> float:
        """Seconds to issue and run `ks` one by one, `calls` times in a row; the host waits for the device after
        each in `sync_after`."""
        ops = launch_queue.eager_ops([(str(k.index), self.kernel(k.flops, k.bytes)) for k in ks], DISPATCH,
                                     self.preset)
        ops = [launch_queue.Op(o.name, o.cpu, o.gpu, int(o.name) in sync_after) for o in ops]
        return launch_queue.schedule(ops * calls).total

    def sync_cost(self, ks: list[Kernel], sync_after: set[int]) -> float:
        """Seconds the waits add to one call, with the call run twice in a row: a wait at the end of one call keeps
        the host from queuing the next one's work while the GPU runs (the GPU idles as the host issues it again),
        and every wait pays a host-GPU round trip (launch_queue.SYNC_COST)."""
        return (self.eager(ks, sync_after, 2) - self.eager(ks, calls=2)) / 2

    def graph(self, ks: list[Kernel]) -> float:
        """Seconds to replay `ks` as one CUDA graph: one launch, the kernels back to back."""
        ops = launch_queue.graph_ops([(str(k.index), self.kernel(k.flops, k.bytes)) for k in ks], self.preset)
        return launch_queue.schedule(ops).total

    def work(self, ks: list[Kernel]) -> roofline.Work:
        return roofline.Work(sum(k.flops for k in ks), sum(k.bytes for k in ks), len(ks))

    def bytes_time(self, nbytes: float) -> float:
        return nbytes / self.peaks.bandwidth


def dominant_dtype(ev) -> torch.dtype:
    """The dtype of the step's largest share of FLOPs (float32 when it has none)."""
    by: dict[str, int] = {}
    for op in ev.trace.ops:
        if op.flops:
            by[op.dtype] = by.get(op.dtype, 0) + op.flops
    name = max(by, key=by.get) if by else "float32"
    return getattr(torch, name, torch.float32) if isinstance(getattr(torch, name, None), torch.dtype) else \
        torch.float32


def sync_points(ev, ks: list[Kernel]) -> set[int]:
    """Kernel indices after which the host waits: for each host sync, the last kernel issued before it."""
    from ..syncs import HostSync

    starts = [k.index for k in ks]
    out = set()
    for at, event, _where, _step, _phase in ev.sync_at:
        if isinstance(event, HostSync):
            before = [i for i in starts if i < at]
            if before:
                out.add(before[-1])
    return out


def t(seconds: float) -> str:
    return fmt_time(seconds) if seconds >= 1e-7 else "< 0.1 µs"


def share(part: float, whole: float) -> str:
    return "all" if whole and part >= whole else f"{part / whole:.0%}" if whole and part / whole >= 0.01 else "< 1%"


def b(nbytes: float) -> str:
    return fmt_bytes(nbytes)


def per_step(n: float, steps: int) -> float:
    """A count per step: whole (an int), else to one decimal (from 100 on, whole). Print it with display.count
    ("1 host sync", "2.5 host syncs") or display.number (5, not 5.0; 1,234)."""
    v = n / steps
    return round(v) if abs(v - round(v)) < 1e-9 or abs(v) >= 100 else round(v, 1)


def op_text(op: Op) -> str:
    shapes = " @ ".join("x".join(map(str, s)) for s in op.in_shapes[-2:]) if op.gemm else \
        ", ".join("x".join(map(str, s)) for s in op.in_shapes)
    return f"{op.name} {shapes}"


def saved_at_peak(ev) -> dict[int, int]:
    """Bytes saved for backward at the step's peak ledger, by the index of the op that made them ({} without one)."""
    out: dict[int, int] = {}
    if ev.ledgers:
        snap = max(ev.ledgers, key=lambda s: s.ledger.total_bytes)
        for row, op_i in zip(snap.ledger.entries, snap.made_by):
            if op_i is not None and row.counted:
                out[op_i] = out.get(op_i, 0) + row.bytes
    return out
