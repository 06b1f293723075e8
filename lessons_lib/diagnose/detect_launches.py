"""Lessons 04, 05 and 06 §2: ops that could be fewer. Elementwise chains, a launch-bound step, a for-loop
optimizer, a batch gathered one row at a time, a loss computed one time step at a time.

Evidence, from the op trace with its tags (torch.Tag.pointwise, torch.Tag.reduction):
- a chain: a run of consecutive pointwise or reduction ops in one forward and one function of the reader's (views
  between them do not break it, anything else does), each consuming what an earlier op of the chain wrote (ops
  side by side, eight parameter updates say, are no chain), with at least MIN_CHAIN of them writing a tensor the
  size of the run's largest (a loss's few scalars do not count). torch.compile fuses such a run into one kernel
  (04 §3a). Ops CUDA already runs fused, as foreach or compiled (fused.py: phase "fused"), and ops a library's own
  code dispatches (a distribution's argument checks) are not the reader's chain;
- a launch-bound step: by the model, the named GPU's floor for the step is its launches (roofline.Peaks.regime),
  and one CUDA graph of the step (launch_queue.graph_ops) would at least halve its eager time: decided from the
  model, however few the launches; the model then says what fusing the chains and a CUDA graph would leave;
- a for-loop optimizer: its step dispatched no foreach or fused op, at least one op per parameter, and on CUDA it
  would still loop (foreach=False asked for, or differentiable=True); torch's default runs as foreach on CUDA
  (_default_to_fused_or_foreach), so a default optimizer is no finding on a GPU. Or, written by hand outside
  torch.optim, ops that each write one parameter in place (p.sub_, p.add_, p.copy_, whatever the op), at least
  one a parameter for two parameters or more, a step: what the loop does, not how it is spelt;
- rows gathered one at a time: a stack or cat right after at least MIN_ROWS single-row selects (nothing but views
  and host reads between them: x[j] with j a 0-dim index reads j, then selects), wherever the selects are written
  (inline, or in a Dataset's __getitem__), on device tensors (a DataLoader's own collation is data loading);
- a loss per time step: at one line, MIN_LOSSES or more calls of one loss function on inputs of one shape in one
  step's forward, their results combined (stacked or added) for one backward: each call is its own kernels,
  forward and backward, where one call over the stacked time steps is one.
"""
from __future__ import annotations

import math

from ..display import count, number
from .costs import DISPATCH, HOST_PER_OP, Kernel, b, kernels, per_step, saved_at_peak, t
from .report import Finding, a_gpu

MIN_CHAIN = 5  # elementwise ops in a row that write the run's largest tensor
GRAPH_GAIN = 2  # launch-bound: one CUDA graph of the step would at least halve it (by the model)
MIN_ROWS = 8
MIN_LOSSES = 4  # loss calls at one line, in one step, before they are a loop over time steps
_NOT_FUSED = ("clone", "contiguous", "_to_copy", "copy_", "cat", "stack")
_LOSS_NAMES = {"nll_loss_forward": "nll_loss (or cross_entropy)", "nll_loss2d_forward": "nll_loss (or cross_entropy)"}
_COMBINE = ("stack", "cat", "add", "add_", "sum", "mean")  # how losses are put together for one backward
LOSS_OPS = ("nll_loss_forward", "nll_loss2d_forward", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
            "binary_cross_entropy", "binary_cross_entropy_with_logits", "soft_margin_loss", "kl_div")


def chains(ev, phase: str = "forward", min_len: int = 2) -> list[list[int]]:
    """Chains of fusible ops (pointwise or reduction, not copies) in a row within one phase, step and function of
    the reader's (what torch.compile of that function would fuse), each op consuming an earlier one's output."""
    runs, run, key = [], [], None
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if op.is_view:
            continue
        fusible = (info.pointwise or info.reduction) and info.phase == phase and not op.gemm \
            and op.name not in _NOT_FUSED and not info.lib
        here = (info.phase, info.step, op.where.file if op.where else "", op.where.function if op.where else "")
        if fusible and (not run or here == key):
            run.append(i)
            key = here
            continue
        runs.append(run)
        run, key = ([i], here) if fusible else ([], None)
    runs.append(run)
    return [c for r in runs if len(r) >= min_len for c in _connected(ev, r) if len(c) >= min_len]


def _connected(ev, run: list[int]) -> list[list[int]]:
    """The run split into the groups whose ops feed one another (an op joins the group of each earlier op in the
    run whose output it reads), each in order."""
    parent = {i: i for i in run}

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    writer: dict = {}
    for i in run:
        for k in ev.info[i].ins:
            if k in writer:
                parent[root(i)] = root(writer[k])
        for k in ev.info[i].writes:
            writer[k] = i
    groups: dict[int, list[int]] = {}
    for i in run:
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


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
    saved_by = saved_at_peak(ev)
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
    if not ks or gpu.peaks.regime(work) != "overhead" or gpu.eager(ks) < GRAPH_GAIN * gpu.graph(ks):
        return []
    terms = gpu.peaks.terms(work)
    drop = {i for ph in ("forward", "backward") for r in chains(ev, ph) for i in r[1:]}
    fused = len(drop)
    eager_s = gpu.eager(ks, syncs_after) / ev.steps
    compiled = [k for k in ks if k.index not in drop]
    compiled_s = gpu.eager(compiled, syncs_after) / ev.steps
    graph_s = gpu.graph(ks) / ev.steps
    forward = [k.index for k in ks if ev.info[k.index].phase == "forward" or (
        ev.info[k.index].region is not None and ev.info[k.index].region[1] == "forward")]
    where = _hottest(ev, forward or [k.index for k in ks])
    blocked = f" (first remove the {count(per_step(len(syncs_after), ev.steps), 'host sync')} a step: " \
              "capture refuses them)" if syncs_after else ""
    done = sorted({n for n in ev.fused.values() if n.startswith("torch.compile")})
    compile_fix = (f"{', '.join(done)} already: torch.compile(mode='reduce-overhead') replays it as a CUDA graph"
                   if done else "torch.compile for the elementwise chains" if fused else "")
    return [Finding(
        "launch-bound step", where,
        f"{count(per_step(len(ks), ev.steps), 'kernel launch')} a step against {work.flops / ev.steps / 1e9:.3g} GFLOP and "
        f"{b(work.bytes / ev.steps)}: floors compute {t(terms['compute'] / ev.steps)}, memory "
        f"{t(terms['memory'] / ev.steps)}, launches {t(terms['overhead'] / ev.steps)} "
        f"({gpu.peaks.regime_words(work)}); this line launches the most of them",
        f"{t(eager_s)} a step eager"
        + (f"; torch.compile fusing {count(fused // ev.steps, 'elementwise op')} away: {t(compiled_s)}" if fused else "")
        + f"; one CUDA graph of the step: {t(graph_s)} — {gpu.label}",
        f"a CUDA graph of the whole step (lessons_lib.graphs.capture, torch.compile(mode='reduce-overhead')){blocked}; "
        + (f"{compile_fix}; " if compile_fix else "") + "a bigger batch per step",
        {"launches": len(ks) / ev.steps, "eager_s": eager_s, "compiled_s": compiled_s, "graph_s": graph_s},
        eager_s - graph_s)]


def optimizer_loops(ev, gpu) -> list[Finding]:
    """torch.optim steps that loop over the parameters on CUDA too (foreach=False, or differentiable=True): a
    default optimizer runs as foreach there, and an optimizer with no foreach form (LBFGS) has none to ask for."""
    out = []
    for o in ev.optimizers:
        ops = [op for op in ev.trace.ops[o.first:o.last] if not op.is_view]
        loops_on_cuda = o.has_foreach and not o.fused and (o.foreach is False or (o.foreach is None and o.differentiable))
        if not loops_on_cuda or o.params < 2 or len(ops) < o.params or \
                any(op.name.startswith(("_foreach", "_fused")) for op in ops):
            continue
        per, rest = divmod(len(ops), o.params)
        out.append((o, len(ops), per if per and not rest else len({op.name for op in ops})))
    findings, seen = [], set()
    for o, n, kinds in out:
        key = (o.where.file, o.where.line)
        if key in seen:
            continue
        seen.add(key)
        calls = sum(1 for p in out if (p[0].where.file, p[0].where.line) == key)
        seconds = (n - kinds) * HOST_PER_OP * calls / ev.steps
        why = "foreach=False was asked for" if o.foreach is False else "differentiable=True has no foreach form"
        fused = " or fused=True" if o.name in ("SGD", "Adam", "AdamW", "Adagrad") else ""
        findings.append(Finding(
            "for-loop optimizer", o.where,
            f"{o.name}.step(): {count(n, 'op')} for {count(o.params, 'parameter')} ({number(n / o.params, 2)} each), "
            f"no foreach or fused op; a for loop on {a_gpu(gpu.name)} too ({why})",
            f"{t(seconds)} a step of host time on the for loop's extra launches ({number(n)} against about "
            f"{count(kinds, 'foreach op')}) — model: {HOST_PER_OP * 1e6:g} µs per launch, assumed",
            f"torch.optim.{o.name}(params, ...) without foreach=False (torch's default is foreach on CUDA{fused}): "
            "one op per update for all parameters",
            {"ops": n, "params": o.params}, seconds))
    return findings


def hand_written_updates(ev, gpu) -> list[Finding]:
    """Parameters updated one op each, outside torch.optim (whose steps optimizer_loops judges)."""
    ops = [i for i, info in enumerate(ev.info) if info.phase != "optimizer" and len(info.updates) == 1 and not info.lib]
    params = {info.updates[0] for info in (ev.info[i] for i in ops)}
    if len(params) < 2 or len(ops) < len(params):
        return []
    where = _hottest(ev, ops)
    names = sorted({ev.trace.ops[i].name for i in ops})
    kinds = len(names)
    seconds = (len(ops) - kinds * ev.steps) * HOST_PER_OP / ev.steps
    if all(ev.info[i].plain_update for i in ops):  # p -= lr * grad: torch.optim.SGD's own update, no momentum
        fix = ("torch.optim.SGD(params, lr=lr) built once, before the loop (set its param_groups' lr when yours "
               "changes): the same update, p -= lr * grad, which CUDA runs as foreach: one launch for all "
               "parameters")
    else:
        fix = ("the torch.optim optimizer that makes this update (SGD with its momentum and weight decay, Adam...), "
               "with your update's hyperparameters, built once before the loop: CUDA runs it as foreach, one launch "
               "for all parameters")
    return [Finding(
        "for-loop optimizer", where,
        f"a hand-written update: {count(per_step(len(ops), ev.steps), 'in-place write')} a step ({', '.join(names)}), "
        f"each into one of {count(len(params), 'parameter')}, no foreach or fused op; one launch per parameter on "
        "every device",
        f"{t(seconds)} a step of host time on the loop's extra launches ({number(per_step(len(ops), ev.steps))} "
        f"against about {count(kinds, 'foreach op')}) — model: {HOST_PER_OP * 1e6:g} µs per launch, assumed",
        fix, {"ops": len(ops) / ev.steps, "params": len(params)}, seconds)]


def row_gathers(ev, gpu) -> list[Finding]:
    lines: dict = {}
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if op.name not in ("stack", "cat") or info.phase != "forward" or op.where is None or info.lib \
                or (ev.device != "cpu" and op.device == "cpu"):  # data loading, or host rows: not the GPU's work
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


def _combined(ev, i: int) -> bool:
    """Op i's result is stacked or added to others (read by one of _COMBINE before its memory is made anew)."""
    key = ev.info[i].outs[0] if ev.info[i].outs else None
    for j in range(i + 1, len(ev.info)):
        if key in ev.info[j].ins and ev.trace.ops[j].name in _COMBINE:
            return True
        if key in ev.info[j].outs:  # its memory freed and reused: another tensor from here on
            return False
    return False


def losses_per_step(ev, gpu) -> list[Finding]:
    """A loss function called at one line for each time step, on inputs of one shape, its results combined."""
    by: dict = {}
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if op.name in LOSS_OPS and info.phase == "forward" and op.where is not None and not info.lib \
                and info.step < ev.backward_calls and _combined(ev, i):
            by.setdefault((op.where.file, op.where.line, info.step, op.in_shapes), []).append(i)
    out, seen = [], set()
    for (file, line, _s, shapes), idx in by.items():
        if len(idx) < MIN_LOSSES or (file, line) in seen:
            continue
        seen.add((file, line))
        n = sum(len(v) for (f, ln, _s2, _sh), v in by.items() if (f, ln) == (file, line))
        at_line = [i for i, op in enumerate(ev.trace.ops) if op.where is not None and (op.where.file, op.where.line)
                   == (file, line) and not op.is_view and ev.info[i].phase in ("forward", "backward")]
        per_loss = max(1, len(at_line) // max(n, 1))  # the loss's kernels each time, forward and backward
        seconds = (n - ev.steps) * per_loss * HOST_PER_OP / ev.steps
        op = ev.trace.ops[idx[0]]
        shape = " and ".join("x".join(map(str, s)) or "scalar" for s in shapes[:2])
        out.append(Finding(
            "loss per time step", op.where,
            f"{count(per_step(n, ev.steps), 'call')} of {op.name} a step at this line, each on {shape} (one time "
            f"step, or one sample), their results combined for one backward: about {count(per_loss, 'kernel')} each, "
            "forward and backward",
            f"≥ {t(seconds)} a step of host time on the extra launches, against one call over every time step — "
            f"model: {HOST_PER_OP * 1e6:g} µs per launch, assumed",
            f"keep each time step's output and target (lists, torch.stack once each), then call "
            f"F.{_LOSS_NAMES.get(op.name, op.name)} once on the stacked tensors (reduction='sum' if the losses were "
            "added up; for a classifier, F.cross_entropy(logits.reshape(-1, n_classes), targets.reshape(-1)))",
            {"calls": n / ev.steps, "per_loss": per_loss}, seconds))
    return out
