"""reach.py's copies of what a step reads its data and writes its logs with: data loaders and their iterators,
datasets, files, loggers that write from a thread, random generators and locks.

- A Dataset is shared (read, not copied: a dataset can be large); its tensors are listed as shared, so the
  sandbox stops a step that writes into them. Tensors inside any other iterable object of the reader's (a loader
  class, an iterator of batches) stay on the host too, shared: on a GPU machine that is where batches come from.
- A DataLoader becomes a loader over the same dataset with num_workers=0 and copies of its sampler and
  generator; an iterator over one becomes a fresh iterator of that kind (from the first batch: yours does not
  move).
- A file open for writing becomes a Sink (sandbox_disk.py), one open for reading is opened again at the same
  position; a SummaryWriter becomes a Silent stand-in; a torch.Generator a new one in the same state; a lock a
  new lock.
"""
from __future__ import annotations

import io
import sys
import threading

import torch

NOT_SPECIAL = object()


class Uncopyable(ValueError):
    """The step reaches something that cannot be copied: the sentence names it and what to pass instead."""


def fresh_lock(obj):
    """A new lock of the same kind (a lock is state of this process, not of the step)."""
    return threading.RLock() if "RLock" in type(obj).__name__ else threading.Lock()


def is_data(obj) -> bool:
    """An iterator, or an iterable object of the reader's (a loader class) that is not a container, a model, an
    optimizer, a scheduler or a scaler: its tensors are data."""
    if isinstance(obj, (list, tuple, dict, set, frozenset, str, bytes, torch.nn.Module, torch.optim.Optimizer)) or \
            scheduler_or_scaler(obj):
        return False
    from .code_lines import library_type

    cls = type(obj)
    return hasattr(cls, "__next__") or (not library_type(cls) and any(hasattr(cls, m) for m in
                                                                       ("__iter__", "__getitem__")))


def scheduler_or_scaler(obj) -> bool:
    name = type(obj).__module__
    return name.startswith(("torch.optim.lr_scheduler", "torch.amp", "torch.cuda.amp")) or \
        any(c.__name__ in ("LRScheduler", "_LRScheduler", "GradScaler", "ReduceLROnPlateau") for c in type(obj).__mro__)


def _tensors_of(obj, depth: int = 2) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if depth == 0:
        return []
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors_of(o, depth - 1)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors_of(o, depth - 1)]
    return [t for o in getattr(obj, "__dict__", {}).values() for t in _tensors_of(o, depth - 1)]


def special(copier, obj, where: str, ctx: str):
    """The copy of `obj` if it is one of the kinds above, else NOT_SPECIAL."""
    from torch.utils.data import DataLoader, Dataset

    if isinstance(obj, Dataset):
        copier.shared += [t for t in _tensors_of(obj) if t.device.type != "meta"]
        return obj
    if isinstance(obj, DataLoader):
        return _loader(copier, obj, where)
    iterator = sys.modules.get("torch.utils.data.dataloader")
    if iterator is not None and isinstance(obj, iterator._BaseDataLoaderIter):
        return _fresh_iterator(copier, obj, where)
    if isinstance(obj, torch.Generator):
        new = torch.Generator(device=obj.device)
        new.set_state(obj.get_state())
        return new
    if type(obj).__name__ in ("lock", "RLock") and type(obj).__module__ == "_thread":
        return fresh_lock(obj)
    if type(obj).__name__ == "SummaryWriter":
        from .sandbox_disk import Silent

        return Silent(str(getattr(obj, "log_dir", None) or getattr(obj, "logdir", "") or where), where)
    if isinstance(obj, io.IOBase) and not isinstance(obj, (io.StringIO, io.BytesIO)):
        return _file(obj, where)
    return NOT_SPECIAL


def _loader(copier, loader, where: str):
    import copy

    new = copy.copy(loader)  # attributes shared (the dataset); then the parts that move when it is read
    copier.memo[id(loader)] = new
    d = new.__dict__
    d.update(num_workers=0, persistent_workers=False, prefetch_factor=None, timeout=0, _iterator=None)
    for key in ("sampler", "batch_sampler", "generator"):
        if d.get(key) is not None:
            d[key] = copier.copy(loader.__dict__[key], f"{where}.{key}", "host")
    if isinstance(loader.dataset, torch.utils.data.Dataset):
        copier.copy(loader.dataset, f"{where}.dataset", "host")  # lists its tensors as shared
    return new


def _fresh_iterator(copier, it, where: str):
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _DatasetKind

    try:
        dataset, sampler, collate = it._dataset, it._index_sampler, it._collate_fn
        if isinstance(dataset, torch.utils.data.Dataset):
            copier.copy(dataset, f"{where}'s dataset", "host")
        if it._dataset_kind == _DatasetKind.Iterable:
            loader = DataLoader(dataset, batch_size=getattr(sampler, "batch_size", None), drop_last=it._drop_last,
                                collate_fn=collate)
        elif it._auto_collation:
            loader = DataLoader(dataset, batch_sampler=copier.copy(sampler, f"{where}'s sampler", "host"),
                                collate_fn=collate)
        else:
            loader = DataLoader(dataset, sampler=copier.copy(sampler, f"{where}'s sampler", "host"), batch_size=None,
                                collate_fn=collate)
    except (AttributeError, TypeError, ValueError) as err:
        raise Uncopyable(f"`{where}` (an iterator over a DataLoader) cannot be copied ({err}), so diagnose ran "
                         "nothing: pass the DataLoader itself, or a list of batches.") from None
    copier.notes.append(f"`{where}`, an iterator over a DataLoader, did not move: the step read a fresh iterator "
                        "over the same data, from its first batch, in this process")
    return iter(loader)


def _file(f, where: str):
    from .sandbox_disk import Sink

    name = getattr(f, "name", None)
    if f.closed:
        return f
    if f.writable():
        sink = Sink(name if name is not None else where, getattr(f, "mode", "w"))
        sink.held = True
        return sink
    if isinstance(name, str) and f.seekable():
        again = open(name, getattr(f, "mode", "r"))
        again.seek(f.tell())
        return again
    raise Uncopyable(f"`{where}` is a file open for reading that cannot be opened again at its position, so "
                     "diagnose ran nothing: pass what the step reads from it (a tensor, a list) instead.")
