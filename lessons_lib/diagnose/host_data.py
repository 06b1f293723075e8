"""What the dispatcher does not show of a step's host data, and the host reads that are no GPU sync.

- torch.tensor(data, device=...), torch.as_tensor(data, device=...) and t.new_tensor(data) copy Python data from
  host memory to the device: on CUDA a blocking copy at every call (internal_new_from_data: `tensor.to(device)`
  without non_blocking). A Python list as an index (x[:, [-1]]) becomes an index tensor the same way
  (indexing_tensor_from_data), copied to the tensor's device. None of these copies reaches a dispatch mode (the
  Python key is excluded there), so they are watched at their Python entry points, when the reader's own line
  calls them, and reported to the collector as a Transfer and a HostSync.
- torch._is_all_true, the check behind distributions' argument validation, reads its result on the host: a sync,
  which the sync detector records; on meta, which holds no values, the check then stands in as passed (a
  stand-in False would make it raise on values meta does not have).
- On a CPU run every host read counts as a GPU sync would, but on a GPU machine some reads are of host tensors
  too: a DataLoader's own code (torch/utils/data: its sampler, its collate) and an optimizer's step counts (0-dim
  tensors kept on the CPU without capturable=True). Those are not GPU syncs (`library`, and the collector's
  host keys); a distribution's reads are its argument checks (validate_args).
"""
from __future__ import annotations

import contextlib
import sys

import torch

from ..code_lines import _skipped, user_frame
from ..syncs import HostSync, Transfer

_WHY = "a tensor made from Python data on the device: a blocking copy from host memory, at every call"


def _on_device(t, cuda_view: bool) -> bool:
    return isinstance(t, torch.Tensor) and (t.device.type in ("cuda", "meta") if cuda_view else True)


def _from_reader() -> bool:
    """The caller of the watched entry point is the reader's code (not torch's own, nor the toolkit's)."""
    return not _skipped(sys._getframe(2).f_code.co_filename)


def _has_list(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, list) for p in parts)


@contextlib.contextmanager
def watch(col, cuda_view: bool):
    """Report tensors made from Python data on the device to `col` (a diagnose Collector) during the block."""
    tensor, as_tensor, new_tensor = torch.tensor, torch.as_tensor, torch.Tensor.new_tensor
    getitem, setitem = torch.Tensor.__getitem__, torch.Tensor.__setitem__

    def report(what: str, nbytes: int) -> None:
        if col.paused or col.phase == "optimizer":
            return
        where = user_frame(3).text
        col.on_sync(Transfer(what, "cpu", "cuda", nbytes, True, False, False, where))
        col.on_sync(HostSync(what, _WHY, where))

    def factory(original, name):
        def make(data, *a, **k):
            out = _on_meta(data, k) if isinstance(data, (list, tuple)) else None
            out = original(data, *a, **k) if out is None else out
            if k.get("device") is not None and not isinstance(data, torch.Tensor) and _from_reader() \
                    and _on_device(out, cuda_view):
                report(f"torch.{name}(Python data, device=...)", out.numel() * out.element_size())
            return out
        return make

    def from_data(self, data, *a, **k):
        out = new_tensor(self, data, *a, **k)
        if not isinstance(data, torch.Tensor) and _from_reader() and _on_device(out, cuda_view):
            report("Tensor.new_tensor(Python data)", out.numel() * out.element_size())
        return out

    def get(self, index):
        if _has_list(index) and _from_reader() and _on_device(self, cuda_view):
            report("an index given as a Python list", 8)
        return getitem(self, index)

    def put(self, index, value):
        if _has_list(index) and _from_reader() and _on_device(self, cuda_view):
            report("an index given as a Python list", 8)
        return setitem(self, index, value)

    torch.tensor, torch.as_tensor = factory(tensor, "tensor"), factory(as_tensor, "as_tensor")
    torch.Tensor.new_tensor, torch.Tensor.__getitem__, torch.Tensor.__setitem__ = from_data, get, put
    try:
        yield
    finally:
        torch.tensor, torch.as_tensor = tensor, as_tensor
        torch.Tensor.new_tensor, torch.Tensor.__getitem__, torch.Tensor.__setitem__ = new_tensor, getitem, setitem


def _on_meta(data, kwargs):
    """torch.tensor of a list that holds meta tensors (values a GPU would read on the host, which meta does not
    have): an empty meta tensor of the shape torch would make, or None when the list holds no meta tensor."""
    found = []

    def shape(d):
        if isinstance(d, torch.Tensor):
            found.append(d)
            return list(d.shape)
        if isinstance(d, (list, tuple)):
            return [len(d)] + (shape(d[0]) if len(d) else [])
        return []

    dims = shape(data)
    if not any(t.device.type == "meta" for t in found):
        return None
    dtype = kwargs.get("dtype") or found[0].dtype
    return torch.empty(dims, dtype=dtype, device=kwargs.get("device") or "meta",
                       requires_grad=bool(kwargs.get("requires_grad")))


@contextlib.contextmanager
def checks_pass(active: bool):
    """On meta (when `active`): torch._is_all_true reads its result (the sync is recorded) and answers True."""
    if not active or not hasattr(torch, "_is_all_true"):
        yield
        return
    original = torch._is_all_true

    def passed(t, *a, **k):
        bool(original(t, *a, **k))  # the host read a GPU makes here
        return True

    torch._is_all_true = passed
    try:
        yield
    finally:
        torch._is_all_true = original


LIBRARIES = (("/torch/utils/data/", "data loading"), ("/torch/distributions/", "distributions"),
             ("/torch/optim/", "optimizer"))


def library() -> str:
    """The library whose own code runs now, between the reader's line and here: "data loading" (a DataLoader's
    sampler or collate, torch/utils/data), "distributions" (their argument checks), "optimizer" (an optimizer's
    own ops outside its step hooks: LBFGS between calls of its closure), or ""."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename.replace("\\", "/")
        for folder, what in LIBRARIES:
            if folder in name:
                return what
        if not _skipped(name):
            return ""
        f = f.f_back
    return ""


def what_was_read(made: dict, ops: list, event):
    """A .item() or .tolist() event, told what it read: "...; the value read: int64, made by multinomial" (the read
    tensor is the patched method's `self`, a few frames up), so a fix can tell an action from a logged loss."""
    if getattr(event, "what", "") not in ("Tensor.item()", "Tensor.tolist()"):
        return event
    from ..trace import _storage_key

    f, t = sys._getframe(2), None
    for _ in range(6):
        if f is None:
            break
        t = f.f_locals.get("self") if f.f_code.co_name == "call" else None
        if isinstance(t, torch.Tensor):
            break
        f, t = f.f_back, None
    j = made.get(_storage_key(t)) if t is not None else None
    if j is None:
        return event
    import dataclasses

    kind = str(t.dtype).replace("torch.", "")
    return dataclasses.replace(event, why=f"{event.why}; the value read: {kind}, made by {ops[j].name}")
