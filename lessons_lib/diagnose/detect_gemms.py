"""Lesson 03: many small GEMMs of one shape, independent of each other, issued one by one from one line.

Evidence: in one step's forward, GEMMs dispatched from the same line of code with the same (batch, M, N, K),
where none descends from another of them (collect.py's levels: experts side by side, not layers in a row), each
with a weight of its own (one weight over micro-batches is a batch split on purpose, not lesson 03's loop),
each too small to keep the GPU busy for as long as its launch takes (its roofline time under MAX_KERNEL).
Backward runs two GEMMs for each (the gradients of input and weight), so the loop costs three launches a GEMM.
Experts run on routed tokens (rows picked by the data: collect.py's `routed`) have row counts that differ from
expert to expert (on meta a mask selects every row, so they agree there): they are grouped by their weights' shape
alone, and the fix is a grouped GEMM over tokens sorted by expert, not one bmm of equal slices.
"""
from __future__ import annotations

from ..display import count
from .costs import Kernel, per_step, t
from .report import Finding, a_gpu

MIN_GROUP = 4  # independent GEMMs of one shape from one line, in one step, each with its own weight
MAX_KERNEL = 10e-6  # a GEMM under this on the named GPU is small: its launch costs about as much as its work


def waves(ev) -> dict[tuple, list[list[int]]]:
    """{(file, line, gemm dims): [group, ...]}: forward GEMMs of one line, shape, step and level (collect.py), which
    descend from none of each other."""
    groups: dict[tuple, dict[tuple, list[int]]] = {}
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if op.gemm and info.phase == "forward" and info.level >= 0:
            b_, _m, n, k = op.gemm
            key = (op.where.file, op.where.line, (b_, -1, n, k) if info.routed else op.gemm)
            groups.setdefault(key, {}).setdefault((info.step, info.level), []).append(i)
    return {key: list(by.values()) for key, by in groups.items()}


def gemm_loops(ev, gpu) -> list[Finding]:
    out = []
    for (_file, _line, dims), ws in waves(ev).items():
        ws = [w for w in ws if len({ev.info[i].weight for i in w}) >= MIN_GROUP]  # one weight each: not micro-batches
        if not ws:
            continue
        big = max(ws, key=len)
        op = max((ev.trace.ops[i] for i in big), key=lambda o: o.flops)
        one = gpu.kernel(op.flops, op.accessed_bytes - op.lt_saved_bytes)
        if one > MAX_KERNEL:
            continue
        batch, m, n, k = dims
        g = len(big)
        ops = [ev.trace.ops[i] for i in big]
        per_wave = [Kernel(i, o.flops, o.accessed_bytes) for i, o in zip(big, ops)]
        grouped = [Kernel(big[0], sum(o.flops for o in ops), sum(o.accessed_bytes for o in ops))]
        rows = sorted({o.gemm[1] for o in ops})
        routed = m == -1
        n_waves = sum(len(w) >= MIN_GROUP for w in ws)
        each = 3 if ev.backward_calls else 1  # backward runs two GEMMs for each (grad of input, of weight)
        loop_s = each * gpu.eager(per_wave) * n_waves / ev.steps
        one_s = each * gpu.eager(grouped) * n_waves / ev.steps
        with_backward = " with backward's" if each == 3 else ""
        m = rows[-1] if routed else m
        shape = (f"{rows[0]}–{rows[-1]}" if len(rows) > 1 else f"{m}") + f"x{k} @ {k}x{n}" + \
            (f" (batch {batch})" if batch > 1 else "") + (" on rows the data routed to each" if routed else "")
        fix = (f"sort the tokens by expert (argsort of the expert ids) and run the {g} experts as one grouped GEMM: "
               "torch.nn.functional.grouped_mm where this torch and GPU have it (CUDA, bfloat16, sm80+), else a fixed "
               "capacity of rows per expert and one torch.bmm over all of them (lessons_lib.GroupedLinear's layout)"
               if routed else
               f"lessons_lib.GroupedLinear(groups={g}, in_features={k}, out_features={n}): one bmm for all groups "
               "(lesson 03 §4), or stack the weights and use torch.bmm / torch.einsum")
        out.append(Finding(
            "GEMMs in a Python loop", op.where,
            f"{count(g, 'GEMM')} of {shape} side by side ({op.name}, none fed by another) in "
            f"{count(per_step(n_waves, ev.steps), 'group')} a step: "
            f"{count(per_step(each * g * n_waves, ev.steps), 'GEMM launch')} a step{with_backward}, "
            f"each {t(one)} of work on {a_gpu(gpu.name)}",
            f"{t(loop_s)} a step as {count(g, 'launch')}{' each way' if each == 3 else ''}, against {t(one_s)} as one "
            f"{'grouped' if routed else 'batched'} GEMM — {gpu.label}",
            fix, {"routed": routed, "gemms": g, "groups_per_step": n_waves / ev.steps, "m": m, "n": n, "k": k}, loop_s - one_s))
    return out
