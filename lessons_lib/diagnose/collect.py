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

import contextlib
import dataclasses
import gc
import io
import warnings
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten

from .. import syncs
from ..sandbox import Stopped
from ..code_lines import NOWHERE, Where, user_frame
from ..memory_timeline import _graph_nodes
from ..trace import OpTrace, _Recorder, _storage_key, meta_reads, sdpa_as_on_cuda
from .fused import FusedOnCuda
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


@dataclass
class OptimizerStep:
    name: str  # the optimizer's class
    foreach: object  # its foreach setting (None: torch's default for the device)
    fused: object
    params: int  # parameters with a gradient
    first: int  # its ops: trace.ops[first:last]
    last: int
    where: Where


@dataclass
class Kept:
    """Tensors with a graph made during the call, still alive after it, grouped by the line that made them."""

    where: Where
    tensors: int
    nodes: int  # graph nodes they keep alive
    saved_bytes: int  # bytes their graphs still hold for backward
    steps: int  # backward roots (steps) their graphs span
    returned: bool  # held by the step's return value (a running total), not by a list or an attribute


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

    @property
    def steps(self) -> int:
        """Steps in the call: its backward calls (one when there is none)."""
        return max(1, self.backward_calls)


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
        self.sync_at.append((len(self.trace.ops), event, self.where(), self.step, self.phase))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.paused or func is torch.ops.aten.is_pinned.default:  # the sync detector asking, not the step
            return func(*args, **(kwargs or {}))
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
        self.info.append(OpInfo("fused" if region else self.phase, self.step, torch.Tag.pointwise in tags,
                                _is_reduction(func, tags), in_keys, new, level, weight, region, updates))
        return out

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
        if merged and not op.is_view:
            for k in new:
                self.anc[k] = merged
            for k in out_keys:
                if k not in new:  # written in place (copy_, add_): it now descends from these inputs too
                    self.anc[k] = {g: max(self.anc.get(k, {}).get(g, sl), sl) for g, sl in merged.items()} | \
                        {g: sl for g, sl in self.anc.get(k, {}).items() if g not in merged}
        return level


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

    def pre(opt, _a, _k):
        params = sum(p.grad is not None for g in opt.param_groups for p in g["params"])
        group = opt.param_groups[0] if opt.param_groups else {}
        optimizers.append(OptimizerStep(type(opt).__name__, group.get("foreach"), group.get("fused"), params,
                                        len(col.trace.ops), -1, user_frame(2)))
        col.phase = "optimizer"

    def post(_opt, _a, _k):
        optimizers[-1].last = len(col.trace.ops)
        col.phase = "forward"

    handles = [optim.register_optimizer_step_pre_hook(pre), optim.register_optimizer_step_post_hook(post)]
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
    col.fused = FusedOnCuda(col)
    col.params = {_storage_key(t) for t in step.tensors() if t.is_leaf and t.requires_grad}
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
                (meta_reads() if on_meta else contextlib.nullcontext()), col.fused, col:
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
    ev.fused = dict(col.fused.names)
    col.fused.nodes.clear()  # it held the fused calls' graph nodes: let them go
    return ev


def _tensors(out) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def kept_alive(col: Collector, watch: SavedWatch, out, roots: list) -> list[Kept]:
    """Tensors with a graph, made during the call, alive after it: those the return value holds only count when
    their graphs span two steps or more together (a running total; a list or a stack of each step's loss); the
    others (a list, an attribute, a global) always."""
    gc.collect()
    returned = set(_graph_nodes(_tensors(out)))
    step_roots = set(roots)
    alive: dict[object, tuple] = {}
    for ref, idx in col.refs:
        t = ref()
        if t is not None and t.grad_fn is not None and t.grad_fn not in alive:
            alive[t.grad_fn] = (t, idx)
    # roots: alive tensors whose node no other alive tensor's graph reaches (a running total reaches its parts)
    reach = {n: set(_graph_nodes([t])) for n, (t, _i) in alive.items()}
    tops = [n for n in alive if not any(n in reach[m] for m in alive if m is not n)]
    # what the return value holds, together: graphs whose backward ran, from two steps or more (a list or a stack
    # of every step's loss, each of its own step) are kept as a running total is; one step's loss returned is not
    returned_steps = set().union(*(reach[n] & step_roots for n in tops if n in returned))
    groups: dict[tuple, Kept] = {}
    for n in tops:
        t, idx = alive[n]
        in_return = n in returned
        spans = len(reach[n] & step_roots)
        if in_return and (spans < 2 and (spans < 1 or len(returned_steps) < 2)):
            continue
        col.paused = True
        try:
            saved = watch.snapshot([t]).ledger.total_bytes
        finally:
            col.paused = False
        where = col.trace.ops[idx].where
        key = (where.file, where.line)
        k = groups.get(key)
        if k is None:
            groups[key] = Kept(where, 1, len(reach[n]), saved, spans, in_return)
        else:
            k.tensors += 1
            k.nodes += len(reach[n])
            k.saved_bytes += saved
            k.steps = max(k.steps, spans)
    return list(groups.values())


_REDUCTION_TAG = getattr(torch.Tag, "reduction", None)
# The ops that carry torch.Tag.reduction in torch 2.13 (a test checks each still does): torch 2.9 has no such tag
REDUCTIONS = frozenset({"all", "amax", "amin", "aminmax", "any", "argmax", "argmin", "count_nonzero",
                        "linalg_vector_norm", "logsumexp", "max", "mean", "min", "nansum", "norm", "prod", "std",
                        "std_mean", "sum", "var", "var_mean"})


def _is_reduction(func, tags) -> bool:
    if _REDUCTION_TAG is not None:
        return _REDUCTION_TAG in tags
    return func._schema.name.split("::")[-1] in REDUCTIONS

