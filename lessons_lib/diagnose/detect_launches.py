"""Lessons 04 and 05: ops that could be fewer. Elementwise chains, a launch-bound step, a for-loop optimizer, a
batch gathered one row at a time.

Evidence, from the op trace with its tags (torch.Tag.pointwise, torch.Tag.reduction):
- a chain: a run of consecutive pointwise or reduction ops in one forward and one function of the reader's (views
  between them do not break it, anything else does), with at least MIN_CHAIN of them writing a tensor the size of
  the run's largest (a loss's few scalars do not count). torch.compile fuses such a run into one kernel (04 §3a);
- a launch-bound step: on the named GPU the roofline's floor is its launches (roofline.Peaks.regime), with at
  least MIN_LAUNCHES of them a step; the model then says what fusing the chains (torch.compile) and replaying
  the step as one CUDA graph (launch_queue.graph_ops) would leave;
- a for-loop optimizer: its step dispatched no foreach or fused op, and at least one op per parameter; or, written
  by hand outside torch.optim, ops that each write one parameter in place (p.sub_, p.add_, p.copy_, whatever
  the op), at least one a parameter for two parameters or more, a step: what the loop does, not how it is spelt;
- rows gathered one at a time: a stack or cat right after at least MIN_ROWS single-row selects (nothing but views
  and host reads between them: x[j] with j a 0-dim index reads j, then selects), wherever the selects are written
  (inline, or in a Dataset's __getitem__).
"""
from __future__ import annotations

import math

from ..display import count, number
from .costs import DISPATCH, HOST_PER_OP, Kernel, b, kernels, per_step, t
from .report import Finding, a_gpu

MIN_CHAIN = 5  # elementwise ops in a row that write the run's largest tensor
MIN_LAUNCHES = 100  # launches a step, below which an overhead-bound step is just small
MIN_ROWS = 8
_NOT_FUSED = ("clone", "contiguous", "_to_copy", "copy_", "cat", "stack")


def chains(ev, phase: str = "forward", min_len: int = 2) -> list[list[int]]:
    """Runs of consecutive fusible ops (pointwise or reduction, not copies) within one phase, step and function of
    the reader's (what torch.compile of that function would fuse)."""
    out, run, key = [], [], None
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if op.is_view:
            continue
        fusible = (info.pointwise or info.reduction) and info.phase == phase and not op.gemm \
            and op.name not in _NOT_FUSED
        here = (info.phase, info.step, op.where.file if op.where else "", op.where.function if op.where else "")
        if fusible and (not run or here == key):
            run.append(i)
            key = here
            continue
        if len(run) >= min_len:
            out.append(run)
        run, key = ([i], here) if fusible else ([], None)
    if len(run) >= min_len:
        out.append(run)
    return out


def _times(n: float) -> str:
    return {1: "once", 2: "twice"}.get(n, count(n, "time"))


def _hottest(ev, idx: list[int]):
    """The line with the most of these ops (the first such, on a tie)."""
    tally: dict = {}
    for i in idx:
        w = ev.trace.ops[i].where
        tally[(w.file, w.line)] = tally.get((w.file, w.line), 0) + 1
    best = max(tally.values())
    return next(ev.trace.ops[i].where for i in idx if tally[(ev.trace.ops[i].where.file,
                                                             ev.trace.ops[i].where.line)] == best)


def elementwise_chains(ev, gpu) -> list[Finding]:
    groups: dict = {}
    for run in chains(ev, min_len=MIN_CHAIN):
        sizes = [math.prod(ev.trace.ops[i].out_shapes[0]) if ev.trace.ops[i].out_shapes else 0 for i in run]
        if sum(n == max(sizes) for n in sizes) < MIN_CHAIN:
            continue
        w = _hottest(ev, run)
        groups.setdefault((w.file, w.line, len(run)), []).append(run)
    saved_by = {}
    if ev.ledgers:
        snap = max(ev.ledgers, key=lambda s: s.ledger.total_bytes)
        for row, op_i in zip(snap.ledger.entries, snap.made_by):
            if op_i is not None and row.counted:
                saved_by[op_i] = saved_by.get(op_i, 0) + row.bytes
    out = []
    for (_f, _l, n), runs in groups.items():
        run = runs[0]
        ops = [ev.trace.ops[i] for i in run]
        ks = [Kernel(i, op.flops, op.accessed_bytes) for i, op in zip(run, ops)]
        fused_bytes = ops[0].read_bytes + ops[-1].write_bytes
        eager_s = gpu.eager(ks) * len(runs) / ev.steps
        fused_s = gpu.eager([Kernel(run[0], 0, fused_bytes)]) * len(runs) / ev.steps
        kept = [i for i in run if i in saved_by]
        lines = sorted({ev.trace.ops[i].where.line for i in run})
        w = _hottest(ev, run)
        span = f"lines {lines[0]}–{lines[-1]}" if len(lines) > 1 else f"line {lines[0]}"
        out.append(Finding(
            "elementwise chain", w,
            f"{count(n, 'elementwise op')} in a row ({span}, in {w.function}), {_times(per_step(len(runs), ev.steps))} a step: "
            f"{b(sum(op.accessed_bytes for op in ops))} read and written where one fused kernel would move about "
            f"{b(fused_bytes)}; {len(kept)} of their outputs kept for backward ({b(sum(saved_by[i] for i in kept))})",
            f"{t(eager_s)} a step as {count(n, 'kernel')}, against {t(fused_s)} fused (forward only) — {gpu.label}",
            f"one fused op: a built-in if one computes this (F.layer_norm, F.gelu(approximate='tanh'), F.silu...), "
            f"or torch.compile the function {w.function}() (it fuses the chain into one kernel, forward and backward)",
            {"ops": n, "times_per_step": len(runs) / ev.steps, "kept": len(kept)}, eager_s - fused_s))
    return out


def launch_bound(ev, gpu, syncs_after: set) -> list[Finding]:
    ks = kernels(ev)
    work = gpu.work(ks)
    if not ks or gpu.peaks.regime(work) != "overhead" or len(ks) / ev.steps < MIN_LAUNCHES:
        return []
    terms = gpu.peaks.terms(work)
    drop = {i for ph in ("forward", "backward") for r in chains(ev, ph) for i in r[1:]}
    fused = len(drop)
    eager_s = gpu.eager(ks, syncs_after) / ev.steps
    compiled = [k for k in ks if k.index not in drop]
    compiled_s = gpu.eager(compiled, syncs_after) / ev.steps
    graph_s = gpu.graph(ks) / ev.steps
    forward = [k.index for k in ks if ev.info[k.index].phase == "forward"]
    where = _hottest(ev, forward or [k.index for k in ks])
    blocked = f" (first remove the {count(per_step(len(syncs_after), ev.steps), 'host sync')} a step: " \
              "capture refuses them)" if syncs_after else ""
    return [Finding(
        "launch-bound step", where,
        f"{count(per_step(len(ks), ev.steps), 'kernel launch')} a step against {work.flops / ev.steps / 1e9:.3g} GFLOP and "
        f"{b(work.bytes / ev.steps)}: floors compute {t(terms['compute'] / ev.steps)}, memory "
        f"{t(terms['memory'] / ev.steps)}, launches {t(terms['overhead'] / ev.steps)} "
        f"({gpu.peaks.regime_words(work)}); this line launches the most of them",
        f"{t(eager_s)} a step eager; torch.compile fusing {count(fused // ev.steps, 'elementwise op')} away: "
        f"{t(compiled_s)}; one CUDA graph of the step: {t(graph_s)} — {gpu.label}",
        f"a CUDA graph of the whole step (lessons_lib.graphs.capture, torch.compile(mode='reduce-overhead')){blocked}; "
        "torch.compile for the elementwise chains; a bigger batch per step",
        {"launches": len(ks) / ev.steps, "eager_s": eager_s, "compiled_s": compiled_s, "graph_s": graph_s},
        eager_s - graph_s)]


def optimizer_loops(ev, gpu) -> list[Finding]:
    out = []
    for o in ev.optimizers:
        ops = [op for op in ev.trace.ops[o.first:o.last] if not op.is_view]
        if o.params < 2 or len(ops) < o.params or any(op.name.startswith(("_foreach", "_fused")) for op in ops):
            continue
        per, rest = divmod(len(ops), o.params)
        kinds = per if per and not rest else len({op.name for op in ops})  # ops a foreach step would run
        where_cost = ("a CPU-only cost: on CUDA, torch already defaults to foreach for it "
                      "(torch/optim/optimizer.py, _default_to_fused_or_foreach)" if o.foreach is None else
                      "on every device (foreach=False was asked for)")
        out.append((o, len(ops), kinds, where_cost))
    findings, seen = [], {}
    for o, n, kinds, where_cost in out:
        key = (o.where.file, o.where.line)
        if key in seen:
            continue
        seen[key] = True
        calls = sum(1 for p in out if (p[0].where.file, p[0].where.line) == key)
        seconds = (n - kinds) * HOST_PER_OP * calls / ev.steps
        fused = " or fused=True" if o.name in ("SGD", "Adam", "AdamW", "Adagrad") else ""
        on_gpu = f"none on {a_gpu(gpu.name)}, where it runs as foreach already; on a CPU: " if o.foreach is None else ""
        findings.append(Finding(
            "for-loop optimizer", o.where,
            f"{o.name}.step(): {count(n, 'op')} for {count(o.params, 'parameter')} ({number(n / o.params, 2)} each), "
            "no foreach or fused op; "
            f"{where_cost}",
            f"{on_gpu}{t(seconds)} a step of host time on the for loop's extra launches ({number(n)} against about "
            f"{count(kinds, 'foreach op')}) — model: {HOST_PER_OP * 1e6:g} µs per launch, assumed",
            f"torch.optim.{o.name}(params, ..., foreach=True{fused}): one op per update for all parameters",
            {"ops": n, "params": o.params, "cpu_only": o.foreach is None}, seconds))
    return findings


def hand_written_updates(ev, gpu) -> list[Finding]:
    """Parameters updated one op each, outside torch.optim (whose steps optimizer_loops judges)."""
    ops = [i for i, info in enumerate(ev.info) if info.phase != "optimizer" and len(info.updates) == 1]
    params = {info.updates[0] for info in (ev.info[i] for i in ops)}
    if len(params) < 2 or len(ops) < len(params):
        return []
    where = _hottest(ev, ops)
    names = sorted({ev.trace.ops[i].name for i in ops})
    kinds = len(names)
    seconds = (len(ops) - kinds * ev.steps) * HOST_PER_OP / ev.steps
    return [Finding(
        "for-loop optimizer", where,
        f"a hand-written update: {count(per_step(len(ops), ev.steps), 'in-place write')} a step ({', '.join(names)}), "
        f"each into one of {count(len(params), 'parameter')}, no foreach or fused op; one launch per parameter on "
        "every device",
        f"{t(seconds)} a step of host time on the loop's extra launches ({number(per_step(len(ops), ev.steps))} "
        f"against about {count(kinds, 'foreach op')}) — model: {HOST_PER_OP * 1e6:g} µs per launch, assumed",
        "torch.optim.SGD(params, lr, momentum=..., foreach=True or fused=True) built once, or torch._foreach_add_ "
        "over the lists of parameters and updates: one op for all of them",
        {"ops": len(ops) / ev.steps, "params": len(params), "cpu_only": False}, seconds)]


def row_gathers(ev, gpu) -> list[Finding]:
    lines: dict = {}
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if op.name not in ("stack", "cat") or info.phase != "forward" or op.where is None:
            continue
        rows = 0
        for j in range(i - 1, -1, -1):
            o = ev.trace.ops[j]
            if o.name == "select" and len(o.out_shapes[0]) == len(o.in_shapes[0]) - 1:
                rows += 1
            elif not (o.is_view or o.name == "_local_scalar_dense"):
                break
        if rows >= MIN_ROWS:
            lines.setdefault((op.where.file, op.where.line), []).append((op, rows))
    out = []
    for found in lines.values():
        rows = sum(r for _op, r in found)
        stack = found[0][0]
        seconds = rows * DISPATCH / ev.steps
        out.append(Finding(
            "row-by-row gather", stack.where,
            f"{count(per_step(rows, ev.steps), 'single-row indexing call')} and {number(per_step(len(found), ev.steps))} "
            f"{stack.name} a step to build a batch of {stack.out_shapes[0][0]} rows, all host work",
            f"≥ {t(seconds)} a step of host dispatch, where one gather is one op — model: {DISPATCH * 1e6:g} µs a "
            "call assumed (the Python around each call costs more)",
            "x[idx] with idx a tensor of row numbers, on the device (torch.randperm(n, device=...) sliced per step): "
            "one gather for the whole batch",
            {"rows": rows / ev.steps}, seconds))
    return out
