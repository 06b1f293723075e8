"""The sandbox a reader's step runs in under the course's tools (diagnose, graph_check, find_syncs, cuda_syncs).

The step itself runs on copies (reach.py). Around it, `with sandbox(...) as box:` makes sure that what is not a
copy is left as it was, and that the run ends:
- writes to disk do not happen, and are listed (`box.writes`): files opened for writing, torch.save, os.remove,
  os.replace, os.mkdir, log records for a logging.FileHandler (sandbox_disk.py). Only the thread that runs the
  step is stopped from writing (a kernel's own threads go on);
- the global random state (torch's CPU and CUDA generators, Python's random, numpy's) and torch's global
  switches (grad mode, default dtype, float32 matmul precision, deterministic algorithms) come back as they were;
- a budget of ops and seconds (MAX_OPS, MAX_SECONDS; the environment's LESSONS_LIB_SANDBOX_OPS and
  LESSONS_LIB_SANDBOX_SECONDS change them) stops a step that does not end (on meta every value is a stand-in, so
  `while not finished.all():` never ends): Stopped, a BaseException that a step's `except Exception` does not
  swallow, with a sentence that names the loop's line (`box.stopped`). The seconds are also enforced by an
  alarm in the main thread (a loop with no torch op), where no other alarm is armed;
- a step that would write into a tensor the copy left shared (a batch of the reader's data) is stopped before
  the write;
- on meta (meta=True), devices the step names become meta: `x.cuda()`, `.to("cuda")`, `device="cuda"` (and
  "cpu" where the step's home is the CPU: its model lived there), so a step written for a GPU runs here.
Budget and guards act only inside `call(fn, ...)`, where the reader's code runs, not in the tool's own work.
"""
from __future__ import annotations

import ast
import contextlib
import linecache
import os
import random
import signal
import sys
import threading
import time

import torch

from .code_lines import NOWHERE, Where, library_file, user_frame
from .compiling import EagerWatch
from .display import count
from .sandbox_disk import _ACTIVE, Silent, Sink, active, stand_in, writes_blocked  # noqa: F401 (re-exported)

# The budget (a GPT-2-sized training step is a few thousand ops; an epoch on meta is stopped). A reader whose step
# needs more sets LESSONS_LIB_SANDBOX_OPS / LESSONS_LIB_SANDBOX_SECONDS.
MAX_OPS = int(os.environ.get("LESSONS_LIB_SANDBOX_OPS", 300_000))
MAX_SECONDS = float(os.environ.get("LESSONS_LIB_SANDBOX_SECONDS", 60.0))


class Stopped(BaseException):
    """The step ran past the budget, or was about to write into the reader's data. Not an Exception: a
    step's own `except Exception:` must not swallow it (a loop would go on)."""


class Box:
    """What the sandbox saw: writes it kept off the disk, why it stopped the step, ops and seconds used."""

    def __init__(self, meta: bool, home: str, shared, ops: int | None, seconds: float | None):
        self.meta, self.home = meta, home
        self.max_ops = MAX_OPS if ops is None else ops
        self.max_seconds = MAX_SECONDS if seconds is None else seconds
        self.thread = threading.get_ident()
        self.guard = {_storage(t) for t in shared}
        self.writes: list[tuple[str, str, Where]] = []
        self.stopped = ""
        self.ops = 0
        self.calls = 0
        self.start = None
        self.depth = 0  # inside call(): the reader's code is running

    def record(self, what: str, path: str) -> None:
        where = _readers_line()
        if not any(w[:2] == (what, path) for w in self.writes):
            self.writes.append((what, path, where))

    def notes(self) -> list[str]:
        if not self.writes:
            return []
        done = "; ".join(f"{what} {path!r} at {w.place}" if w is not NOWHERE else f"{what} {path!r}"
                         for what, path, w in self.writes[:6])
        more = f" and {count(len(self.writes) - 6, 'more write')}" if len(self.writes) > 6 else ""
        return [f"the step writes to disk; none of it happened (your files are as they were): {done}{more}"]

    def tick(self) -> None:
        if self.depth <= 0:
            return
        self.ops += 1
        if self.stopped:
            raise Stopped(self.stopped)
        if self.ops > self.max_ops:
            self.stop(f"stopped after {self.ops - 1:,} ops (the budget is {self.max_ops:,})")
        elif self.start is not None and time.perf_counter() - self.start > self.max_seconds:
            self.stop(f"stopped after {self.max_seconds:g} s (the budget)")

    def stop(self, why: str) -> None:
        where, loop = loop_line()
        place = f"the loop at {where.place} (`{where.text}`)" if loop else \
            f"{where.place} (`{where.text}`)" if where is not NOWHERE else "the step"
        sentence = f"{why}: {place} had not ended"
        if self.meta and loop:
            sentence += ("; on meta every value is a stand-in (.item() is 0, .all() is False), so a loop that waits "
                         "on a value never ends: bound it (for _ in range(n)), or pass device='cpu' to run it for "
                         "real on copies")
        self.stopped = sentence
        raise Stopped(sentence)


def _readers_line() -> Where:
    """The innermost line of the reader's own code on the stack (not numpy's np.save, not torch's)."""
    frame = sys._getframe(2)
    while frame is not None and library_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return NOWHERE
    file, line = frame.f_code.co_filename, frame.f_lineno
    return Where(file, line, linecache.getline(file, line).strip().split("  #")[0].strip(), frame.f_code.co_name)


def loop_line() -> tuple[Where, bool]:
    """The loop of the reader's code that had not ended: the innermost `while` on the stack (a loop that waits on
    a value), else the outermost `for` (an epoch, not a model's loop over its layers); else the reader's line."""
    frame, whiles, fors = sys._getframe(1), [], []
    while frame is not None:
        file, line = frame.f_code.co_filename, frame.f_lineno
        if not library_file(file):
            for node in _enclosing_loops(file, line):
                (whiles if isinstance(node, ast.While) else fors).append((file, node.lineno, frame.f_code.co_name))
        frame = frame.f_back
    found = whiles[0] if whiles else fors[-1] if fors else None
    if found is None:
        return _readers_line(), False
    file, line, function = found
    return Where(file, line, linecache.getline(file, line).strip(), function), True


def _enclosing_loops(file: str, line: int) -> list:
    """The loops that enclose `line` in `file`, innermost first."""
    try:
        tree = ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return []
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.While, ast.For, ast.AsyncFor))
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return sorted(loops, key=lambda n: -n.lineno)


def _storage(t: torch.Tensor):
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return id(t)


_WRITES: dict = {}  # op -> indices and names of the arguments it writes


def _written(func, args, kwargs) -> list:
    spec = _WRITES.get(func)
    if spec is None:
        schema = getattr(func, "_schema", None)
        spec = _WRITES[func] = [(i, a.name) for i, a in enumerate(schema.arguments if schema else [])
                                if a.alias_info is not None and a.alias_info.is_write]
    out = []
    for i, name in spec:
        t = args[i] if i < len(args) else kwargs.get(name)
        out += [x for x in (t if isinstance(t, (list, tuple)) else [t]) if isinstance(x, torch.Tensor)]
    return out


class _Watch(EagerWatch):
    """Every op the step dispatches: the budget, and no write into a tensor the copy left shared."""

    def __init__(self, box: Box):
        super().__init__()
        self.box = box

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        box = self.box
        if box.depth > 0:
            box.tick()
            if box.guard and any(_storage(t) in box.guard for t in _written(func, args, kwargs)):
                where = user_frame(2)
                box.stopped = (f"the step writes into your data at {where.place} (`{where.text}`: "
                               f"aten.{func.overloadpacket.__name__}), a tensor diagnose reads from your data without "
                               "copying it; stopped before the write (nothing changed): copy it first (x = x.clone())")
                raise Stopped(box.stopped)
            name = func.overloadpacket.__name__
            if box.meta and name in ("_to_copy", "copy_"):
                stand = _meta_to_host(name, args, kwargs)
                if stand is not None:
                    return stand
            if box.meta and box.home == "cpu" and name not in _MIXES:
                args, kwargs = _host_to_meta(args), {k: _host_to_meta(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _meta_to_host(name: str, args, kwargs):
    """A copy from meta to the host (loss.to("cpu")): zeros stand in for values meta does not hold (as .cpu()'s
    do under the sync detector); None for any other copy."""
    if name == "_to_copy":
        src, dst = args[0], kwargs.get("device")
        if src.device.type == "meta" and dst is not None and torch.device(dst).type == "cpu":
            return torch.zeros(src.shape, dtype=kwargs.get("dtype") or src.dtype, device="cpu")
    elif len(args) > 1 and isinstance(args[1], torch.Tensor) and args[1].device.type == "meta" and \
            args[0].device.type == "cpu":
        return args[0].zero_()
    return None


# Ops that take a host tensor beside device tensors on CUDA (an index, a copy between devices): left as they are.
_MIXES = {"index", "index_put", "index_put_", "_index_put_impl_", "copy_", "_to_copy", "_pin_memory", "lift_fresh",
          "lift_fresh_copy", "_local_scalar_dense", "is_nonzero", "set_", "detach", "alias"}


def _host_to_meta(args):
    """Where the step's home is the CPU (its model lived there), a host tensor that meets a meta tensor in an op
    is the step's own data on its device: it goes to meta too (a 0-dim one stays: CUDA takes those by value)."""
    if isinstance(args, torch.Tensor) or not isinstance(args, (tuple, list)):
        return args
    tensors = [a for a in args if isinstance(a, torch.Tensor)] + \
        [t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
    if not any(t.device.type == "meta" for t in tensors) or not any(t.device.type == "cpu" and t.dim() for t in tensors):
        return args
    move = lambda t: t.to("meta") if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() else t  # noqa: E731
    return type(args)(move(a) if not isinstance(a, (list, tuple)) else type(a)(move(t) for t in a) for a in args)


def _readers_call() -> bool:
    """The torch function being handled was called from the reader's code (torch's own "cpu" stays the host's:
    an optimizer's step count)."""
    frame = sys._getframe(3)  # _readers_call <- _device <- __torch_function__ <- the caller
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame is not None and not library_file(frame.f_code.co_filename)


class _OnMeta(torch.overrides.TorchFunctionMode):
    """Devices named by the step become meta, the GPU's stand-in: cuda always, cpu where the step's home is it."""

    def __init__(self, home: str):
        super().__init__()
        self.home = home

    def _device(self, d, src=None):
        if isinstance(d, bool) or not isinstance(d, (str, int, torch.device)):
            return d
        try:
            kind = torch.device(d).type if not isinstance(d, int) else "cuda"
        except (RuntimeError, TypeError):
            return d
        if kind == "cuda" or kind == "cpu" and self.home == "cpu" and (
                src is not None and src.device.type == "meta" or _readers_call()):
            return torch.device("meta")  # where the step's home is the CPU, its "cpu" is the device: meta stays
        return d

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0].to("meta", non_blocking=bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False)))
        if func is torch.Tensor.to and args:
            args = (args[0], *(self._device(a, args[0]) for a in args[1:]))
            if "device" in kwargs:
                kwargs["device"] = self._device(kwargs["device"], args[0])
        elif "device" in kwargs:
            kwargs["device"] = self._device(kwargs["device"])
        return func(*args, **kwargs)


@contextlib.contextmanager
def _global_state():
    """Random generators and torch's global switches: as they were, whatever the step does to them."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    py = random.getstate()
    np = sys.modules.get("numpy")
    np_state = np.random.get_state() if np is not None else None
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    precision = torch.get_float32_matmul_precision()
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        random.setstate(py)
        if np_state is not None:
            np.random.set_state(np_state)
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
        torch.set_float32_matmul_precision(precision)
        if torch.are_deterministic_algorithms_enabled() != deterministic:
            torch.use_deterministic_algorithms(deterministic)


@contextlib.contextmanager
def _alarm(box: Box):
    """The seconds, for a loop without torch ops: SIGALRM in the main thread, when no other alarm is armed."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread() and \
        signal.getitimer(signal.ITIMER_REAL)[0] == 0
    if not usable:
        yield
        return

    def fire(_sig, _frame):
        if box.depth > 0 and box.start is not None and time.perf_counter() - box.start > box.max_seconds:
            if not box.stopped:
                box.stop(f"stopped after {box.max_seconds:g} s (the budget)")
            raise Stopped(box.stopped)

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, box.max_seconds + 0.5, 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def _cuda_stand_ins(box: Box):
    """On meta without a GPU: torch.cuda.synchronize() and empty_cache() do nothing (the ops are meta)."""
    if not box.meta or torch.cuda.is_available():
        yield
        return
    saved = {n: getattr(torch.cuda, n) for n in ("synchronize", "empty_cache")}
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.empty_cache = lambda *a, **k: None
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.cuda, n, f)


@contextlib.contextmanager
def sandbox(meta: bool = False, home: str = "cpu", shared=(), ops: int | None = None, seconds: float | None = None):
    """The sandbox (see the module's docstring); yields its Box. Nested, it is the box already in force."""
    if _ACTIVE and _ACTIVE[-1].thread == threading.get_ident():
        yield _ACTIVE[-1]
        return
    box = Box(meta, home, shared, ops, seconds)
    _ACTIVE.append(box)
    try:
        with _global_state(), writes_blocked(box), _cuda_stand_ins(box), _Watch(box), \
                (_OnMeta(home) if meta else contextlib.nullcontext()), _alarm(box):
            yield box
    finally:
        _ACTIVE.remove(box)


def call(fn, *args, **kwargs):
    """fn(*args, **kwargs) as the reader's code, inside the box in force: the budget counts, writes are guarded.
    Outside a sandbox it is a plain call."""
    box = _ACTIVE[-1] if _ACTIVE else None
    if box is None or box.thread != threading.get_ident():
        return fn(*args, **kwargs)
    if box.start is None:
        box.start = time.perf_counter()
    box.depth += 1
    box.calls += 1
    try:
        return fn(*args, **kwargs)
    finally:
        box.depth -= 1
