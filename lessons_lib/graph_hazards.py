"""graph_check: what in a function CUDA graph capture would refuse or freeze, seen on any device.

A CUDA graph records the kernels one call launches and replays them with one launch. It records
kernels, not Python: whatever the host did during capture (read a value, pick a branch, copy
from host memory, use a Python number) is either refused during capture or frozen into every
replay. `graph_check(fn, *example_inputs)` runs `fn` once on any device (CPU and `meta` included),
watching at PyTorch's dispatcher and a few Python entry points, and lists what it sees:

- host syncs (`.item()`, `.cpu()`, `.tolist()`, `print(t)`, `if t:`, ops that read on the host
  inside ATen, syncs.CUDA_KERNEL_SYNCS) and ops whose output size depends on the data (`nonzero`,
  `x[mask]`, `unique`, `masked_select`): capture refuses them ("operation not permitted when stream
  is capturing");
- copies from host memory inside the function: `torch.tensor(data, device=...)`, and a tensor made on
  the host (a factory without `device=`) then moved with `.to(device)` / `.cuda()` (a blocking
  pageable copy: a sync); `torch.cuda.synchronize()`;
- frozen values: a 0-dim host tensor meeting device tensors (CUDA passes it to the kernel by value:
  `x * torch.tensor(2.0)` captures, with 2.0 baked in), Python numbers among the arguments,
  optimizers' float learning rates, numbers from Python's `random`, and another call's other path
  (`also=`); all capture, and replays keep what capture saw;
- shape changes between calls (`also=`); optimizers built without `capturable`, or reading a tensor lr
  on the host (graph_optim.py).

What it cannot see is printed with every verdict (`BLIND_SPOTS`): it runs on a CPU, not under CUDA.
Facts relied on: the optimizer checks (graph_optim.py) mirror torch/optim's capture health check and how
each optimizer reads its learning rate; CUDA's "CPU scalar" kernel arguments: TensorIterator's
`is_cpu_scalar` (a 0-dim CPU operand of a CUDA op is read on the host and passed by value).
"""
from __future__ import annotations

import contextlib
import io
import weakref

import torch
from torch.utils._pytree import tree_flatten

from . import sandbox
from .compiling import EagerWatch
from .display import count
from .grading import TimeLimit
from .graph_optim import _watch_syncs_and_optimizers
from .graph_report import (_HERE, BLIND_SPOTS, CLEAN, FAILS, FROZEN, KINDS, GraphReport,  # noqa: F401
                           Hazard, _user_line)
from .syncs import _becomes_masked_fill, _record


# aten ops whose output size depends on the data (syncs.py counts them as host syncs).
_SHAPE_OPS = ("nonzero", "masked_select", "unique", "repeat_interleave", "aten.index (bool mask)")
# torch factories watched at the Python level: without device= they make a tensor in host memory.
_FACTORIES = ("tensor", "as_tensor", "randn", "rand", "randint", "randperm", "zeros", "ones", "empty", "full",
              "arange", "linspace", "eye")
_RANDOM = ("random", "uniform", "randint", "randrange", "gauss", "normalvariate", "choice")


class _Watch(EagerWatch):
    """Copies across devices, host tensors meeting device tensors, and the op sequence (name, shapes).

    "Host-made" tensors are those the function makes with a torch factory without `device=` (marked by
    `_watch_python`), and what is computed from them alone: on a GPU they live in host memory whatever
    device this run uses, so on a CPU run they are told apart from the inputs this way."""

    def __init__(self, hazards: list[Hazard]):
        super().__init__()
        self.hazards = hazards
        self.ops: list[tuple] = []
        self.in_optimizer = False  # an optimizer's first step makes its state from Python data: not a hazard
        self.host: dict[int, tuple] = {}  # id -> (weakref, origin, line of code)
        self.reported: set = set()

    def mark_host(self, t: torch.Tensor, origin: str, where: str) -> None:
        self.host[id(t)] = (weakref.ref(t), origin, where)

    def host_origin(self, t) -> tuple | None:
        entry = self.host.get(id(t)) if isinstance(t, torch.Tensor) else None
        return entry[1:] if entry and entry[0]() is t else None

    def unmark(self, t) -> None:
        self.host.pop(id(t), None)

    def add(self, kind: str, what: str, where: str, detail: str = "", key=None) -> None:
        key = key if key is not None else (kind, what, where)
        if key not in self.reported:
            self.reported.add(key)
            self.hazards.append(Hazard(kind, what, where, detail))

    def _host_meets_device(self, func, name: str, args, kwargs) -> None:
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        host = [(t, self.host_origin(t)) for t in tensors if self.host_origin(t)]
        device = [t for t in tensors if not self.host_origin(t)]
        if host and device:  # a tensor made on the host inside the function meets the inputs' tensors
            t, (origin, where) = host[0]
            if t.dim() == 0:
                self.add("frozen host tensor", f"{origin} used by aten.{name}", where, key=("frozen", origin, where))
            else:
                self.add("host↔device copy", f"{origin}, {tuple(t.shape)}, used by aten.{name}", where,
                         "made in host memory: on a GPU it must be copied to the device at every call "
                         "(or the op raises: tensors on different devices)", key=("host", origin, where))
            return
        on_device = [t for t in tensors if t.device.type not in ("cpu",)]
        rng = _attention_rng_state(func, args, kwargs)
        scalars = [t for t in tensors if t.device.type == "cpu" and t.dim() == 0 and id(t) not in rng]
        if on_device and scalars and not (name.startswith("index_put") and _becomes_masked_fill(args, kwargs)):
            self.add("frozen host tensor", f"a 0-dim CPU tensor used by aten.{name}", _user_line())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in ("_to_copy", "copy_") and args and isinstance(args[0], torch.Tensor):
            src = args[1] if name == "copy_" and len(args) > 1 else args[0]
            dst = args[0].device if name == "copy_" else kwargs.get("device") or args[0].device
            if isinstance(src, torch.Tensor) and src.device.type != torch.device(dst).type:
                origin = self.host_origin(src)
                self.add("host↔device copy", f"aten.{name}", _user_line(), f"{src.device.type} → {torch.device(dst).type}",
                         key=("host", *origin) if origin else None)
        elif name not in ("lift_fresh", "lift_fresh_copy") and not self.in_optimizer:
            self._host_meets_device(func, name, args, kwargs)
        out = func(*args, **kwargs)
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if ins and all(self.host_origin(t) for t in ins):  # computed from host tensors alone: still on the host
            origin, where = self.host_origin(ins[0])
            for t in _tensors(out):
                self.mark_host(t, origin, where)
        self.ops.append((name, tuple(tuple(t.shape) for t in _tensors(out))))
        return out


# Fused attention's dropout RNG state, passed from forward to backward. Out of capture the forward makes it as 0-dim
# CPU tensors; under capture on the device (aten/src/ATen/native/transformers/cuda/attention.cu,
# _efficient_attention_forward and _flash_attention_forward: Note [Seed and Offset Device]), and backward reads it
# through pointers there (attention_backward.cu: PhiloxCudaState(seed_ptr, offset_ptr) "dropout + capture"), and
# only when dropout_p != 0. Nothing of it is frozen into a graph: an eager run's CPU copies are not a hazard.
_RNG_STATE_ARGS = ("philox_seed", "philox_offset", "rng_state", "unused")


def _attention_rng_state(func, args, kwargs) -> set[int]:
    """ids of the tensors passed as fused attention's RNG state (by the op's schema), else empty."""
    if "attention" not in func.overloadpacket.__name__:
        return set()
    schema = getattr(func, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    named = {**dict(zip(names, args)), **kwargs}
    return {id(t) for n, t in named.items() if n in _RNG_STATE_ARGS and isinstance(t, torch.Tensor)}


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for t in x if isinstance(t, torch.Tensor)]
    return []


def _moves_to_device(args, kwargs) -> bool:
    """Tensor.to(...) arguments that name a device (a device, a string, or a tensor to follow)."""
    for a in (*args, kwargs.get("device"), kwargs.get("other")):
        if isinstance(a, (torch.device, torch.Tensor)) or (isinstance(a, str)) or isinstance(a, int) and \
                not isinstance(a, bool):
            return True
    return False


@contextlib.contextmanager
def _watch_python(watch: _Watch):
    """For the duration: torch factories (a tensor made in host memory when no device= is given;
    torch.tensor / as_tensor(data, device=...) and t.new_tensor(data) copy from host memory), Tensor.to / .cuda of such a tensor
    (a pageable host→device copy on a GPU, a no-op on a CPU run), and Python's `random`."""
    import random

    def factory(name, original):
        def make(*a, **k):
            out = original(*a, **k)
            if isinstance(out, torch.Tensor) and not watch.in_optimizer:
                where = _user_line()
                data = a[0] if a else k.get("data")
                if k.get("device") is not None and name in ("tensor", "as_tensor") and \
                        not isinstance(data, torch.Tensor):
                    watch.add("host↔device copy", f"torch.{name}(..., device={k['device']!s})", where,
                              "Python data is copied from host memory at every call (a blocking copy on a GPU)")
                elif k.get("device") is None and _default_device_is_cpu():
                    watch.mark_host(out, f"torch.{name}(...) without device=", where)
            return out
        return make

    def move(name, original):
        def to(self, *a, **k):
            origin = watch.host_origin(self)
            out = original(self, *a, **k)
            if origin and (name == "cuda" or _moves_to_device(a, k)) and not watch.in_optimizer:
                watch.add("host↔device copy", f"{origin[0]} then .{name}(device)", _user_line(),
                          "made in host memory, then copied: on a GPU a pageable host→device copy at every call "
                          "(on a CPU run a no-op); make it with device=", key=("host", *origin))
                watch.unmark(self)
                watch.unmark(out)
            return out
        return to

    def from_data(name, original):
        def make(self, *a, **k):  # t.new_tensor(data): Python data copied to t's device (capture refuses it)
            if not watch.in_optimizer and watch.host_origin(self) is None:
                watch.add("host↔device copy", "Tensor.new_tensor(...)", _user_line(),
                          "Python data is copied from host memory to the tensor's device at every call (a blocking "
                          "copy on a GPU)")
            return original(self, *a, **k)
        return make

    def drawn(name, original):
        def draw(*a, **k):
            watch.add("frozen Python value", f"random.{name}() = {original(*a, **k)!r:.12}", _user_line(),
                      "drawn on the host at capture: every replay uses that number", key=("random", name, _user_line()))
            return original(*a, **k)
        return draw

    def shown(name, original):
        def show(self, *a, **k):  # on meta, printing reads no values (so no .item() to see): a GPU's would
            if self.device.type == "meta":
                watch.add("host sync", "Tensor.__repr__() (print)", _user_line(),
                          "printing a GPU tensor copies its values to the host")
            return original(self, *a, **k)
        return show

    saved = [(torch, n, getattr(torch, n)) for n in _FACTORIES if hasattr(torch, n)]
    saved += [(torch.Tensor, n, getattr(torch.Tensor, n)) for n in ("to", "cuda", "__repr__", "new_tensor")]
    saved += [(random, n, getattr(random, n)) for n in _RANDOM]
    try:
        for owner, n, original in saved:
            wrap = factory if owner is torch else ({"__repr__": shown, "new_tensor": from_data}.get(n, move)
                                                    if owner is torch.Tensor else drawn)
            setattr(owner, n, wrap(n, original))
        yield
    finally:
        for owner, n, original in saved:
            setattr(owner, n, original)


def _default_device_is_cpu() -> bool:
    get = getattr(torch, "get_default_device", None)
    return get is None or torch.device(get()).type == "cpu"


def _signature(args) -> list:
    return [(tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else type(a).__name__ for a in args]


def _one_call(fn, args, kwargs) -> tuple[list[Hazard], list[tuple], str]:
    """Run `fn` once, watched: host syncs (syncs.host_syncs, innermost, so it names the user's line),
    and around it copies, device syncs and optimizer steps. Keeps what was seen if `fn` raises."""
    hazards: list[Hazard] = []
    watch = _Watch(hazards)
    error = [""]

    def run():
        try:
            sandbox.call(fn, *args, **kwargs)
        except TimeLimit:  # a checker's time limit: the caller turns it into a verdict line
            raise
        except (Exception, sandbox.Stopped) as err:  # keep what was seen up to here (the sandbox's budget too)
            box = sandbox.active()
            error[0] = box.stopped if box is not None and box.stopped else \
                f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:160]}"

    with _watch_syncs_and_optimizers(hazards, watch), _watch_python(watch), watch, \
            contextlib.redirect_stdout(io.StringIO()):
        found = _record(run, (), {}, per_line=True)  # what it prints is not shown: it is checked, not run for output
    # an optimizer's own host reads (its step count, a tensor lr) are the optimizer hazard already named
    steps = {h.where for h in hazards if h.kind in ("optimizer", "optimizer lr")}
    for s in found:
        if s.where in steps and s.what in ("aten._local_scalar_dense", "Tensor.item()"):
            continue
        kind = "data-dependent shape" if any(k in s.what for k in _SHAPE_OPS) else \
            "mask to indices" if "(bool mask)" in s.what else "host sync"
        detail = s.why.split("; ")[-1] if "syncs on CUDA" in s.why and kind == "host sync" else ""
        hazards.append(Hazard(kind, s.what, s.where, detail))
    return hazards, watch.ops, error[0]


def graph_check(fn, *example_inputs, also=(), **kwargs) -> GraphReport:
    """Everything in `fn(*example_inputs)` that would break or silently change under CUDA graph capture.

    Runs `fn` once on the inputs as given (CPU, meta or a GPU; nothing is captured), then once on
    each argument tuple in `also` (other calls the program will make): a different input shape is
    a shape change, a different op sequence at the same shapes is control flow a graph would freeze.
    Each hazard carries the user's line of code, what it does under capture and the fix.
    It runs on copies of `fn`, its inputs and everything they reach (lessons_lib.reach), in the sandbox (no write
    to disk, the random state kept, a budget of ops and seconds): nothing of yours changes. A call that cannot
    run gets a report whose first line says so, with no verdict.
    """
    from . import step_call
    from .reach import Uncopyable, copy_step

    tensors = [a for a in example_inputs if isinstance(a, torch.Tensor)]
    report = GraphReport(device=tensors[0].device.type if tensors else "cpu")
    report.not_run = step_call.problem(fn, example_inputs, kwargs, "graph_check") or ""
    try:  # one copy of the world for every call (a counter the calls share stays shared)
        if not report.not_run:
            others = [tuple(o) if isinstance(o, (tuple, list)) else (o,) for o in also]
            fn, (inputs, *others), kwargs, copier = copy_step(fn, (example_inputs, *others), kwargs, "same",
                                                              ("example_inputs",) + ("also",) * len(others))
    except Uncopyable as err:
        report.not_run = str(err)
    if report.not_run:
        return report
    calls = [(fn, o, kwargs, copier) for o in (inputs, *others)]
    with sandbox.sandbox(shared=copier.shared) as box:
        try:
            _check(report, calls, example_inputs, also)
        except sandbox.Stopped:
            report.error = box.stopped
    return report


def _check(report: GraphReport, calls: list, example_inputs, also) -> None:
    fn, example_inputs_copy, kwargs, _copier = calls[0]
    for i, a in enumerate(example_inputs):
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            report.hazards.append(Hazard("frozen Python value", f"argument {i} = {a!r}", "the call's arguments"))
    hazards, ops, report.error = _one_call(fn, example_inputs_copy, kwargs)
    report.hazards += hazards
    report.ops = len(ops)
    for other_fn, other, other_kwargs, _c in calls[1:]:
        if _signature(other) != _signature(example_inputs):
            report.hazards.append(Hazard("shape change", f"{_signature(example_inputs)} then {_signature(other)}",
                                         "the call's arguments"))
            continue
        _h, other_ops, _e = _one_call(other_fn, other, other_kwargs)
        if other_ops != ops:
            first = next((i for i, (a, b) in enumerate(zip(ops, other_ops)) if a != b), min(len(ops), len(other_ops)))
            report.hazards.append(Hazard("control flow", f"{count(len(ops), 'op')}, then {count(len(other_ops), 'op')}",
                                         "the call's arguments", f"they differ from op {first}"))
