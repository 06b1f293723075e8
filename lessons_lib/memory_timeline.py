"""Memory over one training step, op by op: the timeline and its peaks.

`timeline` follows one forward and backward step op by op. Its predicted curve comes from
the op trace and tensor lifetimes, so it works on CPU, CUDA and `meta` alike; beside it, a
measured curve comes from the CUDA allocator, or on CPU from the profiler's memory events.
`peaks` sums a timeline up in a few numbers; `measured_peaks` (memory_measured.py, re-exported)
measures them with nothing in the way.
Split from memory.py (issue 21), which re-exports every name here.

Storages, not tensors, cost memory: two views of one tensor are counted once.
"""
from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from .device import fmt_bytes
from .memory_measured import (_PHASES, Measured, _cpu_memory_profiler, _graph_nodes, _loss,  # noqa: F401
                              _measure_cpu, _measure_cuda, _quiet_fd2, _tensors, _warm_up, measured_peaks)
from .trace import Op, OpTrace, _Recorder

_MARK = "lessons_lib.memory.op"  # profiler range around each op, to place CPU memory events


def _storage(t: torch.Tensor) -> tuple[int, int]:
    """(identity, bytes) of the memory behind `t`.

    data_ptr() is 0 for every tensor on `meta`, so the identity is the address of the C++
    StorageImpl instead: shared by all views of a storage, on every device.
    """
    try:
        s = t.untyped_storage()
        return s._cdata, s.nbytes()
    except (RuntimeError, NotImplementedError):  # sparse and other layouts without one storage
        return id(t), t.numel() * t.element_size()


class _Tracker(_Recorder):
    """trace's op recorder, which also notices each storage an op creates and when it dies."""

    def __init__(self, after_op: Callable[[Op], None] | None = None, mark: bool = False):
        super().__init__(OpTrace())
        self.made: set[int] = set()  # every storage created during the run
        self.alive: set[int] = set()  # those not freed yet (a freed address gets reused)
        self.live = 0  # bytes of those
        self.after_op, self.mark = after_op, mark
        self._finalizers: list[weakref.finalize] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        with torch.profiler.record_function(_MARK) if self.mark else contextlib.nullcontext():
            out = super().__torch_dispatch__(func, types, args, kwargs)
        op = self.trace.ops[-1]
        if not op.is_view:
            old = {_storage(a)[0] for a in _tensors((args, kwargs))}  # in-place and out= write here
            for t in _tensors(out):
                key, nbytes = _storage(t)
                if key in old or key in self.alive:
                    continue
                self.made.add(key)
                self.alive.add(key)
                self.live += nbytes
                # A storage has one Python object, which dies with it (when the last view or
                # saved-for-backward reference goes), so this fires exactly at the free.
                with contextlib.suppress(RuntimeError, NotImplementedError, TypeError):
                    self._finalizers.append(weakref.finalize(t.untyped_storage(), self._free, key, nbytes))
        if self.after_op:
            self.after_op(op)
        return out

    def _free(self, key: int, nbytes: int) -> None:
        self.alive.discard(key)
        self.live -= nbytes

    def detach(self) -> None:
        """Stop watching storages that outlive the analysis (gradients, outputs)."""
        for f in self._finalizers:
            f.detach()


# --- the op-by-op timeline --------------------------------------------------------------


class Bytes(NamedTuple):
    predicted: int
    measured: int | None  # None where nothing measures it (meta, or a profiler that failed)


@dataclass(frozen=True)
class Row:
    index: int
    op: str
    phase: str  # "forward" or "backward"
    predicted: int  # bytes this step allocated that are still alive after the op
    measured: int | None


@dataclass
class Peaks:
    """A step's memory in a few numbers, in bytes beyond what was held before the step."""

    forward: Bytes
    backward: Bytes
    step: Bytes
    after_forward: Bytes  # current once the forward is done: what backward starts from
    reserved: int | None  # CUDA: what the caching allocator holds after the step, whole process


@dataclass
class Timeline:
    """Bytes alive after each op of one step, predicted and, where possible, measured."""

    rows: list[Row]
    device: str
    trace: OpTrace
    measured_peaks: tuple[int, int] | None = None  # (forward, backward), inside ops included
    reserved: int | None = None

    @property
    def boundary(self) -> int:
        """Index of the first backward op (len(rows) when there is none)."""
        return sum(r.phase == "forward" for r in self.rows)

    def _peak(self, phase: str | None) -> Bytes:
        predicted = max((r.predicted for r in self.rows if phase in (None, r.phase)), default=0)
        if self.measured_peaks is None:
            return Bytes(predicted, None)
        fwd, bwd = self.measured_peaks
        return Bytes(predicted, {"forward": fwd, "backward": bwd}.get(phase, max(fwd, bwd)))

    peak_forward = property(lambda self: self._peak("forward"))
    peak_backward = property(lambda self: self._peak("backward"))
    peak_step = property(lambda self: self._peak(None))

    def peaks(self) -> Peaks:
        last = self.rows[self.boundary - 1] if self.boundary else Row(0, "", "forward", 0, None)
        return Peaks(self.peak_forward, self.peak_backward, self.peak_step,
                     Bytes(last.predicted, last.measured), self.reserved)

    def explain(self) -> str:
        """What current, peak and reserved mean, with this step's numbers."""
        def show(b: Bytes) -> str:
            measured = "" if b.measured is None else f", measured {fmt_bytes(b.measured)}"
            return f"predicted {fmt_bytes(b.predicted)}{measured}"

        p = self.peaks()
        lines = [
            f"current after the forward: {show(p.after_forward)}. Current is what is held at one moment: "
            "tensors still referenced plus those autograd saved for backward.",
            f"peak: forward {show(p.forward)}; backward {show(p.backward)}; whole step {show(p.step)}. "
            "Peak is the most held at any moment; it decides whether a step fits. "
            "Measured peaks also see scratch memory that lives only inside one op.",
        ]
        if p.reserved is not None:
            lines.append(
                f"reserved: {fmt_bytes(p.reserved)}. Reserved is what the caching allocator holds from the "
                "driver for the whole process, in use or cached for reuse; nvidia-smi shows it plus the "
                "CUDA context."
            )
        return "\n".join(lines)

    def plot(self, ax=None):
        """Predicted (and measured) MiB after each op, the forward/backward boundary marked."""
        from .plots import subplots

        fig = ax.figure if ax is not None else subplots(figsize=(8, 4), layout="constrained")[0]
        ax = ax if ax is not None else fig.axes[0]
        idx = [r.index for r in self.rows]
        predicted = [r.predicted / 2**20 for r in self.rows]
        ax.step(idx, predicted, where="post", label="predicted (op trace + lifetimes)")
        if any(r.measured is not None for r in self.rows):
            how = "CUDA allocator" if self.device == "cuda" else "profiler memory events"
            measured = [float("nan") if r.measured is None else r.measured / 2**20 for r in self.rows]
            ax.step(idx, measured, where="post", linestyle="--", label=f"measured ({how})")
        if 0 < self.boundary < len(self.rows):
            ax.axvline(self.boundary - 0.5, color="grey", linestyle=":", label="forward | backward")
        ax.set_xlabel("op index (aten ops in dispatch order)")
        ax.set_ylabel("memory allocated by this step (MiB)")
        ax.set_title(f"memory during one training step ({self.device})")
        # Below the axes: inside, any corner can sit on a step or the forward | backward line.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=8)
        return fig


def timeline(fn: Callable, *args, backward: bool = True, measure: bool = True, **kwargs) -> Timeline:
    """Run one step, `fn(*args, **kwargs)` then `.sum().backward()`, and follow memory op by op.

    Predicted bytes work on every device. Measured bytes come from the CUDA allocator (after
    a warm-up step, so cuBLAS's one-off workspaces are not counted) or the CPU profiler. The
    `.grad` of tensor arguments is restored afterwards; leaves captured inside `fn` (a module's
    weights) accumulate gradients, as in training.
    """
    tensors = _tensors((args, kwargs))
    device = tensors[0].device if tensors else torch.device("cpu")
    cuda, cpu = measure and device.type == "cuda", measure and device.type == "cpu"
    if cuda:
        _warm_up(fn, args, kwargs, backward)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)

    rows: list[Row] = []
    phase = "forward"

    def sample(op: Op) -> None:  # runs inside the dispatch hook, right after each op
        measured = torch.cuda.memory_allocated(device) - base if cuda else None
        rows.append(Row(len(rows), op.name, phase, tracker.live, measured))

    tracker = _Tracker(sample, mark=cpu)
    leaves = [t for t in tensors if t.requires_grad and t.is_leaf]
    old_grads = [t.grad for t in leaves]
    for t in leaves:
        t.grad = None  # so that a re-run allocates the same way instead of accumulating
    measured = None
    # The CPU has no allocator counter; the profiler sees every allocation and free.
    try:
        with _cpu_memory_profiler() if cpu else contextlib.nullcontext() as prof, tracker:
            out = fn(*args, **kwargs)
            loss = _loss(out) if backward else None
            if cuda:
                fwd_peak = torch.cuda.max_memory_allocated(device) - base
                torch.cuda.reset_peak_memory_stats(device)
            phase = "backward"
            if loss is not None:
                loss.backward()
            del out, loss
        if cuda:
            measured = (fwd_peak, torch.cuda.max_memory_allocated(device) - base if backward else 0)
        elif prof is not None:
            measured = _replay_cpu_events(prof, rows)
    finally:
        tracker.detach()
        for t, g in zip(leaves, old_grads):
            t.grad = g
    reserved = torch.cuda.memory_reserved(device) if cuda else None
    return Timeline(rows, device.type, tracker.trace, measured, reserved)


def _replay_cpu_events(prof, rows: list[Row]) -> tuple[int, int] | None:
    """Fill in each row's measured bytes from the profiler; return (forward, backward) peaks.

    Every CPU allocation and free is a "[memory]" event with signed bytes. Summed in time
    order they give the bytes live; our marker around each op says which op each belongs to.
    """
    try:
        events = prof.profiler.kineto_results.events()
    except AttributeError:
        return None
    ns = bool(events) and hasattr(events[0], "start_ns")  # older releases count microseconds

    def start(e) -> int:
        return e.start_ns() if ns else e.start_us() * 1000

    def end(e) -> int:
        return start(e) + (e.duration_ns() if ns else e.duration_us() * 1000)

    ends = sorted(end(e) for e in events if e.name() == _MARK)
    mem = sorted((start(e), e.nbytes()) for e in events
                 if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
    if len(ends) != len(rows):
        return None  # the profiler missed ops: no honest comparison
    total, k, peak = 0, 0, {"forward": 0, "backward": 0}
    for i, op_end in enumerate(ends):
        phase = rows[i].phase
        peak[phase] = max(peak[phase], total)  # what a phase starts with counts towards its peak
        while k < len(mem) and mem[k][0] <= op_end:
            total += mem[k][1]
            peak[phase] = max(peak[phase], total)
            k += 1
        rows[i] = Row(i, rows[i].op, rows[i].phase, rows[i].predicted, total)
    return peak["forward"], peak["backward"]


def peaks(fn: Callable, *args, **kwargs) -> Peaks:
    """Forward, backward and whole-step peaks of one step (and CUDA's reserved): see `timeline`."""
    return timeline(fn, *args, **kwargs).peaks()

