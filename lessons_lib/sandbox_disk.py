"""The sandbox's writes to disk: none happen while a reader's step runs under a course tool; each is listed.

`writes_blocked(box)` replaces, for the thread that runs the step only: open/io.open for writing (a Sink, an
in-memory file, is returned), os.open with a write flag (the null device), os.remove/unlink/rename/replace/
rmdir/mkdir (nothing done), torch.save and torch.jit.save to a path (nothing written; to a buffer: as asked), and
a logging.FileHandler's records (not written). `stand_in(obj)` gives the copier (reach.py) the same stand-ins for
a function the step's module imported by name (`from torch import save`). Writes by C code (a SummaryWriter's
thread, safetensors, numpy's tofile) are not seen: reach.py replaces a SummaryWriter by `Silent`.
"""
from __future__ import annotations

import builtins
import contextlib
import io
import logging
import os
import threading

import torch

_WRITE_MODE = set("wax+")
_OS_WRITES = ("remove", "unlink", "rename", "replace", "rmdir", "mkdir")
_ORIGINAL: dict[str, object] = {}  # name -> the function the stand-in replaces (kept for reads and other threads)


_ACTIVE: list = []  # the sandbox's boxes in force (sandbox.py), innermost last


def active():
    """The box in force in this thread, or None."""
    return _ACTIVE[-1] if _ACTIVE and _ACTIVE[-1].thread == threading.get_ident() else None


_box = active


class _SinkMixin:
    held = False  # a copy of a file the reader had open before the call: its writes are listed as they come

    def _named(self, name, mode):
        self.name, self.mode = name, mode
        return self

    def write(self, data):
        box = _box()
        if self.held and box is not None and box.depth > 0:
            box.record("a write to", str(self.name))
        return super().write(data)


class TextSink(_SinkMixin, io.StringIO):
    """A file opened for writing under the sandbox: the text stays in memory."""


class BytesSink(_SinkMixin, io.BytesIO):
    """The same, in binary mode."""


def Sink(name, mode: str = "w"):
    """An in-memory stand-in for a file opened for writing (what was in the file first, for "a" and "+")."""
    sink = (BytesSink() if "b" in mode else TextSink())._named(name, mode)
    if ("a" in mode or "+" in mode) and isinstance(name, (str, bytes, os.PathLike)) and os.path.isfile(name):
        with _ORIGINAL.get("open", builtins.open)(name, "rb" if "b" in mode else "r") as f:
            sink.write(f.read())
        if "a" not in mode:
            sink.seek(0)
    return sink


class Silent:
    """A stand-in for a logger that writes to disk from its own thread (a SummaryWriter): every method does
    nothing, and says so once."""

    def __init__(self, name: str, kind: str):
        self._name, self._kind = name, kind

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def nothing(*_a, **_k):
            box = _box()
            if box is not None:
                box.record(f"{self._kind}.{attr}", self._name)
        return nothing

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _mine() -> bool:
    box = _box()
    return box is not None and box.depth > 0


def _open(file, mode="r", *args, **kwargs):
    if _mine() and not isinstance(file, int) and _WRITE_MODE & set(mode):
        _box().record(f"open(..., {mode!r})", os.fspath(file) if isinstance(file, os.PathLike) else str(file))
        return Sink(file, mode)
    return _ORIGINAL["open"](file, mode, *args, **kwargs)


def _os_open(path, flags, *args, **kwargs):
    if _mine() and flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC):
        _box().record("os.open", str(path))
        return _ORIGINAL["os.open"](os.devnull, os.O_WRONLY)
    return _ORIGINAL["os.open"](path, flags, *args, **kwargs)


def _os(name):
    def nothing(*args, **kwargs):
        if _mine():
            _box().record(f"os.{name}", str(args[0]) if args else "")
            return None
        return _ORIGINAL[f"os.{name}"](*args, **kwargs)
    nothing.__name__ = name
    return nothing


def _saver(key: str):
    def save(obj, f, *args, **kwargs):
        if _mine() and isinstance(f, (str, bytes, os.PathLike)):
            _box().record(key.replace("torch.serialization.", "torch."), os.fspath(f) if not isinstance(f, str) else f)
            return None
        return _ORIGINAL[key](obj, f, *args, **kwargs)
    save.__name__ = "save"
    return save


def _handle(self, record):
    if _mine() and isinstance(self, logging.FileHandler):
        _box().record("a log record to", getattr(self, "baseFilename", "a file"))
        return True
    return _ORIGINAL["logging.Handler.handle"](self, record)


def _targets() -> list[tuple[object, str, str, object]]:
    """(owner, attribute, key, stand-in) for every writer the sandbox replaces."""
    out = [(builtins, "open", "open", _open), (io, "open", "open", _open), (os, "open", "os.open", _os_open),
           (logging.Handler, "handle", "logging.Handler.handle", _handle)]
    out += [(os, n, f"os.{n}", _os(n)) for n in _OS_WRITES]
    out += [(torch, "save", "torch.save", _saver("torch.save")),
            (torch.serialization, "save", "torch.serialization.save", _saver("torch.serialization.save"))]
    jit = getattr(torch, "jit", None)
    if jit is not None and hasattr(jit, "save"):
        out.append((jit, "save", "torch.jit.save", _saver("torch.jit.save")))
    return out


_STAND_INS: dict[int, object] = {}
_LOCK = threading.Lock()


def _ensure() -> None:
    """The stand-ins are made once; originals are remembered the first time (before any patch is in force)."""
    with _LOCK:
        if _ORIGINAL:
            return
        for owner, attr, key, stand in _targets():
            _ORIGINAL.setdefault(key, getattr(owner, attr))
            _STAND_INS[id(getattr(owner, attr))] = stand


def stand_in(obj):
    """The sandbox's stand-in for a writer the step reached by name (builtins.open, torch.save...), else None."""
    _ensure()
    return _STAND_INS.get(id(obj))


@contextlib.contextmanager
def writes_blocked(box):
    """For the duration, in the box's thread while its step runs, writes to disk are recorded, not done."""
    _ensure()
    targets = _targets()
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _key, _stand in targets]
    try:
        for owner, attr, _key, stand in targets:
            setattr(owner, attr, stand)
        yield
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)
