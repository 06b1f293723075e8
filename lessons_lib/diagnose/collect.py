"""The one run: the step under the course's op trace, the saved-tensor watch and the sync detector, together.

`collect(step, cuda_view)` runs the step once with, stacked: the op trace (trace._Recorder, each op with the
reader's line), a record per op of its phase (forward, backward, optimizer), its step (backward calls before it),
its tags (pointwise, reduction) and the storages it reads and makes; the saved-tensor watch (saved.py), read as
each backward starts; the sync detector (syncs.watch: CUDA's view on meta and CUDA, every host read on a CPU
run), each event placed among the ops; hooks on optimizer steps. Then what stays alive: tensors with a graph,
made during the call and still reachable after it (lesson 07's `losses.append(loss)`).

For lesson 03's loop, each storage carries, per (line, GEMM shape), the deepest GEMM of that kind among its
ancestors in the current step (`anc`: its step and level). A GEMM's level is one more than its inputs' deepest
(0 for none): GEMMs of one level at one line descend from none of each other (experts side by side: all level
0; an MLP per expert: its first layers level 0, its second level 1), layers one after another rise a level each.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import warnings
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten

from .. import syncs
from ..sandbox import Stopped
from ..code_lines import NOWHERE, Where, user_frame
from ..sync_table import _bool_index
from ..trace import OpTrace, _Recorder, _storage_key, meta_reads, sdpa_as_on_cuda
from . import amp, host_data
from .fused import FusedOnCuda, compiled_codes
from .kept import Kept, across_steps, kept_alive
from .inputs import Step
from .saved import SavedWatch, StepLedger

# Factories that fill what they make (a mask, a buffer of zeros, positions): made again on every pass of a loop,
# they are churn. `empty` and its kin are left out: ops allocate their outputs with them inside the dispatcher.
FACTORY_OPS = {"zeros", "ones", "full", "arange", "rand", "randn", "randint", "randperm", "scalar_tensor", "eye",
               "linspace", "logspace", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "new_zeros",
               "new_ones", "new_full"}


@dataclass(frozen=True)
class OpInfo:
    phase: str  # "forward", "backward" or "optimizer"
    step: int  # backward calls before this op
    pointwise: bool
    reduction: bool
    ins: tuple  # storage keys it reads
    outs: tuple  # storage keys it makes
    level: int = -1  # a forward GEMM: how many GEMMs of its (line, shape) it descends from in its step (else -1)
    weight: tuple = ()  # a GEMM: its second matrix's memory (storage, offset, strides): which weight it used
    region: tuple | None = None  # (region, "forward" or "backward") of a call CUDA fuses (fused.py); phase "fused"
    updates: tuple = ()  # the parameters' storages it writes in place (a hand-written optimizer's update)
    writes: tuple = ()  # the storages it writes: those it makes and those it changes in place
    routed: bool = False  # a GEMM on rows the data picked (nonzero, a mask, an index made from them): routed tokens
    lib: str = ""  # "distributions" or "data loading": dispatched from inside that library's own code
    plain_update: bool = False  # it updates a parameter by its own gradient, scaled (p -= lr * grad: plain SGD)


@dataclass
class OptimizerStep:
    name: str  # the optimizer's class
    foreach: object  # its foreach setting (None: torch's default for the device)
    fused: object
    params: int  # parameters with a gradient
    first: int  # its ops: trace.ops[first:last]
    last: int
    where: Where
    owner: int = 0  # id of the optimizer: a step of the call is one step of each optimizer
    has_foreach: bool = True  # it takes a foreach option (LBFGS does not: there is no foreach form to ask for)
    differentiable: bool = False  # differentiable=True: a for loop on CUDA too (_default_to_fused_or_foreach)


@dataclass
class Evidence:
    trace: OpTrace
    info: list[OpInfo]
    syncs: syncs.SyncReport
    sync_at: list = field(default_factory=list)  # (op index, event, Where, step, phase)
    ledgers: list[StepLedger] = field(default_factory=list)
    optimizers: list[OptimizerStep] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)
    backward_calls: int = 0
    device: str = "meta"
    error: str = ""
    packed: tuple = (0, 0, -1)  # (tensors saved for backward during the call, their bytes, the first saver)
    returns_graph: bool = False  # the step's return value holds a tensor with a graph
    fused: dict = field(default_factory=dict)  # region -> the library kernel CUDA runs for it (fused.py)
    exception: BaseException | None = None  # what the step raised (its traceback with it), or the sandbox's Stopped

    forwards: int = 0  # calls of a module from outside any module (an inference step's forward passes)
    update_rounds: int = 0  # parameter updates written by hand: the most any one parameter got
    fused_modes: dict = field(default_factory=dict)  # region -> how costs.kernels counts it (fused.ONE, APART)

    @property
    def steps(self) -> int:
        """Steps in the call. A step is one optimizer step (the most any optimizer took: a GAN's D and G step once
        each, gradient accumulation's backward calls are one step), else one round of updates written by hand,
        else one backward call, else one forward pass of the model (generation: a token), else the call."""
        by_owner = collections.Counter(o.owner for o in self.optimizers)
        return max(by_owner.values(), default=0) or self.update_rounds or self.backward_calls or \
            max(1, self.forwards)


class Collector(_Recorder):
    def __init__(self):
        super().__init__(OpTrace(), lines=True)
        self.info: list[OpInfo] = []
        self.made: dict = {}  # storage key -> index of the op that made it
        self.anc: dict = {}  # storage key -> {(file, line, gemm dims): (step, level) of its deepest such GEMM}
        self.refs: list = []  # (weakref to an output, op index): what may outlive the call
        self.sync_at: list = []
        self.phase, self.step, self.paused = "forward", 0, False
        self.backward_where = NOWHERE  # the line that called backward: CUDA's backward runs in another thread
        self.region, self.fused = None, None  # inside a call CUDA fuses (fused.FusedOnCuda), and that mode
        self.params: set = set()  # storage keys of the step's parameters (leaves that require grad)
        self.param_tensors: dict = {}  # storage key -> the parameter (its .grad: what a plain update adds)
        self.picks, self.rows = set(), set()  # storages of indices the data chose (nonzero), and of rows they picked
        self.cpu_run, self.optimizer = False, None  # a CPU run; the optimizer stepping now
        self.forwards, self.depth = 0, 0  # modules called from outside any module, and the nesting now
        self.round_ends: list = []  # the op index at the end of each optimizer step
        self.kept_across: dict = {}  # (file, line) -> Kept: graphs alive in a list at a later step (kept.py)
        self.kept_seen: dict = {}  # id -> weakref of the tensors kept.across_steps has counted

    @contextlib.contextmanager
    def quiet(self):
        """Ops in this block are diagnose's own: not recorded."""
        before, self.paused = self.paused, True
        try:
            yield
        finally:
            self.paused = before

    def where(self, depth: int = 2) -> Where:
        w = user_frame(depth + 1)
        return self.backward_where if w is NOWHERE and self.phase == "backward" else w

    def on_sync(self, event) -> None:
        lib = host_data.library()
        if self.cpu_run and lib == "data loading":  # a DataLoader's own reads: of host tensors on a GPU too
            return
        if lib == "distributions" and isinstance(event, syncs.HostSync):
            event = dataclasses.replace(event, why=f"{event.why}; a distribution's argument check (validate_args)")
        event = host_data.what_was_read(self.made, self.trace.ops, event)
        self.sync_at.append((len(self.trace.ops), event, self.where(), self.step, self.phase))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.paused or func is torch.ops.aten.is_pinned.default:  # the sync detector asking, not the step
            return func(*args, **(kwargs or {}))
        if self.cpu_run and self.optimizer is not None and func is torch.ops.aten._local_scalar_dense.default \
                and _storage_key(args[0]) in _host_state(self.optimizer):  # a step count: on the host on a GPU too
            at = len(self.trace.ops)
            self.sync_at = [e for e in self.sync_at if e[0] != at or not isinstance(e[1], syncs.HostSync)]
        out = super().__torch_dispatch__(func, types, args, kwargs)
        idx = len(self.trace.ops) - 1
        op = self.trace.ops[idx]
        if op.where is NOWHERE and self.phase == "backward":  # autograd's device thread: no frame of the reader's
            op = self.trace.ops[idx] = dataclasses.replace(op, where=self.backward_where)
        ins = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        in_keys = tuple(dict.fromkeys(_storage_key(t) for t in ins))
        out_keys = tuple(dict.fromkeys(_storage_key(t) for t in outs))
        new = () if op.is_view else tuple(k for k in out_keys if k not in in_keys)
        for k in new:
            self.made[k] = idx
        region = self._region()
        level = self._ancestry(op, in_keys, out_keys, new, region is None)
        if self.phase == "forward":
            self.refs += [(_weak(t), idx) for t in outs]
        tags = set(func.tags)
        weight = ()
        if op.gemm:
            m2 = args[2] if op.name in ("addmm", "baddbmm", "addbmm") else args[1]
            weight = (_storage_key(m2), m2.storage_offset(), tuple(m2.stride()))
        updates = () if op.is_view else tuple(k for k in out_keys if k in self.params and k in in_keys)
        pointwise = torch.Tag.pointwise in tags
        self.info.append(OpInfo(
            "fused" if region else self.phase, self.step, pointwise, _is_reduction(func, tags), in_keys, new, level,
            weight, region, updates, () if op.is_view else out_keys,
            self._routed(op, args, in_keys, new, pointwise), host_data.library() if self.phase == "forward" else "",
            len(updates) == 1 and self._plain(updates[0], in_keys)))
        return out

    def _routed(self, op, args, in_keys, new, pointwise) -> bool:
        """Rows the data picked (routed tokens): a nonzero's indices pick rows; GEMMs and pointwise ops on them
        keep them picked. True for a GEMM on picked rows."""
        if self.phase != "forward" or op.is_view:
            return False
        self.picks.difference_update(new)  # a key is an address: memory made anew is not a freed pick's rows
        self.rows.difference_update(new)
        if op.name in ("nonzero", "argwhere"):
            self.picks.update(new)
        elif op.name in ("index", "index_select", "gather", "take", "embedding", "masked_select") and (
                _bool_index(op.name, args) or op.name == "masked_select" or any(k in self.picks for k in in_keys[1:])):
            self.rows.update(new)
        elif (op.gemm or pointwise) and any(k in self.rows for k in in_keys):
            self.rows.update(new)
            return bool(op.gemm)
        return False

    def _plain(self, param, in_keys) -> bool:
        """The update reads the parameter and its own gradient, or the gradient scaled by a number: plain SGD."""
        p = self.param_tensors.get(param)
        grad = _storage_key(p.grad) if p is not None and p.grad is not None else None
        others = [k for k in in_keys if k != param]
        return grad is not None and bool(others) and all(
            k == grad or (k in self.made and self.info[self.made[k]].ins == (grad,)) for k in others)

    def _region(self) -> tuple | None:
        if self.region is not None:
            return (self.region, "forward")
        if self.phase == "backward" and self.fused is not None:
            r = self.fused.backward_region()
            return None if r is None else (r, "backward")
        return None

    def _ancestry(self, op, in_keys, out_keys, new, own: bool = True) -> int:
        merged: dict = {}
        for k in in_keys:
            for g, sl in self.anc.get(k, {}).items():
                if merged.get(g, (-1, -1)) < sl:
                    merged[g] = sl
        level = -1
        if op.gemm and own and self.phase == "forward" and op.where is not None:
            key = (op.where.file, op.where.line, op.gemm)
            step, deepest = merged.get(key, (-1, -1))
            level = deepest + 1 if step == self.step else 0
            merged[key] = (self.step, level)
        if not op.is_view:
            for k in new:  # set even when empty: a key is an address, and a freed tensor's may come back
                self.anc[k] = merged
            for k in out_keys if merged else ():
                if k not in new:  # written in place (copy_, add_): it now descends from these inputs too
                    self.anc[k] = {g: max(self.anc.get(k, {}).get(g, sl), sl) for g, sl in merged.items()} | \
                        {g: sl for g, sl in self.anc.get(k, {}).items() if g not in merged}
        return level


def _host_state(opt) -> set:
    """Storages of an optimizer's 0-dim CPU tensors (step counts, a tensor lr): on the host on a GPU machine too,
    without capturable=True."""
    return {_storage_key(t) for s in [*opt.state.values(), *opt.param_groups] for t in s.values()
            if isinstance(t, torch.Tensor) and t.dim() == 0 and t.device.type == "cpu"}


def _weak(t):
    import weakref

    return weakref.ref(t)


@contextlib.contextmanager
def _hooks(col: Collector, watch: SavedWatch, ledgers: list, roots: list, optimizers: list):
    """Backward (snapshot the graph's ledger first; ops after it are its step's backward) and optimizer steps."""
    from torch.optim import optimizer as optim

    backward, grad = torch.autograd.backward, torch.autograd.grad

    def before(tensors):
        ts = [tensors] if isinstance(tensors, torch.Tensor) else [t for t in tensors if isinstance(t, torch.Tensor)]
        col.paused = True
        try:
            ledgers.append(watch.snapshot(ts))
        finally:
            col.paused = False
        roots.extend(t.grad_fn for t in ts if t.grad_fn is not None)
        col.backward_where = user_frame(3)
        if col.round_ends:  # a later step begins: what earlier steps left alive in a list
            across_steps(col, watch, col.round_ends[-1])
        col.phase = "backward"

    def after():
        col.phase = "forward"
        col.step += 1

    inside = [False]  # torch.autograd.backward hands itself to each torch-function mode, which calls it again

    def watched(original):
        def call(tensors, *a, **k):
            if inside[0]:
                return original(tensors, *a, **k)
            inside[0] = True
            before(tensors)
            try:
                return original(tensors, *a, **k)
            finally:
                after()
                inside[0] = False
        return call

    watched_backward, watched_grad = watched(backward), watched(grad)

    def pre(opt, args, kwargs):
        params = sum(p.grad is not None for g in opt.param_groups for p in g["params"])
        group = opt.param_groups[0] if opt.param_groups else {}
        optimizers.append(OptimizerStep(type(opt).__name__, group.get("foreach"), group.get("fused"), params,
                                        len(col.trace.ops), -1, user_frame(2), id(opt), "foreach" in opt.defaults,
                                        bool(group.get("differentiable"))))
        # a step that calls a closure (LBFGS) runs the step's forward and backward inside: those keep their phase
        closure = args[0] if args else kwargs.get("closure")
        col.phase, col.optimizer = ("optimizer" if closure is None else col.phase), opt

    def post(_opt, _a, _k):
        optimizers[-1].last = len(col.trace.ops)
        col.round_ends.append(len(col.trace.ops))
        col.phase, col.optimizer = "forward", None

    def called(_module, _args):
        col.depth += 1
        col.forwards += col.depth == 1 and col.phase == "forward" and not col.paused

    def returned(_module, _args, _out):
        col.depth -= 1

    from torch.nn.modules import module as nn_module

    handles = [optim.register_optimizer_step_pre_hook(pre), optim.register_optimizer_step_post_hook(post),
               nn_module.register_module_forward_pre_hook(called),
               nn_module.register_module_forward_hook(returned, always_call=True)]
    torch.autograd.backward, torch.autograd.grad = watched_backward, watched_grad
    try:
        yield
    finally:
        torch.autograd.backward, torch.autograd.grad = backward, grad
        for h in handles:
            h.remove()


def collect(step: Step, cuda_view: bool) -> Evidence:
    """Run `step` once, watched (see the module's docstring). Keeps what was seen if the step raises."""
    col, ledgers, roots, optimizers, result = Collector(), [], [], [], []
    col.fused = FusedOnCuda(col, compiled_codes(getattr(step, "compiled", ())))
    col.param_tensors = {_storage_key(t): t for t in step.tensors() if t.is_leaf and t.requires_grad}
    col.params = set(col.param_tensors)
    col.cpu_run = step.device == "cpu"
    step.quiet = col.quiet
    watch = SavedWatch(col.made, at=lambda: len(col.trace.ops) - 1)
    on_meta = step.device == "meta"
    error, exception = "", None

    def call():
        result.append(step())

    report = syncs.SyncReport(view="cuda" if cuda_view else "here")
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), watch.hooks(), _hooks(col, watch, ledgers, roots, optimizers), \
                (sdpa_as_on_cuda() if on_meta else contextlib.nullcontext()), \
                (meta_reads() if on_meta else contextlib.nullcontext()), amp.modelled(on_meta, step.notes), \
                host_data.watch(col, cuda_view), host_data.checks_pass(on_meta), col.fused, col:
            if on_meta:  # warnings about stand-in values (a one_hot of zeros) say nothing about the step
                warnings.simplefilter("ignore")
            report = syncs.watch(call, cuda_view=cuda_view, on_event=col.on_sync)
    except (Exception, Stopped) as err:  # keep what was seen up to here; the caller decides what the error says
        error = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"
        exception = err
        report = syncs.SyncReport([e[1] for e in col.sync_at], view=report.view)
    out = result[0] if result else None
    if not roots and out is not None:  # no backward ran: what the returned graph keeps
        ledgers.append(watch.snapshot(_tensors(out)))
    ev = Evidence(col.trace, col.info, report, col.sync_at, ledgers, optimizers, [], col.step,
                  step.device, error)
    ev.exception = exception
    ev.kept = kept_alive(col, watch, out, roots)
    ev.packed = watch.packed()
    ev.returns_graph = any(t.grad_fn is not None for t in _tensors(out))
    ev.fused, ev.fused_modes = dict(col.fused.names), dict(col.fused.modes)
    col.fused.close()  # it held the regions' graph nodes and a frame: let them go
    ev.forwards = col.forwards
    ev.update_rounds = max(collections.Counter(i.updates[0] for i in col.info if len(i.updates) == 1).values(),
                           default=0)
    return ev


def _tensors(out) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


_REDUCTION_TAG = getattr(torch.Tag, "reduction", None)
# The ops that carry torch.Tag.reduction in torch 2.13 (a test checks each still does): torch 2.9 has no such tag
REDUCTIONS = frozenset({"all", "amax", "amin", "aminmax", "any", "argmax", "argmin", "count_nonzero",
                        "linalg_vector_norm", "logsumexp", "max", "mean", "min", "nansum", "norm", "prod", "std",
                        "std_mean", "sum", "var", "var_mean"})


def _is_reduction(func, tags) -> bool:
    if _REDUCTION_TAG is not None:
        return _REDUCTION_TAG in tags
    return func._schema.name.split("::")[-1] in REDUCTIONS

