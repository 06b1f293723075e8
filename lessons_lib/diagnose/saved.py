"""What a step's graph keeps for backward, read the moment backward starts (the ledger's way, at that moment).

`memory.ledger` lists what the graph a call *returns* keeps. A training step runs its backward inside the call,
which frees what was saved, so here the saved tensors are watched while the step runs (saved_tensors_hooks, as
the ledger does) and each graph is read when its backward starts: its nodes' saved slots (memory's slot readers,
a checkpoint's recomputation refused), each saved tensor's storage, size, and the op that made it. The rows are
the ledger's own (memory.Saved, memory.Ledger), so they print as the ledger prints; `made_by` gives each row's op.
A token keeps each saved tensor, so a graph that dies frees what it saved, as without the hooks.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

from ..memory import Ledger, Saved, _read_slot, _slots
from ..memory_timeline import _graph_nodes, _storage


class _Token:
    __slots__ = ("index", "tensor", "__weakref__")

    def __init__(self, index: int, tensor: torch.Tensor):
        self.index, self.tensor = index, tensor


@dataclass
class StepLedger:
    """The ledger of one graph as its backward started, and the op (index into the trace) behind each row."""

    ledger: Ledger
    made_by: list[int | None]  # per row: the op that made its storage during the run, or None (held before)
    nodes: int = 0  # graph nodes


@dataclass
class SavedWatch:
    """saved_tensors_hooks for a run: `made` maps a storage to the op that made it (the collector's map)."""

    made: dict
    at: object = None  # () -> the index of the op being recorded (which op saved what)
    tokens: list = field(default_factory=list)  # weakrefs to tokens, by index
    info: list = field(default_factory=list)  # (storage key, bytes, shape, dtype) by index
    unpacked: list = field(default_factory=list)
    reading: bool = False

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def pack(self, t: torch.Tensor) -> _Token:
        token = _Token(len(self.info), t.detach())  # not `t`: a saved output's grad_fn would keep its graph alive
        key, nbytes = _storage(t)
        self.info.append((key, nbytes, tuple(int(s) for s in t.shape), str(t.dtype).replace("torch.", ""),
                          self.at() if self.at else -1))
        self.tokens.append(weakref.ref(token))
        return token

    def unpack(self, token: _Token) -> torch.Tensor:
        if self.reading:
            self.unpacked.append(token.index)
        return token.tensor

    def snapshot(self, roots: list[torch.Tensor]) -> StepLedger:
        """The ledger of the graph behind `roots`, now: each saved tensor its nodes still hold, once per slot."""
        owner: dict[int, tuple[str, str]] = {}
        nodes = _graph_nodes([t for t in roots if isinstance(t, torch.Tensor)])
        self.reading = True
        try:
            for node in nodes:
                for slot in _slots(node):
                    self.unpacked.clear()
                    _value, recomputed = _read_slot(node, slot)
                    for i in self.unpacked:
                        owner.setdefault(i, ("checkpoint", "input kept to recompute") if recomputed
                                         else (type(node).__name__, slot.replace("_saved_", "", 1)))
        finally:
            self.reading = False
        entries, made_by, first_row = [], [], {}
        for i in sorted(owner):
            if self.tokens[i]() is None:
                continue
            key, nbytes, shape, dtype, _at = self.info[i]
            op = self.made.get(key)
            row = len(entries) + 1
            first = first_row.setdefault(key, row)
            entries.append(Saved(*owner[i], shape, dtype, nbytes, "new" if op is not None else "held before the call",
                                 None if first == row else first))
            made_by.append(op)
        return StepLedger(Ledger(entries), made_by, len(nodes))

    def packed(self) -> tuple[int, int, int]:
        """(tensors saved during the run, their bytes with each storage once, the op that saved the first)."""
        sizes = {key: nbytes for key, nbytes, *_rest in self.info}
        return len(self.info), sum(sizes.values()), self.info[0][4] if self.info else -1
