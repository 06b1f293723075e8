"""Graphs kept alive (lesson 07): tensors with their autograd graph that outlive the step that made them.

Two moments see them. After the call (`kept_alive`): tensors made during it and still reachable (a list, an
attribute, a global, or the return value when it spans two steps or more). And during the call (`across_steps`),
as each backward starts a new step: tensors made in an earlier step, still alive with their graph, and held by a
list (losses.append(loss) in a loop whose list dies with the call). A loop variable that still holds the last
step's tensor until the loop overwrites it is not one: a list grows, a variable does not.
"""
from __future__ import annotations

import collections
import gc
import sys
import weakref
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten

from ..code_lines import Where
from ..memory_timeline import _graph_nodes


@dataclass
class Kept:
    """Tensors with a graph made during the call, still alive after it, grouped by the line that made them."""

    where: Where
    tensors: int
    nodes: int  # graph nodes they keep alive
    saved_bytes: int  # bytes their graphs still hold for backward
    steps: int  # backward roots (steps) their graphs span
    returned: bool  # held by the step's return value (a running total), not by a list or an attribute
    across: bool = False  # seen during the call: alive in a list at a later step of the same call


def _tensors(out) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def _saved(col, watch, t) -> int:
    col.paused = True
    try:
        return watch.snapshot([t]).ledger.total_bytes
    finally:
        col.paused = False


def _add(groups: dict, col, watch, t, idx: int, nodes: int, spans: int, returned: bool, across: bool) -> None:
    where = col.trace.ops[idx].where
    k = groups.get((where.file, where.line))
    if k is None:
        groups[(where.file, where.line)] = Kept(where, 1, nodes, _saved(col, watch, t), spans, returned, across)
    else:
        k.tensors, k.nodes, k.saved_bytes, k.steps = k.tensors + 1, k.nodes + nodes, k.saved_bytes + _saved(
            col, watch, t), max(k.steps, spans)


def kept_alive(col, watch, out, roots: list) -> list[Kept]:
    """Tensors with a graph, made during the call, alive after it: those the return value holds only count when
    their graphs span two steps or more together (a running total; a list or a stack of each step's loss); the
    others (a list, an attribute, a global) always. Then those `across_steps` saw, at lines not found here."""
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
        _add(groups, col, watch, t, idx, len(reach[n]), spans, in_return, False)
    return list(groups.values()) + [k for key, k in col.kept_across.items() if key not in groups]


_GROWING = (list, collections.deque, set)


def _held_by_lists(candidates: list) -> set[int]:
    """ids of the candidate tensors that a list, a deque or a set holds (directly, or in a tuple it holds);
    `candidates` itself is not counted."""
    ids = {id(t) for t in candidates}
    held, tuples = set(), []
    for r in gc.get_referrers(*candidates):
        if r is candidates:
            continue
        if isinstance(r, _GROWING):
            held |= {id(x) for x in r if id(x) in ids}
        elif isinstance(r, tuple):
            tuples.append(r)
    if tuples and len(held) < len(ids):
        for r in gc.get_referrers(*tuples):
            if isinstance(r, _GROWING) and r is not tuples:
                for tup in r:
                    if isinstance(tup, tuple):
                        held |= {id(x) for x in tup if id(x) in ids}
    return held


def _seen(col, t) -> bool:
    ref = col.kept_seen.get(id(t))  # by identity: a tensor's == compares values
    return ref is not None and ref() is t


def across_steps(col, watch, before: int) -> None:
    """At a backward that starts a later step: tensors made by ops before op `before` (earlier steps), alive now
    with a graph and held by a list, not only by a variable of a frame on the stack; recorded in col.kept_across."""
    old, live = [], []  # weak references only: a list of ours holding them would count as theirs
    for ref, idx in col.refs:
        t = ref()
        if t is not None:
            live.append((ref, idx))
            if idx < before and t.grad_fn is not None and not _seen(col, t):
                old.append((ref, idx))
    t = None
    col.refs = live
    if not old:
        return
    in_frames: set[int] = set()
    f = sys._getframe(1)
    while f is not None:  # a variable of the loop holds the last step's tensor: the loop overwrites it
        in_frames |= {id(v) for v in f.f_locals.values() if isinstance(v, torch.Tensor)}
        f = f.f_back
    index = {id(r()): (r, i) for r, i in old if r() is not None and id(r()) not in in_frames}
    candidates = [r() for r, _i in index.values()]
    candidates = [c for c in candidates if c is not None]
    if not candidates:
        return
    held = _held_by_lists(candidates)
    for c in candidates:
        if id(c) in held:
            col.kept_seen[id(c)] = weakref.ref(c)  # each tensor once, however many later steps see it
            _add(col.kept_across, col, watch, c, index[id(c)][1], len(_graph_nodes([c])), 1, False, True)
