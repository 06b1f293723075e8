"""Which operations make the host wait for the device, and which copy data between devices.

`syncs(fn, *args)` runs `fn` on whatever tensors it is given (CPU ones too) and reports, each with the user's line:
- every operation that on a GPU makes the CPU wait for the stream (a *host sync*): a value read
  on the host (`.item()`, `if t:`, `print(t)`), a copy to the host (`.cpu()`, `.tolist()`,
  `.numpy()`), an op whose output size depends on the data (`nonzero`, boolean-mask indexing),
  and a blocking copy between host and device;
- every copy between devices (`.to(device)`, `.cuda()`, `.cpu()` of a GPU tensor, `copy_`
  across devices) with its bytes, direction and whether it blocks, and every `pin_memory()`.

`host_syncs(fn, *args)` is the older, smaller answer (lessons 00 and 05): the host syncs only,
one entry per line of code in a row. Lessons 00, 05 (capture safety) and 06 (data movement) use them.

What decides whether a copy blocks (PyTorch's `copy_` on CUDA, `aten/src/ATen/native/cuda/Copy.cu`):
a copy without `non_blocking=True` ends with a stream synchronize (`memcpy_and_sync`, which
`torch.cuda.set_sync_debug_mode("warn")` reports); with `non_blocking=True` it is queued
(`cudaMemcpyAsync`). `.to("cpu", non_blocking=True)` of a GPU tensor allocates a pinned
destination (`_to_copy`), so it is truly asynchronous, and reading it before a synchronize is a
race. A non-blocking copy *from pageable* host memory does not wait for the queue, but the driver
stages it through a pinned buffer first (CUDA runtime API, "API synchronization behavior").
"""
from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass, field

import torch

from .sync_table import (_KERNEL_WHY, _SYNC_OPS, BLIND_SPOTS, CUDA_KERNEL_SYNCS,  # noqa: F401 (re-exported)
                         _becomes_masked_fill, _bool_index, dispatch_sync, on_device)
from .compiling import EagerWatch
from .display import count
from .trace import meta_reads

_dispatch_sync = dispatch_sync  # its older name

_HOST_METHODS = {"cpu": "copies to the host", "tolist": "copies to the host", "numpy": "copies to the host",
                 "item": "reads a value on the host"}
# Only `syncs` (not `host_syncs`) wraps printing: print(t) is then one entry, not one per value.
_PRINT_METHODS = {"__repr__": "prints values: copies them to the host"}
_HOST = "cpu"


@dataclass(frozen=True)
class HostSync:
    what: str  # the aten op or Tensor method
    why: str
    where: str  # the user's line of code that asked for it

    def __str__(self) -> str:
        return f"{self.what:24s} {self.why}  [{self.where}]"


@dataclass(frozen=True)
class Transfer:
    """One copy between devices (or into page-locked host memory), as dispatched."""

    what: str  # the aten op: "aten._to_copy", "aten.copy_", "aten._pin_memory"
    src: str  # device types: "cpu", "cuda", "meta"...
    dst: str
    nbytes: int
    blocking: bool  # the host waits for the device queue to drain (a host sync)
    pinned: bool | None  # the host side is page-locked (None: no host side, or unknown)
    non_blocking: bool
    where: str

    @property
    def direction(self) -> str:
        if self.what == "aten._pin_memory":
            return "host → pinned host"
        if self.src == _HOST and self.dst != _HOST:
            return "host → device" if self.dst == "cuda" else f"{self.src} → {self.dst}"
        if self.dst == _HOST and self.src != _HOST:
            return "device → host" if self.src == "cuda" else f"{self.src} → {self.dst}"
        return f"{self.src} → {self.dst}"

    @property
    def why(self) -> str:
        if self.what == "aten._pin_memory":
            return "copies into page-locked memory (a host-side copy; pays off only when the buffer is reused)"
        if "cuda" not in (self.src, self.dst):
            return "a copy between devices"
        if self.blocking:
            return "blocking copy: the host waits until the queue has drained and the copy is done"
        if self.src == _HOST and not self.pinned:
            return "non_blocking from pageable memory: the driver stages it through a pinned buffer first"
        if self.dst == _HOST:
            return "asynchronous: queued on the stream; synchronize before the host reads the result"
        return "asynchronous: queued on the stream; leave the pinned source alone until the copy is done"

    def __str__(self) -> str:
        from .device import fmt_bytes

        return f"{self.direction:20s} {fmt_bytes(self.nbytes):>10s}  {self.why}  [{self.where}]"


@dataclass
class SyncReport:
    """What `syncs` found, in the order it happened: HostSync and Transfer entries."""

    events: list = field(default_factory=list)
    view: str = "here"  # "here": every tensor as if on a GPU (syncs); "cuda": CUDA's semantics (cuda_syncs)

    @property
    def syncs(self) -> list[HostSync]:
        return [e for e in self.events if isinstance(e, HostSync)]

    @property
    def transfers(self) -> list[Transfer]:
        return [e for e in self.events if isinstance(e, Transfer) and e.what != "aten._pin_memory"]

    @property
    def pins(self) -> list[Transfer]:
        return [e for e in self.events if isinstance(e, Transfer) and e.what == "aten._pin_memory"]

    @property
    def transfer_bytes(self) -> int:
        return sum(t.nbytes for t in self.transfers)

    def lines(self) -> dict[str, int]:
        """How many host syncs each line of code caused (a line in a loop counts once per pass)."""
        out: dict[str, int] = {}
        for s in self.syncs:
            out[s.where] = out.get(s.where, 0) + 1
        return out

    def summary(self) -> str:
        from .device import fmt_bytes

        lines = [f"{count(len(self.syncs), 'host sync')}, {count(len(self.transfers), 'copy')} between devices "
                 f"({fmt_bytes(self.transfer_bytes)}), {count(len(self.pins), 'pin_memory call')}"
                 + (" on a CUDA GPU (the arguments on the device, tensors made without device= on the host)"
                    if self.view == "cuda" else "")]
        for where, n in self.lines().items():
            lines.append(f"  {n:4d} × sync at  {where}")
        lines.append("not seen: " + "; ".join(BLIND_SPOTS if self.view != "cuda" else BLIND_SPOTS[::2]))
        return "\n".join(lines)

    def table(self) -> str:
        return "\n".join(["sync  " + str(e) if isinstance(e, HostSync) else "copy  " + str(e) for e in self.events]) \
            or "no host syncs, no copies between devices"

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self):
        return iter(self.events)

    def __repr__(self) -> str:
        return self.summary()


_NOT_USERS = ("/syncs.py", "/sandbox.py", "/sandbox_disk.py")  # this module's frames and the sandbox's


def _caller() -> str:
    """The innermost frame outside torch and this module: the user's line, as its source text
    (file names of notebook cells change from run to run; the code does not)."""
    for frame in reversed(traceback.extract_stack()):
        f = frame.filename.replace("\\", "/")
        if "/torch/" not in f and not f.endswith(_NOT_USERS) and "<frozen" not in f:
            return (frame.line or "").split("  #")[0].strip() or f"line {frame.lineno}"
    return "?"


def _pinned(t: torch.Tensor) -> bool | None:
    if t.device.type != _HOST:
        return None
    try:
        return bool(t.is_pinned())
    except Exception:  # no accelerator: nothing can be pinned
        return False


def _kind(t: torch.Tensor, cuda_view: bool) -> str:
    return "cuda" if cuda_view and on_device(t) else t.device.type


def _transfer(name: str, args, kwargs, out, cuda_view: bool = False) -> Transfer | None:
    """A Transfer when this op copies between devices or pins; else None. In the CUDA view meta is CUDA."""
    if name == "_pin_memory" and args and isinstance(args[0], torch.Tensor):
        t = args[0]
        return Transfer("aten._pin_memory", _HOST, _HOST, t.numel() * t.element_size(), False, True, False, _caller())
    if name == "_to_copy" and args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor):
        src, dst = args[0], out
        non_blocking = bool(kwargs.get("non_blocking", False))
    elif name == "copy_" and len(args) >= 2 and isinstance(args[1], torch.Tensor):
        dst, src = args[0], args[1]
        non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
    else:
        return None
    s, d = _kind(src, cuda_view), _kind(dst, cuda_view)
    if src.device.type == dst.device.type:
        return None
    host = src if src.device.type == _HOST else dst if dst.device.type == _HOST else None
    pinned = _pinned(host) if host is not None else None
    nbytes = dst.numel() * dst.element_size()
    blocking = nbytes > 0 and copy_blocks(s, d, non_blocking, pinned)
    return Transfer(f"aten.{name}", s, d, nbytes, blocking, pinned, non_blocking, _caller())


def copy_blocks(src: str, dst: str, non_blocking: bool, host_pinned: bool | None) -> bool:
    """Whether a copy between these device types makes the host wait for the GPU's queue.

    Every host<->GPU copy without non_blocking does (PyTorch ends it with memcpy_and_sync), and so
    does a non_blocking copy *into* pageable host memory (the driver returns only when it is done).
    A non_blocking copy from the host, pinned or not, does not wait for the queue. (A copy of no
    bytes returns early; callers check that.)"""
    if "cuda" not in (src, dst) or _HOST not in (src, dst):
        return False
    return not non_blocking or (dst == _HOST and not host_pinned)


class _SyncRecorder(EagerWatch):
    """Host syncs and copies as they dispatch; a compiled function runs eagerly under it and stays compiled."""

    _inside_method = False

    def __init__(self, found: list, per_line: bool = True, cuda_view: bool = False, on_event=None):
        super().__init__()
        self.found = found
        self.per_line = per_line
        self.cuda_view = cuda_view
        self.on_event = on_event  # called with each event as it happens (diagnose places it among the ops)

    def add(self, event) -> None:
        if self.per_line:
            _add(self.found, event)
        else:
            self.found.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if not _SyncRecorder._inside_method:
            found = dispatch_sync(name, args, kwargs, self.cuda_view)
            if found:
                self.add(HostSync(*found, _caller()))
        if self.cuda_view and name in ("_local_scalar_dense", "is_nonzero") and args[0].device.type == "meta":
            out = False if args[0].dtype == torch.bool or name == "is_nonzero" else 0  # meta holds no value
        else:
            out = func(*args, **kwargs)
        if name in ("_to_copy", "copy_", "_pin_memory"):
            t = _transfer(name, args, kwargs, out, self.cuda_view)
            if t is not None:
                if t.blocking and not _SyncRecorder._inside_method:  # .cpu() already counted its sync
                    self.add(HostSync(f"{t.what} ({t.src} → {t.dst})", "a blocking copy: the host waits", t.where))
                if not self.per_line:
                    self.found.append(t)
                    if self.on_event is not None:
                        self.on_event(t)
        return out


def _add(found: list, sync: HostSync) -> None:
    """One entry per line of user code in a row: print(t) alone reads many values."""
    if not found or found[-1].where != sync.where:
        found.append(sync)


def _record(fn, args, kwargs, per_line: bool, cuda_view: bool = False, on_event=None) -> list:
    found: list = []
    recorder = _SyncRecorder(found, per_line, cuda_view, on_event)
    methods = dict(_HOST_METHODS, **({} if per_line else _PRINT_METHODS))
    saved = {m: getattr(torch.Tensor, m) for m in methods}

    def patched(method):
        original = saved[method]

        def call(self, *a, **k):
            if _SyncRecorder._inside_method or (cuda_view and not on_device(self)):  # a host tensor: no wait
                return original(self, *a, **k)  # (print(t) formats with .item(): one entry, its own line)
            recorder.add(HostSync(f"Tensor.{method}()", methods[method], _caller()))
            _SyncRecorder._inside_method = True  # its own aten op is the same sync: count it once
            try:
                if cuda_view and self.device.type == "meta" and method in ("cpu", "tolist", "numpy"):
                    return getattr(torch.zeros(self.shape, dtype=self.dtype), method)(*a, **k)  # a stand-in
                return original(self, *a, **k)
            finally:
                _SyncRecorder._inside_method = False

        return call

    one_hot = torch.nn.functional.one_hot

    def watched_one_hot(t, num_classes=-1):
        """one_hot's host reads are composite (seen at the dispatcher) but differ by device: on CUDA only
        num_classes=-1 reads (Onehot.cpp). One entry for that; the CPU-only checks are not GPU syncs."""
        if _SyncRecorder._inside_method:
            return one_hot(t, num_classes)
        if num_classes == -1 and (on_device(t) or not cuda_view):
            recorder.add(HostSync("F.one_hot (no num_classes)", _KERNEL_WHY["one_hot"], _caller()))
        _SyncRecorder._inside_method = True
        try:
            return one_hot(t, num_classes)
        finally:
            _SyncRecorder._inside_method = False

    try:
        for m in methods:
            setattr(torch.Tensor, m, patched(m))
        torch.nn.functional.one_hot = watched_one_hot
        with (meta_reads() if cuda_view else contextlib.nullcontext()), recorder:
            fn(*args, **kwargs)
    finally:
        for m, original in saved.items():
            setattr(torch.Tensor, m, original)
        torch.nn.functional.one_hot = one_hot
        _SyncRecorder._inside_method = False
    return found


def host_syncs(fn, *args, **kwargs) -> list[HostSync]:
    """Every operation in `fn(*args)` that would make the host wait for a GPU, in order.

    Device-independent: it runs `fn` on whatever tensors it is given (CPU ones included) and
    records the aten ops that read device values or have data-dependent output sizes, and the
    Tensor methods that copy to the host (`.cpu()`, `.tolist()`, `.numpy()`, `.item()`), each
    with the user's line (one entry per line in a row). On a CPU these cost nothing; on a GPU
    each one stalls the queue. `syncs` gives every occurrence, and the copies between devices.
    """
    return _on_copies("host_syncs", fn, args, kwargs, per_line=True)


def _on_copies(tool: str, fn, args, kwargs, per_line: bool, cuda_view: bool = False, meta: bool = False) -> list:
    """_record on copies of fn and everything it reaches (lessons_lib.reach), in the sandbox (sandbox.py: no write
    to disk, the random state as it was, a budget of ops and seconds). A call that cannot run, something that
    cannot be copied, or a step stopped by the budget: a ValueError with one sentence."""
    from . import sandbox, step_call
    from .reach import copy_step

    problem = step_call.problem(fn, args, kwargs, tool)
    if problem is not None:
        raise ValueError(problem)
    fn, args, kwargs, copier = copy_step(fn, args, kwargs, "meta" if meta else "same",
                                         step_call.names(fn, len(args)), free_to_meta=False)
    with sandbox.sandbox(meta=meta, home="cuda", shared=copier.shared) as box:
        try:
            return _record(lambda: sandbox.call(fn, *args, **kwargs), (), {}, per_line, cuda_view)
        except sandbox.Stopped:
            raise ValueError(f"{tool} {box.stopped}.") from None


def syncs(fn, *args, **kwargs) -> SyncReport:
    """Every host sync and every copy between devices that `fn(*args, **kwargs)` performs.

    Each occurrence counts (a sync in a loop of n passes is n entries), so the count per pass of
    a loop can be read off; print(t) is one entry. Device-independent for the syncs: on a CPU it
    lists what would stall a GPU. Copies between devices are what really ran: on a CPU-only
    machine there are none unless the code copies to `meta` (tests do). Blocking host<->GPU copies
    are host syncs too, as `torch.cuda.set_sync_debug_mode("warn")` reports them. It runs on copies of what `fn`
    reaches (lessons_lib.reach), in the sandbox: no write to disk, the random state kept, a budget of ops.
    """
    return SyncReport(_on_copies("find_syncs", fn, args, kwargs, per_line=False))


def cuda_syncs(fn, *args, **kwargs) -> SyncReport:
    """`syncs` with CUDA's semantics: what would make the host wait for a CUDA GPU if `fn`'s arguments lived
    on one, while tensors `fn` makes without `device=` (an index order, a mask before its `.to()`) stay on the
    host. Works with no GPU: arguments that are not on a GPU already are replaced by shape-only copies on
    `meta`, which stands in for the GPU (modules are deep-copied there; your own are never touched), and
    host reads of meta values return a stand-in (0, False, zeros; a boolean mask selects everything). It runs on
    copies, in the sandbox, as `syncs` does; tensors reached through a closure or a global stay on the host (an
    index made outside), its modules and optimizers go to meta with the arguments.

    What changes from `syncs` (which counts every host read, as if every tensor were on a GPU): a read of
    a host tensor waits for nothing (x[j] with a CPU index is host work, not a sync); an index tensor on
    the host used on a device tensor is a blocking copy of the index (x[idx] with a CPU idx); `.to(device)`
    of a host tensor is a real host-to-device copy, blocking unless non_blocking=True. Values on meta are
    stand-ins, so code whose control flow reads values may take another path than on the GPU.
    """
    on_gpu = any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in _leaves((args, kwargs)))
    return SyncReport(_on_copies("cuda_syncs", fn, args, kwargs, per_line=False, cuda_view=True, meta=not on_gpu),
                      view="cuda")


def watch(fn, args=(), kwargs=None, cuda_view: bool = True, on_event=None) -> SyncReport:
    """`syncs` (cuda_view=False) or `cuda_syncs`' view (cuda_view=True) of `fn(*args, **kwargs)` on the tensors
    exactly as given (nothing is moved to meta: the caller has done that, closures included), calling
    `on_event(event)` as each HostSync or Transfer happens, so a caller watching the ops as well can place
    it among them (lessons_lib.diagnose does)."""
    found = _record(fn, args, kwargs or {}, per_line=False, cuda_view=cuda_view, on_event=on_event)
    return SyncReport(found, view="cuda" if cuda_view else "here")


def _leaves(obj):  # the tensors in an argument structure (a module's parameters and buffers)
    if isinstance(obj, torch.nn.Module):
        return list(obj.parameters()) + list(obj.buffers())
    if isinstance(obj, (list, tuple)):
        return [leaf for o in obj for leaf in _leaves(o)]
    if isinstance(obj, dict):
        return [leaf for o in obj.values() for leaf in _leaves(o)]
    return [obj]


__all__ = ["HostSync", "Transfer", "SyncReport", "copy_blocks", "host_syncs", "syncs", "cuda_syncs", "watch",
           "CUDA_KERNEL_SYNCS", "BLIND_SPOTS"]
