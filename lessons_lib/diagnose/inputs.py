"""What diagnose runs, and on what: the step's call, its arguments moved to `meta` where it allows, the device.

A step is a callable and its arguments, or an nn.Module and an example batch (then the call is the forward and a
backward of the sum of its outputs). The device is passed, never guessed from a closure:

- device="meta": the arguments become shape-only copies on meta, the GPU's stand-in (modules, optimizers and
  the tensors in lists, tuples and dicts; a device argument "cuda" becomes meta). Nothing of the caller's is
  touched, and nothing is allocated, so a model too big for this machine gets its report in seconds.
- device=None: meta when the arguments hold tensors that can move there; if the step cannot run on meta (a
  closure holding a CPU model, an op without a meta kernel), it runs once more on the arguments as given.
- device="cpu" or "cuda": the step runs once on the arguments as given, for real (a training step trains).

Anything else among the arguments (a DataLoader, a Dataset) passes as it is, so its batches come from the host,
as on a GPU machine. Copies of optimizers keep their 0-dim CPU step counts on the CPU (as torch keeps them
without capturable=True); a fused optimizer is copied as foreach (meta has no fused kernels).
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import types
from dataclasses import dataclass, field

import torch

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

    def __call__(self):
        if not self.module:
            return self.fn(*self.args, **self.kwargs)
        backward_of_sum(self.fn(*self.args, **self.kwargs), self.quiet)
        return None  # the graph was the forward's; nothing is handed back

    def tensors(self) -> list[torch.Tensor]:
        return leaves((self.fn if self.module else None, self.args, self.kwargs))


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


@contextlib.contextmanager
def _tensors_copy_to_meta():
    """For the duration, deepcopy makes a tensor's copy a shape-only tensor on meta (no data is copied)."""
    def tensor_copy(self, memo):
        if id(self) not in memo:
            memo[id(self)] = torch.empty_like(self, device="meta").requires_grad_(self.requires_grad)
        return memo[id(self)]

    def parameter_copy(self, memo):
        if id(self) not in memo:
            memo[id(self)] = torch.nn.Parameter(torch.empty_like(self, device="meta"), self.requires_grad)
        return memo[id(self)]

    saved = torch.Tensor.__deepcopy__, torch.nn.Parameter.__deepcopy__
    torch.Tensor.__deepcopy__, torch.nn.Parameter.__deepcopy__ = tensor_copy, parameter_copy
    try:
        yield
    finally:
        torch.Tensor.__deepcopy__, torch.nn.Parameter.__deepcopy__ = saved


def to_meta(tree, notes: list[str]):
    """`tree` with its tensors, modules and optimizers as shape-only copies on meta, sharing what they shared
    (an optimizer's parameters are its module's), and "cuda" device arguments as meta."""
    found = _found(tree)
    with _tensors_copy_to_meta():
        copies = copy.deepcopy(found)
    mapping = {id(o): c for o, c in zip(found, copies)}
    for o, c in zip(found, copies):
        if isinstance(o, torch.optim.Optimizer):
            _optimizer_on_meta(o, c, notes)
    return _rebuild(tree, mapping)


def _rebuild(obj, mapping):
    if id(obj) in mapping:
        return mapping[id(obj)]
    if isinstance(obj, (torch.device, str)) and _names_cuda(obj):
        return torch.device("meta")
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple
        return type(obj)(*(_rebuild(o, mapping) for o in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_rebuild(o, mapping) for o in obj)
    if isinstance(obj, dict):
        return type(obj)({k: _rebuild(v, mapping) for k, v in obj.items()}) if type(obj) is dict else \
            {k: _rebuild(v, mapping) for k, v in obj.items()}
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


def prepare(fn, inputs: tuple, kwargs: dict, device) -> tuple[Step, Step | None]:
    """(the step to run first, the one to run if the first cannot run on meta, or None)."""
    module = isinstance(fn, torch.nn.Module)
    if not module and not callable(fn):
        raise ValueError(f"diagnose needs a callable (a training or inference step) or an nn.Module, got "
                         f"{type(fn).__name__}: pass the step itself, then its inputs.")
    given = Step(fn, tuple(inputs), dict(kwargs), "", module)
    tensors = given.tensors() + (leaves(fn.__self__) if _module_method(fn) else [])
    if device is None:
        if not tensors:
            raise ValueError("diagnose found no tensor, module or optimizer among the step's arguments, so it cannot "
                             "tell where the step runs (it never guesses from a closure): pass device='meta' (shapes "
                             "only), 'cpu' or 'cuda'.")
        kinds = {t.device.type for t in tensors}
        here = "cuda" if "cuda" in kinds else "cpu" if "cpu" in kinds else "meta"
        want = "meta"
    else:
        want = here = _device_type(device)
    given.device = here
    if want != "meta":
        if want == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but this machine has no CUDA GPU: use device='meta' (shapes only: "
                             "the step is analysed as CUDA would run it) or 'cpu'.")
        return given, None
    notes: list[str] = []
    owner = fn.__self__ if _module_method(fn) else fn if module else None  # model.training_step: its module too
    meta_owner, meta_args, meta_kwargs = to_meta((owner, given.args, given.kwargs), notes)
    meta_fn = meta_owner if module else types.MethodType(fn.__func__, meta_owner) if owner is not None else fn
    first = Step(meta_fn, tuple(meta_args), meta_kwargs, "meta", module, notes)
    return first, (given if device is None and here != "meta" else None)


def _module_method(fn) -> bool:
    return inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module)


def _device_type(device) -> str:
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        kind = None
    if kind not in DEVICES:
        raise ValueError(f"device={device!r}: choose 'meta' (shapes only, nothing allocated), 'cpu' or 'cuda'.")
    return kind
