"""Lesson 03: many small GEMMs of one shape, independent of each other, issued one by one from one line.

Evidence: in one step's forward, GEMMs dispatched from the same line of code with the same (batch, M, N, K),
where none descends from another of them (collect.py's ancestry: experts side by side, not layers in a row),
each too small to keep the GPU busy for as long as its launch takes (its roofline time under MAX_KERNEL).
Backward runs two GEMMs for each (the gradients of input and weight), so the loop costs three launches a GEMM.
"""
from __future__ import annotations

from .costs import Kernel, per_step, t
from .report import Finding

MIN_GROUP = 4  # independent GEMMs of one shape from one line, in one step
MAX_KERNEL = 10e-6  # a GEMM under this on the named GPU is small: its launch costs about as much as its work


def waves(ev) -> dict[tuple, list[list[int]]]:
    """{(file, line, gemm dims): [wave, ...]} per step: runs of forward GEMMs none of which descends from another."""
    groups: dict[tuple, dict[int, list[int]]] = {}
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if op.gemm and info.phase == "forward" and op.where is not None:
            groups.setdefault((op.where.file, op.where.line, op.gemm), {}).setdefault(info.step, []).append(i)
    out: dict[tuple, list[list[int]]] = {}
    for key, by_step in groups.items():
        for members in by_step.values():
            wave: list[int] = []
            for i in members:
                if wave and ev.info[i].after >= wave[0]:  # it descends from a GEMM of this wave: a new one begins
                    out.setdefault(key, []).append(wave)
                    wave = []
                wave.append(i)
            out.setdefault(key, []).append(wave)
    return out


def gemm_loops(ev, gpu) -> list[Finding]:
    out = []
    for (_file, _line, dims), ws in waves(ev).items():
        big = max(ws, key=len)
        if len(big) < MIN_GROUP:
            continue
        op = ev.trace.ops[big[0]]
        one = gpu.kernel(op.flops, op.accessed_bytes - op.lt_saved_bytes)
        if one > MAX_KERNEL:
            continue
        batch, m, n, k = dims
        g = len(big)
        per_wave = [Kernel(i, op.flops, op.accessed_bytes) for i in big]
        grouped = [Kernel(big[0], g * op.flops, g * op.accessed_bytes)]
        n_waves = sum(len(w) >= MIN_GROUP for w in ws)
        loop_s = 3 * gpu.eager(per_wave) * n_waves / ev.steps  # forward, and backward's two GEMMs per GEMM
        one_s = 3 * gpu.eager(grouped) * n_waves / ev.steps
        shape = f"{m}x{k} @ {k}x{n}" + (f" (batch {batch})" if batch > 1 else "")
        bias = op.name in ("addmm", "baddbmm")
        out.append(Finding(
            "GEMMs in a Python loop", op.where,
            f"{g} GEMMs of {shape} side by side ({op.name}, none fed by another) in "
            f"{per_step(n_waves, ev.steps)} group(s) a step: {per_step(3 * g * n_waves, ev.steps)} GEMM launches a "
            f"step with backward's, each {t(one)} of work on a {gpu.name}",
            f"{t(loop_s)} a step as {g} launches each way, against {t(one_s)} as one batched GEMM — {gpu.label}",
            f"lessons_lib.GroupedLinear(groups={g}, in_features={k}, out_features={n}, bias={bias}): one bmm for "
            "all groups (lesson 03 §4), or stack the weights and use torch.bmm / torch.einsum",
            {"gemms": g, "groups_per_step": n_waves / ev.steps, "m": m, "n": n, "k": k}, loop_s - one_s))
    return out
