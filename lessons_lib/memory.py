"""What a training step keeps in memory, and when.

`ledger` lists the tensors autograd saves for backward: the graph node that saved each,
its shape and size, and whether it is new memory or something the caller already held.
`timeline` follows one forward and backward step op by op. Its predicted curve comes from
the op trace and tensor lifetimes, so it works on CPU, CUDA and `meta` alike; beside it, a
measured curve comes from the CUDA allocator, or on CPU from the profiler's memory events.
The timeline and its peaks live in memory_timeline.py; this module re-exports them.

Storages, not tensors, cost memory: two views of one tensor are counted once.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.autograd.graph import saved_tensors_hooks

from .compiling import EagerWatch
from .device import fmt_bytes
from .display import count, text_table
from .memory_timeline import (_MARK, _PHASES, Bytes, Measured, Peaks, Row, Timeline,  # noqa: F401  (re-exported)
                              _cpu_memory_profiler, _graph_nodes, _loss, _measure_cpu, _measure_cuda, _quiet_fd2,
                              _replay_cpu_events, _storage, _tensors, _Tracker, _warm_up, measured_peaks, peaks,
                              timeline)
from .trace import _is_view_op

# --- reading saved slots without recomputing ----------------------------------------------

# Who keeps the inputs of a region under non-reentrant activation checkpointing: not a graph node
# but the checkpoint's frame, which recomputes the region's forward from them in backward.
CHECKPOINT_OWNER = ("checkpoint", "input kept to recompute")


class _Recomputes(Exception):
    """Reading a saved slot started running ops: checkpoint recomputing its region."""


class _RefuseOps(EagerWatch):
    """Raise before the first op that does work, so a recomputation allocates nothing. Views pass:
    unpacking a saved leaf detaches it."""

    def __init__(self):
        super().__init__()
        self.refused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _is_view_op(func):
            return func(*args, **(kwargs or {}))
        self.refused = True
        raise _Recomputes(str(func))


def _slots(node) -> list[str]:
    """A graph node's saved-tensor attributes: `_saved_*`, and `saved_tensors` for autograd.Function."""
    slots = sorted(a for a in dir(node) if a.startswith("_saved_"))
    return slots + (["saved_tensors"] if hasattr(type(node), "saved_tensors") else [])


def _read_slot(node, slot: str):
    """(value, recomputed): a node's saved slot. A slot packed by non-reentrant checkpoint would
    rerun the checkpointed forward to be read (and keep what it recomputed for as long as the
    graph lives): that run is stopped before its first op, and (None, True) comes back."""
    guard = _RefuseOps()
    try:
        with guard:
            return getattr(node, slot), False
    except (_Recomputes, RuntimeError, AttributeError):
        return None, guard.refused


# --- the saved-tensor ledger ------------------------------------------------------------


@dataclass(frozen=True)
class Saved:
    """One tensor autograd saved for backward."""

    node: str  # the graph node that saved it, e.g. "BmmBackward0", or "unknown"
    slot: str  # which of the node's saved tensors, e.g. "mat2"
    shape: tuple[int, ...]
    dtype: str
    bytes: int  # size of its storage
    source: str  # "new", "input 0", "view of input 0", or "held before the call" (a weight)
    same_as: int | None  # the earlier row (1-based) with the same storage, if any

    @property
    def counted(self) -> bool:
        """Whether this row adds to what the call costs: new memory, first of its storage."""
        return self.source == "new" and self.same_as is None


@dataclass
class Ledger:
    """Every tensor one call saves for backward, in the order autograd saved them."""

    entries: list[Saved] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        """New memory kept alive for backward, each storage once, inputs excluded."""
        return sum(e.bytes for e in self.entries if e.counted)

    def by_node(self) -> dict[str, int]:
        """New bytes saved per graph node, largest first."""
        out: dict[str, int] = {}
        for e in self.entries:
            out[e.node] = out.get(e.node, 0) + (e.bytes if e.counted else 0)
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def largest(self) -> Saved | None:
        """The biggest saved tensor that is new memory (seed 004: the expanded copy of W)."""
        return max((e for e in self.entries if e.counted), key=lambda e: e.bytes, default=None)

    def table(self) -> str:
        """A fixed-width table, one saved tensor a line. Deterministic, so nbval can compare it."""
        rows = [("#", "node", "saved", "shape", "dtype", "bytes", "memory")]
        for i, e in enumerate(self.entries, 1):
            memory = f"{e.source}, already held" if "input" in e.source else e.source
            if e.same_as is not None:
                memory += f", same storage as row {e.same_as}"
            shape = "x".join(map(str, e.shape)) or "scalar"
            rows.append((str(i), e.node, e.slot, shape, e.dtype, fmt_bytes(e.bytes), memory))
        table = text_table(rows)
        rule = table.splitlines()[1]
        n = sum(e.counted for e in self.entries)
        total = f"new memory saved for backward: {fmt_bytes(self.total_bytes)} ({self.total_bytes} bytes)"
        return "\n".join([table, rule, f"{total} in {count(n, 'storage')}"])

    def __repr__(self) -> str:
        return self.table()


class _Token:
    """What the pack hook gives autograd to keep: it dies when autograd drops the slot."""

    __slots__ = ("index", "__weakref__")

    def __init__(self, index: int):
        self.index = index


def ledger(fn: Callable, *args, **kwargs) -> Ledger:
    """Run `fn(*args, **kwargs)` once and list every tensor autograd saves for backward.

    Only what the returned graph keeps counts. Works on `meta` tensors (`trace.on_meta`), so
    a huge shape is analysed without allocating it.
    """
    packed: list[torch.Tensor] = []
    tokens: list[weakref.ref] = []
    unpacked: list[int] = []

    def pack(t: torch.Tensor) -> _Token:
        token = _Token(len(packed))
        packed.append(t.detach())  # not `t`: a saved output's grad_fn would keep its graph alive
        tokens.append(weakref.ref(token))
        return token

    def unpack(token: _Token) -> torch.Tensor:
        unpacked.append(token.index)
        return packed[token.index]

    tracker = _Tracker()
    with saved_tensors_hooks(pack, unpack), tracker:
        out = fn(*args, **kwargs)
    tracker.detach()

    # Which node holds which tensor: read each node's saved slots and see which token comes back.
    # A slot that checkpoint packed would rerun the forward to be read: that is refused, and the
    # tokens checkpoint unpacks first (the inputs it keeps to recompute from) are its own.
    owner: dict[int, tuple[str, str]] = {}
    for node in _graph_nodes(_tensors(out)):
        for slot in _slots(node):
            unpacked.clear()
            _value, recomputed = _read_slot(node, slot)
            for i in unpacked:
                owner.setdefault(i, CHECKPOINT_OWNER if recomputed
                                 else (type(node).__name__, slot.replace("_saved_", "", 1)))

    inputs = {_storage(t)[0]: (i, t) for i, t in reversed(list(enumerate(_tensors((args, kwargs)))))}
    first_row: dict[int, int] = {}
    entries: list[Saved] = []
    for i, t in enumerate(packed):
        if tokens[i]() is None:
            continue  # saved by a graph that already died, and freed with it
        key, nbytes = _storage(t)
        if key in inputs:
            j, inp = inputs[key]
            whole = (t.shape, t.stride(), t.storage_offset()) == (inp.shape, inp.stride(), inp.storage_offset())
            source = f"input {j}" if whole else f"view of input {j}"
        else:
            source = "new" if key in tracker.made else "held before the call"
        row = len(entries) + 1
        first = first_row.setdefault(key, row)
        node, slot = owner.get(i, ("unknown", ""))
        entries.append(Saved(node, slot, tuple(int(s) for s in t.shape), str(t.dtype).replace("torch.", ""),
                             nbytes, source, None if first == row else first))
    return Ledger(entries)



def graph(out) -> str:
    """The autograd graph behind `out`, from the output back to the leaves, one node a line,
    with the tensors each node saved for backward (shape, dtype and the size of their storage).

    A node reached twice is printed once. Deterministic, so nbval can compare it; use `ledger`
    to learn which saved tensors are new memory.
    """
    lines: list[str] = []
    seen: dict[object, int] = {}

    def saved(node) -> str:
        parts, recomputed = [], []
        for slot in _slots(node):
            value, again = _read_slot(node, slot)
            name = slot.replace("_saved_", "", 1)
            if again:
                recomputed.append(name)
                continue
            for i, t in enumerate(value if isinstance(value, tuple) else (value,)):
                if isinstance(t, torch.Tensor):
                    label = name + (f"[{i}]" if isinstance(value, tuple) else "")
                    shape = "x".join(map(str, t.shape)) or "scalar"
                    dtype = str(t.dtype).replace("torch.", "")
                    parts.append(f"{label} {shape} {dtype} ({fmt_bytes(_storage(t)[1])})")
        text = ("   saves " + ", ".join(parts)) if parts else ""
        if recomputed:
            text += f"   recomputes {', '.join(recomputed)} in backward (checkpoint: nothing kept)"
        return text

    def walk(node, prefix: str, last: bool, root: bool) -> None:
        branch = "" if root else ("└─ " if last else "├─ ")
        name = type(node).__name__
        if node in seen:
            lines.append(f"{prefix}{branch}{name} (see line {seen[node]})")
            return
        seen[node] = len(lines) + 1
        extra = ""
        if hasattr(node, "variable"):
            extra = f"   leaf {'x'.join(map(str, node.variable.shape)) or 'scalar'}"
        lines.append(f"{prefix}{branch}{name}{extra}{saved(node)}")
        children = [n for n, _ in node.next_functions if n is not None]
        inner = prefix + ("" if root else ("   " if last else "│  "))
        for i, child in enumerate(children):
            walk(child, inner, i == len(children) - 1, False)

    roots = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
    for r in roots:
        walk(r, "", True, True)
    return "\n".join(lines) if lines else "(no autograd graph: nothing here requires grad)"
