"""Which operations make the host wait for the device: the sync detector.

`host_syncs(fn, *args)` runs `fn` on whatever tensors it is given (CPU ones too) and lists, with
the user's line of code, every operation that on a GPU would make the CPU wait for the stream.
Lessons 00, 05 (capture safety) and 06 (data movement) use it.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# --- which operations make the host wait ----------------------------------------------------

# aten ops that read a device value on the host, or whose output size depends on the data (the
# host must learn the size before it can allocate): on a GPU each one waits for the stream.
_SYNC_OPS = {
    "_local_scalar_dense": "reads a value on the host (.item(), float(t), if t:, print(t))",
    "is_nonzero": "reads a value on the host (if t:, bool(t))",
    "nonzero": "output size depends on the data",
    "masked_select": "output size depends on the data",
    "unique_dim": "output size depends on the data",
    "_unique2": "output size depends on the data",
    "unique_consecutive": "output size depends on the data",
}
_HOST_METHODS = {"cpu": "copies to the host", "tolist": "copies to the host", "numpy": "copies to the host",
                 "item": "reads a value on the host"}


@dataclass(frozen=True)
class HostSync:
    what: str  # the aten op or Tensor method
    why: str
    where: str  # file:line of the code that asked for it

    def __str__(self) -> str:
        return f"{self.what:24s} {self.why}  [{self.where}]"


def _caller() -> str:
    """The innermost frame outside torch and this module: the user's line, as its source text
    (file names of notebook cells change from run to run; the code does not)."""
    for frame in reversed(traceback.extract_stack()):
        f = frame.filename.replace("\\", "/")
        if "/torch/" not in f and not f.endswith("/syncs.py") and "<frozen" not in f:
            return (frame.line or "").split("  #")[0].strip() or f"line {frame.lineno}"
    return "?"


def _bool_index(name: str, args) -> bool:
    """`t[mask]` / `t[mask] = v`: aten.index / index_put with a boolean index (a nonzero inside)."""
    if name not in ("index", "index_put", "index_put_", "_index_put_impl_") or len(args) < 2:
        return False
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in (args[1] or ()))


class _SyncRecorder(TorchDispatchMode):
    _inside_method = False

    def __init__(self, found: list):
        super().__init__()
        self.found = found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not _SyncRecorder._inside_method:
            if name in _SYNC_OPS:
                _add(self.found, HostSync(f"aten.{name}", _SYNC_OPS[name], _caller()))
            elif _bool_index(name, args):
                _add(self.found, HostSync(f"aten.{name} (bool mask)", "output size depends on the data", _caller()))
        return func(*args, **(kwargs or {}))


def _add(found: list, sync: HostSync) -> None:
    """One entry per line of user code: print(t) alone reads many values."""
    if not found or found[-1].where != sync.where:
        found.append(sync)


def host_syncs(fn, *args, **kwargs) -> list[HostSync]:
    """Every operation in `fn(*args)` that would make the host wait for a GPU, in order.

    Device-independent: it runs `fn` on whatever tensors it is given (CPU ones included) and
    records the aten ops that read device values or have data-dependent output sizes, and the
    Tensor methods that copy to the host (`.cpu()`, `.tolist()`, `.numpy()`, `.item()`), each
    with the user's line. On a CPU these cost nothing; on a GPU each one stalls the queue.
    """
    found: list[HostSync] = []
    recorder = _SyncRecorder(found)
    saved = {m: getattr(torch.Tensor, m) for m in _HOST_METHODS}

    def patched(method):
        original = saved[method]

        def call(self, *a, **k):
            if _SyncRecorder._inside_method:  # e.g. print(t) formats with .item(): one entry, its own line
                return original(self, *a, **k)
            _add(found, HostSync(f"Tensor.{method}()", _HOST_METHODS[method], _caller()))
            _SyncRecorder._inside_method = True  # its own aten op is the same sync: count it once
            try:
                return original(self, *a, **k)
            finally:
                _SyncRecorder._inside_method = False

        return call

    try:
        for m in _HOST_METHODS:
            setattr(torch.Tensor, m, patched(m))
        with recorder:
            fn(*args, **kwargs)
    finally:
        for m, original in saved.items():
            setattr(torch.Tensor, m, original)
    return found


__all__ = ["HostSync", "host_syncs"]
