"""A training step's memory measured, not predicted: `measured_peaks` (split from memory_timeline.py).

`memory_timeline.timeline` runs a step under a dispatch mode, and some code changes under one (a function
from `torch.compile` used to fall back to eager); this measures with nothing in the way: the CUDA
allocator's counters, or on CPU the profiler's memory events.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, NamedTuple

import torch
from torch.utils._pytree import tree_flatten



@contextlib.contextmanager
def _quiet_fd2():
    """Send file descriptor 2 to /dev/null: recent torch's profiler writes its start/stop log lines
    there from C++, where neither Python nor KINETO_LOG_LEVEL can reach them."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _cpu_memory_profiler():
    """The CPU profiler with memory events, without its C++ log lines: the start/stop lines, and
    "Memory block of unknown size was allocated before the profiling started", which it logs when
    a tensor made before profiling is freed during it. Only file descriptor 2 is silenced, for the
    profiled stretch; Python's own warnings and errors still reach the notebook."""
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
    with _quiet_fd2():
        prof.__enter__()
        try:
            yield prof
        finally:
            prof.__exit__(None, None, None)


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _graph_nodes(roots: list[torch.Tensor]) -> list:
    nodes, stack, seen = [], [t.grad_fn for t in roots], set()
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            nodes.append(node)
            stack.extend(nf for nf, _ in node.next_functions)
    return nodes


def _loss(out) -> torch.Tensor | None:
    """A scalar to call backward on: the sum of every output that needs a gradient."""
    losses = [o if o.dim() == 0 else o.sum() for o in _tensors(out) if o.requires_grad]
    loss = losses[0] if losses else None
    for more in losses[1:]:
        loss = loss + more
    return loss


def _warm_up(fn: Callable, args, kwargs, backward: bool) -> None:
    """One untracked step, so one-off allocations are not measured: cuBLAS keeps a workspace
    per thread, and backward runs on a thread of its own. Gradients are computed, not stored."""
    with torch.set_grad_enabled(backward):
        loss = _loss(fn(*args, **kwargs))
    leaves = [n.variable for n in _graph_nodes([loss]) if hasattr(n, "variable")] if loss is not None else []
    if leaves:  # AccumulateGrad nodes know their leaf; grad() returns, and does not store, the gradients
        torch.autograd.grad(loss, leaves, allow_unused=True)


class Measured(NamedTuple):
    """A step's memory measured only, in bytes beyond what was held before it (None: unmeasurable)."""

    forward: int | None  # peak during the forward
    backward: int | None  # peak during the backward (what it starts from included)
    after_forward: int | None  # current once the forward is done


_PHASES = ("lessons_lib.memory.forward", "lessons_lib.memory.backward")


def measured_peaks(fn: Callable, *args, backward: bool = True, device=None, **kwargs) -> Measured:
    """Peaks of one step, `fn(*args, **kwargs)` then `.sum().backward()`, measured and not predicted.

    `timeline` runs `fn` under a dispatch mode, and some code changes under one: a function
    from `torch.compile` falls back to eager. This measures with nothing in the way: the CUDA
    allocator's counters, or on CPU the profiler's memory events. One untimed warm-up step runs
    first (it compiles a compiled function). On `meta` nothing is measured: all three are None.
    device: where `fn` allocates. Read from the tensor arguments when not given; pass it for a closure
        (with no tensor arguments a GPU step would be measured with the CPU profiler: "40 B").
    """
    tensors = _tensors((args, kwargs))
    device = torch.device(device) if device is not None else tensors[0].device if tensors else torch.device("cpu")
    if device.type not in ("cuda", "cpu"):
        return Measured(None, None, None)
    _warm_up(fn, args, kwargs, backward)
    leaves = [t for t in tensors if t.requires_grad and t.is_leaf]
    old_grads = [t.grad for t in leaves]
    for t in leaves:
        t.grad = None
    try:
        if device.type == "cuda":
            return _measure_cuda(fn, args, kwargs, backward, device)
        return _measure_cpu(fn, args, kwargs, backward)
    finally:
        for t, g in zip(leaves, old_grads):
            t.grad = g


def _measure_cuda(fn, args, kwargs, backward, device) -> Measured:
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = fn(*args, **kwargs)
    loss = _loss(out) if backward else None
    torch.cuda.synchronize(device)
    fwd, after = torch.cuda.max_memory_allocated(device) - base, torch.cuda.memory_allocated(device) - base
    bwd = None
    if loss is not None:
        torch.cuda.reset_peak_memory_stats(device)
        loss.backward()
        torch.cuda.synchronize(device)
        bwd = torch.cuda.max_memory_allocated(device) - base
    del out, loss
    return Measured(fwd, bwd, after)


def _measure_cpu(fn, args, kwargs, backward) -> Measured:
    with _cpu_memory_profiler() as prof:
        with torch.profiler.record_function(_PHASES[0]):
            out = fn(*args, **kwargs)
            loss = _loss(out) if backward else None
        with torch.profiler.record_function(_PHASES[1]):
            if loss is not None:
                loss.backward()
        del out, loss
    try:
        events = prof.profiler.kineto_results.events()
    except AttributeError:
        return Measured(None, None, None)
    ns = bool(events) and hasattr(events[0], "start_ns")

    def start(e) -> int:
        return e.start_ns() if ns else e.start_us() * 1000

    marks = [start(e) for e in events if e.name() == _PHASES[1]]
    if not marks:
        return Measured(None, None, None)
    boundary = marks[0]
    mem = sorted((start(e), e.nbytes()) for e in events
                 if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
    total, fwd, after, bwd = 0, 0, None, 0
    for t, nbytes in mem:
        if t >= boundary and after is None:
            after = bwd = total
        total += nbytes
        if after is None:
            fwd = max(fwd, total)
        else:
            bwd = max(bwd, total)
    if after is None:
        after = bwd = total
    return Measured(fwd, bwd if backward else None, after)
