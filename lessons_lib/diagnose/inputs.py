"""What diagnose runs, and on what: the step's call, and copies of everything it reaches; the device.

A step is a callable and its arguments, or an nn.Module and an example batch (then the call is the forward and a
backward of the sum of its outputs). The step and everything it reaches are copied (lessons_lib.reach: its
arguments, closure cells, the globals its code names, a partial's arguments, a bound method's `self`, and the
modules, optimizers, schedulers, scalers, iterators and lists inside them): nothing of the caller's runs.

- device=None or "meta": the copies are shape-only tensors on meta, the GPU's stand-in; devices the step names
  become meta (sandbox.py). Nothing is allocated, so a model too big for this machine gets its report in seconds.
- device="cpu" or "cuda": the copies are real clones, where the originals live, and the step runs on them once,
  for real (the copies train; yours do not).

Data is read, not copied (a Dataset, the tensors of a loader object): its batches come from the host, as on a
GPU machine. Copies of optimizers keep their 0-dim CPU step counts on the CPU (as torch keeps them without
capturable=True); a fused optimizer is copied as foreach on meta (meta has no fused kernels).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from .. import sandbox
from ..reach import copy_step

DEVICES = ("meta", "cpu", "cuda")


@dataclass
class Step:
    """The call diagnose makes: fn(*args, **kwargs), or a module's forward and backward."""

    fn: object
    args: tuple
    kwargs: dict
    device: str  # where it runs: "meta", "cpu" or "cuda"
    module: bool = False
    notes: list[str] = field(default_factory=list)
    quiet: object = contextlib.nullcontext  # () -> a context in which diagnose's own ops go unwatched
    reached: list = field(default_factory=list)  # the copied tensors (the step's parameters among them)
    shared: list = field(default_factory=list)  # the reader's data tensors read without a copy (guarded)
    home: str = "cpu"  # where the originals lived: "cuda" if any tensor did, else "cpu"
    compiled: list = field(default_factory=list)  # names of what was under torch.compile

    def __call__(self):
        if not self.module:
            return sandbox.call(self.fn, *self.args, **self.kwargs)
        return sandbox.call(self._forward_backward)

    def _forward_backward(self):
        backward_of_sum(self.fn(*self.args, **self.kwargs), self.quiet)
        return None  # the graph was the forward's; nothing is handed back

    def tensors(self) -> list[torch.Tensor]:
        return list(self.reached)


def backward_of_sum(out, quiet=contextlib.nullcontext) -> None:
    """Backward of the sum of a forward's floating outputs that require grad: ones as their gradients (made
    unwatched, in `quiet()`), so that no op of diagnose's own (a sum, an add, the ones) joins the step's ops."""
    outs = [t for t in leaves(out) if t.requires_grad and t.is_floating_point()]
    if outs:
        with quiet():
            grads = [torch.ones_like(t) for t in outs]
        torch.autograd.backward(outs, grads)


def leaves(obj) -> list[torch.Tensor]:
    """Every tensor in obj: modules' parameters and buffers, optimizers' state, lists, tuples and dicts."""
    out: list[torch.Tensor] = []
    for o in _found(obj):
        if isinstance(o, torch.Tensor):
            out.append(o)
        elif isinstance(o, torch.nn.Module):
            out += list(o.parameters()) + list(o.buffers())
        elif isinstance(o, torch.optim.Optimizer):
            out += [t for s in o.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return out


def _found(obj, acc=None) -> list:
    """Tensors, modules and optimizers in obj, through lists, tuples and dicts (nothing else is opened)."""
    acc = [] if acc is None else acc
    if isinstance(obj, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)):
        acc.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _found(o, acc)
    elif isinstance(obj, dict):
        for o in obj.values():
            _found(o, acc)
    return acc


def _rebuild(obj):
    """Device arguments that name CUDA, as meta (the step's `if device.type == "cuda"` then takes the GPU's path)."""
    if isinstance(obj, (torch.device, str)) and _names_cuda(obj):
        return torch.device("meta")
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple
        return type(obj)(*(_rebuild(o) for o in obj))
    if type(obj) in (list, tuple):
        return type(obj)(_rebuild(o) for o in obj)
    if type(obj) is dict:
        return {k: _rebuild(v) for k, v in obj.items()}
    return obj


def _names_cuda(obj) -> bool:
    try:
        return torch.device(obj).type == "cuda"
    except (RuntimeError, TypeError):
        return False


def _optimizer_on_meta(orig, opt, notes: list[str]) -> None:
    """Step counts stay 0-dim tensors on the CPU where torch keeps them; fused becomes foreach on meta."""
    for p_orig, p in zip([p for g in orig.param_groups for p in g["params"]],
                         [p for g in opt.param_groups for p in g["params"]]):
        for key, value in orig.state.get(p_orig, {}).items():
            if isinstance(value, torch.Tensor) and value.dim() == 0 and value.device.type == "cpu":
                opt.state[p][key] = value.clone()
    for group, group_orig in zip([*opt.param_groups, opt.defaults], [*orig.param_groups, orig.defaults]):
        for key, value in group_orig.items():  # a 0-dim CPU lr (or beta) stays on the CPU, read there for free
            if isinstance(value, torch.Tensor) and value.dim() == 0 and value.device.type == "cpu":
                group[key] = value.clone()
        if group.get("fused"):
            group["fused"], group["foreach"] = False, True
            if "fused" not in " ".join(notes):
                notes.append(f"{type(opt).__name__}(fused=True) is traced as foreach on meta (no fused kernels "
                             "there): a few ops per update where CUDA's fused kernel is one")


def prepare(fn, inputs: tuple, kwargs: dict, device, names=()) -> Step:
    """The step to run: copies of `fn`, its inputs and everything they reach, on meta (device None or "meta") or
    where the originals live (device "cpu" or "cuda"). Raises reach.Uncopyable (a sentence) when something
    cannot be copied; nothing has run then."""
    module = isinstance(fn, torch.nn.Module)
    where = "meta" if device is None else _device_type(device)
    if where == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but this machine has no CUDA GPU: use device='meta' (shapes only: "
                         "the step is analysed as CUDA would run it) or 'cpu'.")
    new_fn, args, kw, copier = copy_step(fn, tuple(inputs), dict(kwargs), "meta" if where == "meta" else "same",
                                         names)
    notes = list(copier.notes)
    if where == "meta":
        args, kw = _rebuild(args), _rebuild(kw)
        for orig, opt in copier.pairs:
            if isinstance(orig, torch.optim.Optimizer):
                _optimizer_on_meta(orig, opt, notes)
    home = "cuda" if "cuda" in copier.devices else "cpu"
    return Step(new_fn, tuple(args), kw, where, module, notes, reached=copier.leaves, shared=copier.shared,
                home=home, compiled=copier.compiled)


def _device_type(device) -> str:
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        kind = None
    if kind not in DEVICES:
        raise ValueError(f"device={device!r}: choose 'meta' (shapes only, nothing allocated), 'cpu' or 'cuda'.")
    return kind
