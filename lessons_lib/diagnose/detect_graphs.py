"""Lessons 05, 06 §5 and 07: CUDA-graph capture hazards (when asked), a graph built for nothing, a graph kept
alive across steps.

- Capture hazards come from graph_check (graph_hazards.py), run on a fresh copy of the step when the reader asks
  (graphs=True): it is a second run, with its own watchers. Its values on meta are stand-ins (meta_reads), so
  a `.item()` does not stop it.
- A graph built for nothing: no backward ran, tensors were saved for one, and the step returns no graph and keeps
  none: every op recorded history and saved inputs that nobody will use (torch.inference_mode skips both).
- A graph kept alive: kept.py's evidence: tensors with a graph, made during the call, still alive after it, held
  outside the return value (a list, an attribute, a global) or, in it, spanning two steps or more; or alive in a
  list at a later step of the same call.
"""
from __future__ import annotations

import contextlib

from ..code_lines import Where
from ..graph_report import FAILS
from ..trace import OpTrace, _Recorder, meta_reads
from ..display import count
from .costs import b, per_step
from .report import Finding


def capture_hazards(step, ev, skip_optimizer: bool = False) -> tuple[list[Finding], object]:
    """graph_check on `step` (a fresh Step): its hazards as findings, and its GraphReport. skip_optimizer: leave
    out what it saw at the optimizer's step (a fused optimizer that meta ran as foreach: not the reader's)."""
    from ..graph_hazards import graph_check

    if step.module:
        def call(*args, **kwargs):
            from .inputs import backward_of_sum

            backward_of_sum(step.fn(*args, **kwargs))
        fn = call
    else:
        fn = step.fn
    on_meta = step.device == "meta"
    with (meta_reads() if on_meta else contextlib.nullcontext()), \
            (_Recorder(OpTrace()) if on_meta else contextlib.nullcontext()):  # it serves meta's stand-in values
        report = graph_check(fn, *step.args, **step.kwargs)
    lines = {}
    for op in ev.trace.ops:
        if op.where is not None:
            lines.setdefault(op.where.text, op.where)
    for _at, _e, w, _s, _p in ev.sync_at:
        lines.setdefault(w.text, w)
    steps = {o.where.text for o in ev.optimizers} if skip_optimizer else set()
    out = []
    for h in report.hazards:
        if h.where in steps:
            continue
        where = lines.get(h.where, Where("?", 0, h.where))
        effect = "capture fails (or a replay cannot run)" if h.effect == FAILS else \
            "captures, but every replay keeps what capture saw"
        out.append(Finding("capture hazard", where, f"{h.kind}: {h.what} — {h.why}", effect, h.fix,
                           {"hazard": h.kind, "effect": h.effect}))
    return out, report


def graph_for_nothing(ev, gpu) -> list[Finding]:
    n, nbytes, first = ev.packed
    if ev.backward_calls or not n or ev.returns_graph or ev.kept or first < 0:
        return []
    where = ev.trace.ops[first].where
    return [Finding(
        "graph built for nothing", where,
        f"{count(n, 'tensor')} ({b(nbytes)}) saved for a backward that never ran, from this line on; every op also "
        "recorded autograd history",
        f"memory: {b(nbytes)} held while the step runs; and autograd's bookkeeping on every op — {gpu.label}",
        "run it under torch.inference_mode() (or torch.no_grad()): nothing is saved, nothing recorded",
        {"saved": n, "bytes": nbytes})]


def kept_graphs(ev, gpu) -> list[Finding]:
    out = []
    for k in ev.kept:
        if k.across:
            how = ("held in a list and still alive at a later step of this call (a loop that appends each step's "
                   "loss): every step's graph stays until the list goes")
        elif not k.returned:
            how = "held outside the return value (a list, an attribute, a global)"
        elif k.steps > 1:
            how = f"the step's return value keeps them in one graph across {k.steps} steps (a running total, a stack)"
        else:
            how = "the step's return value keeps each step's graph, after its backward ran (a list of the losses)"
        out.append(Finding(
            "graph kept alive", k.where,
            f"{count(k.tensors, 'tensor')} made here {'is' if k.tensors == 1 else 'are'} alive "
            f"{'at a later step' if k.across else 'after the call'} "
            f"with {'its graph' if k.tensors == 1 else 'their graphs'}: {how}; "
            f"{count(k.nodes, 'graph node')}, {b(k.saved_bytes)} still saved for backward"
            + (f", from {count(k.steps, 'step')}" if k.steps > 1 and not k.returned else ""),
            f"memory that grows with every step: the nodes, and everything they saved until their backward ran "
            f"({b(k.saved_bytes)} now)",
            "keep loss.detach() (a device tensor without a graph), or loss.item() when you log; "
            "for a running total: total += loss.detach()",
            {"tensors": k.tensors, "nodes": k.nodes, "saved_bytes": k.saved_bytes, "steps": k.steps}))
    return out
