"""What a reader's step reaches, copied, so that a tool can run the step and nothing of the reader's changes.

`Copier(to).copy(obj, where)` copies the step and everything it reaches, with one memo (what was shared stays
shared: the optimizer's parameters are the model's): its arguments; a function's closure cells, defaults and the
globals its code names (copied into an overlay of its module's globals, which every copied function of that
module shares: `global best; best = ...` writes the overlay, not yours); a functools.partial's arguments; a bound
method's `self`; and, inside them, modules, optimizers, LR schedulers, GradScalers, hooks, lists, dicts,
generators of random numbers and any object Python can reduce. `to` is "meta" (tensors become shape-only copies:
nothing allocated) or "same" (real clones where they live, pinned memory kept pinned).

Data is read, not copied: a Dataset is shared, a DataLoader (or an iterator over one) is replaced by a
single-process loader over the same Dataset with copies of its sampler and generator, and tensors inside an
iterable object of the reader's (a loader, an iterator of batches) stay on the host, shared. `shared` lists
them: the sandbox stops a step that writes into one (sandbox.py). Files open for writing become sinks (nothing
reaches the disk), a SummaryWriter a silent stand-in. Libraries' own objects that cannot be copied (a thread
pool, a CUDA stream, a progress bar) are shared; anything else that cannot be copied (a generator, a file
open for reading that cannot be reopened) raises Uncopyable with one sentence that names it and what to pass.

A functools.lru_cache'd function gets a fresh cache (what the step computes on meta never lands in yours).
Not reached: a module's attributes (`utils.history.append(x)` through `import utils` writes yours), and your
classes' own attributes and the globals their methods read and write (the instances are copies, the classes
are yours).
"""
from __future__ import annotations

import copy
import enum
import functools
import os
import sys
import types
import weakref

import torch

from .code_lines import library_file, library_type as _library_type
from .reach_data import NOT_SPECIAL, Uncopyable, is_data, scheduler_or_scaler, special
from .sandbox_disk import stand_in

_ATOMIC = (type(None), bool, int, float, complex, str, bytes, range, type, types.ModuleType, types.CodeType,
           property, torch.device, torch.dtype, torch.layout, torch.memory_format, torch.finfo, torch.iinfo,
           type(Ellipsis), type(NotImplemented), staticmethod, classmethod)
_NO_COPY = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)


def _names(code) -> set[str]:
    """The global names a code object and the functions defined inside it can read or write."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def _kind(obj) -> str:
    return f"a {type(obj).__module__.split('.')[0]}.{type(obj).__qualname__}" if type(obj).__module__ not in (
        "builtins", "__main__") else f"a {type(obj).__qualname__}"


class Copier:
    """One copy of a step's world (see the module's docstring). After copying: `shared` (the host tensors left
    shared: a step must not write into them), `pairs` ((original, copy) of every optimizer and module), `leaves`
    (the copied tensors) and `notes` (what was replaced, in words)."""

    def __init__(self, to: str = "meta", free_to_meta: bool = True):
        if to not in ("meta", "same"):
            raise ValueError(f"to={to!r}: 'meta' or 'same'")
        self.to, self.free_to_meta = to, free_to_meta
        self.memo: dict[int, object] = {}
        self.keep: list = []  # the originals, alive while the memo holds their ids
        self.overlays: dict[int, dict] = {}  # id(a module's globals) -> the copies' globals
        self.shared: list[torch.Tensor] = []
        self.pairs: list[tuple] = []
        self.leaves: list[torch.Tensor] = []
        self.notes: list[str] = []
        self.compiled: list[str] = []  # what was under torch.compile (copied as the module or function it compiles)
        self.devices: set[str] = set()  # where the originals lived
        self.stdio = _STDIO()  # the process's streams, shared

    # --- the walk -----------------------------------------------------------------------------------------
    def copy(self, obj, where: str = "the step", ctx: str = "free"):
        hit = self.memo.get(id(obj), self)
        if hit is not self:
            return hit
        if isinstance(obj, _ATOMIC) or isinstance(obj, enum.Enum) or any(obj is s for s in self.stdio):
            return obj
        stand = stand_in(obj)  # the sandbox's stand-ins for torch.save, open, os.remove, ...
        if stand is not None:
            return stand
        self.keep.append(obj)
        try:
            return self._copy(obj, where, ctx)
        except (Uncopyable, RecursionError):
            raise
        except Exception as err:
            if isinstance(err, (TypeError, copy.Error)) and _library_type(type(obj)) and \
                    not isinstance(obj, (torch.nn.Module, torch.optim.Optimizer)):
                self.memo[id(obj)] = obj  # a library's own object that cannot be pickled (a stream, a pool): shared
                return obj
            why = (str(err).splitlines() or [type(err).__name__])[0][:120]
            raise Uncopyable(f"`{where}` ({_kind(obj)}) cannot be copied ({why}), so nothing ran: pass what the step "
                             "needs as arguments that can be copied (tensors, modules, optimizers, lists).") from None

    def _set(self, obj, new):
        self.memo[id(obj)] = new
        return new

    def _copy(self, obj, where, ctx):
        if isinstance(obj, torch.Tensor):
            return self._set(obj, self.tensor(obj, ctx))
        if isinstance(obj, (list, set, frozenset)) and type(obj) in (list, set, frozenset):
            if type(obj) is list:
                new = self._set(obj, [])
                new.extend(self.copy(o, f"{where}[{i}]", ctx) for i, o in enumerate(obj))
                return new
            return self._set(obj, type(obj)(self.copy(o, where, ctx) for o in obj))
        if type(obj) is tuple:
            items = tuple(self.copy(o, f"{where}[{i}]", ctx) for i, o in enumerate(obj))
            return self.memo.get(id(obj), items)
        if type(obj) is dict:
            new = self._set(obj, {})
            for k, v in obj.items():
                new[self.copy(k, where, ctx)] = self.copy(v, f"{where}[{k!r}]", ctx)
            return new
        if isinstance(obj, types.FunctionType):
            return self.function(obj, where)
        if isinstance(obj, types.MethodType):
            return self._set(obj, types.MethodType(self.copy(obj.__func__, where), self.copy(obj.__self__, "self")))
        if isinstance(obj, types.BuiltinFunctionType) or type(obj).__name__ in ("method-wrapper", "method_descriptor"):
            owner = getattr(obj, "__self__", None)
            if owner is None or isinstance(owner, (types.ModuleType, type)):
                return obj  # print, torch.relu, a class's method: nothing of the reader's in it
            return self._set(obj, getattr(self.copy(owner, where, ctx), obj.__name__))
        if type(obj) is functools.partial:
            new = functools.partial(self.copy(obj.func, where), *self.copy(obj.args, where, "arg"),
                                    **self.copy(obj.keywords, where, "arg"))
            return self._set(obj, new)
        if type(obj).__name__ == "_lru_cache_wrapper" and hasattr(obj, "__wrapped__"):  # a fresh cache, not yours
            params = obj.cache_parameters() if hasattr(obj, "cache_parameters") else {"maxsize": 128, "typed": False}
            return self._set(obj, functools.lru_cache(maxsize=params["maxsize"], typed=params["typed"])(
                self.copy(obj.__wrapped__, where)))
        if isinstance(obj, types.CellType):
            new = self._set(obj, types.CellType())
            try:
                new.cell_contents = self.copy(obj.cell_contents, where)
            except ValueError:  # an empty cell
                pass
            return new
        if isinstance(obj, weakref.ref):
            target = obj()
            if target is None:
                return obj
            copied = self.copy(target, where, ctx)
            self.keep.append(copied)
            return self._set(obj, (weakref.WeakMethod if isinstance(obj, weakref.WeakMethod) else weakref.ref)(copied))
        if isinstance(obj, _NO_COPY):
            raise Uncopyable(f"`{where}` is a generator: it cannot be copied without running yours a step further, "
                             "so nothing ran; pass a list of batches (or a DataLoader) instead.")
        found = special(self, obj, where, ctx)
        if found is not NOT_SPECIAL:
            return self._set(obj, found)
        if type(obj).__module__ == "numpy" and type(obj).__name__ in ("ndarray", "memmap"):
            return self._set(obj, obj if not obj.flags.writeable else obj.copy())  # read-only (a memmap "r"): shared
        if isinstance(obj, torch.nn.Module) and hasattr(obj, "_orig_mod"):  # a torch.compile'd module
            self.compiled.append(where)
            return self._set(obj, self.copy(obj._orig_mod, where, ctx))
        inside = "host" if is_data(obj) else "state" if isinstance(
            obj, (torch.nn.Module, torch.optim.Optimizer)) or scheduler_or_scaler(obj) else ctx
        return self.reduced(obj, where, inside)

    # --- tensors, functions, objects ---------------------------------------------------------------------
    def tensor(self, t: torch.Tensor, ctx: str = "arg") -> torch.Tensor:
        self.devices.add(t.device.type)
        if t.device.type != "meta" and (ctx == "host" or ctx == "free" and self.to == "meta" and
                                         t.device.type == "cpu" and not self.free_to_meta):
            self.shared.append(t)
            return t
        if self.to == "meta" and not (ctx == "batch" and t.device.type == "cpu" and not t.requires_grad):
            new = torch.empty_like(t, device="meta")
        else:  # a batch on the host, of a step that names the GPU itself: it stays there (a copy), moved by the step
            new = t.detach().clone()
            if t.device.type == "cpu" and _pinned(t):
                new = new.pin_memory()
        if isinstance(t, torch.nn.Parameter):
            new = torch.nn.Parameter(new, requires_grad=t.requires_grad)
        elif t.requires_grad and (new.is_floating_point() or new.is_complex()):
            new.requires_grad_(True)
        self.memo[id(t)] = new
        if t.grad is not None and new.is_leaf:
            new.grad = self.tensor(t.grad)
        self.leaves.append(new)
        return new

    def function(self, fn: types.FunctionType, where: str):
        compiled = getattr(fn, "_torchdynamo_orig_callable", None)
        if compiled is not None:  # torch.compile(fn): the watchers run it eagerly anyway
            self.compiled.append(where)
            return self._set(fn, self.copy(compiled, where))
        library = library_file(fn.__code__.co_filename)
        if library and not fn.__closure__ and not fn.__defaults__ and not fn.__kwdefaults__:
            return fn  # torch's, Python's: nothing of the reader's inside
        cells = tuple(types.CellType() for _ in fn.__closure__ or ())
        overlay = fn.__globals__ if library else self.overlays.setdefault(id(fn.__globals__), dict(fn.__globals__))
        new = types.FunctionType(fn.__code__, overlay, fn.__name__, None, cells or None)
        self._set(fn, new)
        for attr in ("__qualname__", "__module__", "__doc__"):
            setattr(new, attr, getattr(fn, attr))
        new.__annotations__ = fn.__annotations__
        for name, cell, mine in zip(fn.__code__.co_freevars, fn.__closure__ or (), cells):
            try:
                mine.cell_contents = self.copy(cell.cell_contents, name)
            except ValueError:  # an empty cell (a name assigned later)
                pass
        new.__defaults__ = self.copy(fn.__defaults__, f"{fn.__name__}.__defaults__")
        new.__kwdefaults__ = self.copy(fn.__kwdefaults__, f"{fn.__name__}.__kwdefaults__")
        new.__dict__.update(self.copy(fn.__dict__, fn.__name__))
        if not library:
            for name in sorted(_names(fn.__code__)):
                if name in fn.__globals__ and not name.startswith("__"):
                    overlay[name] = self.copy(fn.__globals__[name], name)
        return new

    def reduced(self, obj, where: str, ctx: str):
        """Any other object, as copy.deepcopy would copy it, with this walk's rules inside."""
        custom = getattr(type(obj), "__deepcopy__", None)
        if custom is not None:
            with _tensors_copied_by(self):
                return self._set(obj, obj.__deepcopy__(self.memo))
        rv = obj.__reduce_ex__(4)
        if isinstance(rv, str):
            return obj
        func, args, state, listiter, dictiter = (tuple(rv) + (None,) * 5)[:5]
        new = self._set(obj, func(*self.copy(args, where, ctx)))
        if isinstance(obj, (torch.nn.Module, torch.optim.Optimizer)):
            self.pairs.append((obj, new))
        if state is not None:
            if hasattr(new, "__setstate__"):
                new.__setstate__(self._attributes(state, where, ctx))
            else:
                slots = None
                if isinstance(state, tuple) and len(state) == 2:
                    state, slots = state
                if state:
                    new.__dict__.update(self._attributes(state, where, ctx))
                for k, v in self._attributes(slots or {}, where, ctx).items():
                    setattr(new, k, v)
        if isinstance(obj, torch.optim.Optimizer):  # what __getstate__ leaves out: LBFGS's _params (the copy's
            for k, v in obj.__dict__.items():  # param list, by the memo), a subclass's caches; a scheduler's
                if k not in new.__dict__ and k != "step":  # step wrapper is copy_step's
                    new.__dict__[k] = self.copy(v, f"{where}.{k}", ctx)
        if listiter is not None:
            for item in listiter:
                new.append(self.copy(item, where, ctx))
        if dictiter is not None:
            for k, v in dictiter:
                new[self.copy(k, where, ctx)] = self.copy(v, f"{where}[{k!r}]", ctx)
        return new

    def _attributes(self, state, where: str, ctx: str):
        """An object's state: a dict of attributes (named where.attr in a sentence), or whatever it reduces to."""
        if type(state) is not dict:
            return self.copy(state, where, ctx)
        return {k: self.copy(v, f"{where}.{k}", ctx) for k, v in state.items()}


def copy_step(fn, args: tuple, kwargs: dict, to: str = "meta", names=(), free_to_meta: bool | None = None) -> tuple:
    """(fn, args, kwargs, copier): the step and everything it reaches, copied with one memo. `names` are the
    parameters' names, for sentences (argument i otherwise). Raises Uncopyable.

    Where each tensor goes (to="meta"): the arguments' tensors and those of modules, optimizers, schedulers and
    scalers are on the device (meta), but for a step that holds torch.device("cuda") with nothing on CUDA, the
    arguments' host tensors that need no grad are its batches: copies on the host; tensors of data objects stay
    on the host, shared; "free" tensors (in a closure, a global, an attribute) go where their kind lives: meta if
    on CUDA, and if on the CPU, meta when `free_to_meta` (default: when nothing the step reaches is on CUDA, the
    CPU is where it computes), else the host."""
    if free_to_meta is None:
        free_to_meta = home(fn, args, kwargs) == "cpu"
    # Nothing on CUDA, yet the step holds torch.device("cuda") (trainer.device, a `device` argument): it moves its
    # batches there itself, so the host tensors it is given are batches on the host, where the reader's run has them.
    ctx = "batch" if to == "meta" and _reaches_cuda(fn, args, kwargs, tensors_only=False) and \
        not _reaches_cuda(fn, args, kwargs, tensors_only=True) else "arg"
    copier = Copier(to, free_to_meta)
    new_fn = copier.copy(fn, getattr(fn, "__name__", None) or "the step")
    new_args = tuple(copier.copy(a, names[i] if i < len(names) else f"argument {i + 1}", ctx)
                     for i, a in enumerate(args))
    new_kwargs = {k: copier.copy(v, k, ctx) for k, v in kwargs.items()}
    for orig, new in copier.pairs:  # an LR scheduler wrapped the optimizer's step: the copy's scheduler expects it
        if isinstance(orig, torch.optim.Optimizer) and hasattr(orig.__dict__.get("step"), "_wrapped_by_lr_sched"):
            _mark_stepped(new)
    return new_fn, new_args, new_kwargs, copier


def home(fn, args: tuple, kwargs: dict) -> str:
    """"cuda" if a tensor or a module the step reaches directly (its arguments, closure, globals, `self`, a
    partial's arguments, one level into objects) lives on CUDA, else "cpu". A look, not a copy."""
    return "cuda" if _reaches_cuda(fn, args, kwargs, tensors_only=True) else "cpu"


def _reaches_cuda(fn, args: tuple, kwargs: dict, tensors_only: bool) -> bool:
    """A tensor the step reaches lives on CUDA, or (tensors_only=False) it holds a torch.device("cuda")."""
    seen: set[int] = set()
    todo = [fn, args, kwargs]
    while todo:
        o = todo.pop()
        if isinstance(o, torch.device) and o.type == "cuda" and not tensors_only:
            return True
        if id(o) in seen or isinstance(o, _ATOMIC):
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            if o.device.type == "cuda":
                return True
        elif isinstance(o, torch.nn.Module):
            todo += list(o.parameters())[:1] + list(o.buffers())[:1]
        elif isinstance(o, (list, tuple, set, frozenset)):
            todo += list(o)
        elif isinstance(o, dict):
            todo += list(o.values())
        elif isinstance(o, types.FunctionType) and not library_file(o.__code__.co_filename):
            todo += [c.cell_contents for c in o.__closure__ or () if _filled(c)]
            todo += [o.__globals__[n] for n in _names(o.__code__) if n in o.__globals__ and not n.startswith("__")]
        elif isinstance(o, types.MethodType):
            todo += [o.__func__, o.__self__]
        elif isinstance(o, functools.partial):
            todo += [o.func, o.args, o.keywords]
        elif len(seen) < 10_000 and not isinstance(o, (types.FunctionType, types.BuiltinFunctionType)):
            todo += list(getattr(o, "__dict__", {}).values())
    return False


def _filled(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def _mark_stepped(opt) -> None:
    step = opt.step

    @functools.wraps(step)
    def wrapper(*args, **kwargs):
        opt._opt_called = True
        return step(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True
    opt.step = wrapper


def _pinned(t: torch.Tensor) -> bool:
    try:
        return bool(t.is_pinned())
    except Exception:  # no accelerator: nothing is pinned
        return False


def _STDIO() -> tuple:
    """The streams of this process: shared (printing is not a write to disk; diagnose captures stdout)."""
    return tuple(s for s in (sys.stdout, sys.stderr, sys.stdin, sys.__stdout__, sys.__stderr__, sys.__stdin__)
                 if s is not None)


class _tensors_copied_by:
    """For an object with its own __deepcopy__ (an fx.GraphModule), copy.deepcopy's tensors follow the walk's rule."""

    def __init__(self, copier: Copier):
        self.copier = copier

    def __enter__(self):
        self.saved = torch.Tensor.__deepcopy__, torch.nn.Parameter.__deepcopy__
        copier = self.copier

        def copy(t, memo):
            return memo[id(t)] if id(t) in memo else copier.tensor(t)

        torch.Tensor.__deepcopy__ = torch.nn.Parameter.__deepcopy__ = copy

    def __exit__(self, *exc):
        torch.Tensor.__deepcopy__, torch.nn.Parameter.__deepcopy__ = self.saved


__all__ = ["Copier", "Uncopyable", "copy_step", "library_file", "home"]
