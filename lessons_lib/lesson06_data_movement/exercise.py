"""Lesson 06's exercise: the starter, the float64 reference and the checker."""
from __future__ import annotations

import math

import torch

from .. import device as _device
from .. import grading, roofline
from ..grading import Verdict, analyse_reader, call_for_tensor, call_reader, rel_error
from ..syncs import syncs
from ..trace import trace_ops

# A data-preparation step: scale each piece by its own largest magnitude and join the pieces. The
# starter reads every scale on the host (.item(): a sync per piece) and grows the result with
# torch.cat in the loop (bytes copied grow as n²). Rewrite it with no host sync and bytes copied
# linear in the number of pieces, giving the same values.


def exercise_starter(*pieces):
    out = pieces[0].new_empty(0, pieces[0].shape[1])
    for p in pieces:
        scale = p.abs().max().item()  # a host sync per piece
        out = torch.cat([out, p / max(scale, 1e-6)])  # re-copies everything so far
    return out


def exercise_reference(*pieces):
    return torch.cat([p.double() / p.double().abs().max().clamp_min(1e-6) for p in pieces])


EXERCISE_SHAPES = [(8, 4, 16), (5, 3, 7), (1, 1, 1), (17, 2, 33)]  # (pieces, rows, cols)
EXERCISE_GROWTH = (16, 64)  # pieces counts for the growth checks
EXERCISE_PIECE = (4, 32)


def _exercise_pieces(n, rows, cols, gen, device="cpu"):
    return tuple((torch.randn(rows, cols, generator=gen) * (1 + i % 3)).to(device) for i in range(n))


def check_exercise(fn) -> Verdict:
    """Grade the rewrite: float64 correctness at odd shapes, zero host syncs inside the loop (the count
    must not grow with the number of pieces), and bytes copied linear in n (trace)."""
    v = Verdict(f"Exercise 06 ({getattr(fn, '__name__', 'your function')})")
    if not callable(fn):
        v.check("is a function", False, f"got {type(fn).__name__}; pass your function itself, e.g. my_prepare")
        return v
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for n, rows, cols in EXERCISE_SHAPES:
        pieces = _exercise_pieces(n, rows, cols, gen)
        ref = exercise_reference(*pieces)  # from the pieces before the reader's code runs
        out, problem = call_for_tensor(fn, *pieces, shape=ref.shape)
        if problem:
            v.check(f"runs and returns ({n}·rows, cols) for {n} pieces of {rows} × {cols}", False, problem)
            return v
        worst = max(worst, rel_error(out, ref))
    v.check(f"matches the float64 reference at {len(EXERCISE_SHAPES)} shapes (odd ones included)", worst < 1e-5,
            "NaN or inf in the output" if worst == math.inf else (f"worst relative error {worst:.1e}" if worst >= 1e-5 else ""))

    counts = {}
    for n in EXERCISE_GROWTH:
        pieces = _exercise_pieces(n, *EXERCISE_PIECE, gen)
        report, problem = call_reader(lambda *p: syncs(fn, *p), *pieces)
        if problem:
            v.check("can be run under the sync detector", False, problem)
            return v
        counts[n] = report
    a, b = (counts[n] for n in EXERCISE_GROWTH)
    lines = ", ".join(f"{k} ×{c}" for k, c in b.lines().items())
    v.check("no host sync inside the loop (the count does not grow with the pieces)",
            len(b.syncs) <= len(a.syncs) and len(b.syncs) <= 1,
            f"{len(a.syncs)} sync{'s' if len(a.syncs) != 1 else ''} for {EXERCISE_GROWTH[0]} pieces, {len(b.syncs)} for "
            f"{EXERCISE_GROWTH[1]}: {lines}"
            if b.syncs else "")

    copied = {}
    for n in EXERCISE_GROWTH:
        def inputs(device, n=n):
            g = torch.Generator().manual_seed(n)
            return _exercise_pieces(n, *EXERCISE_PIECE, g, device)

        t, _where, problem = analyse_reader(lambda *p: trace_ops(fn, *p), inputs, check_inputs=True)
        if problem:
            v.check(grading.check_name(problem, "can be traced"), False, problem)
            return v
        copied[n] = t.copied_bytes
    growth = copied[EXERCISE_GROWTH[1]] / max(copied[EXERCISE_GROWTH[0]], 1)
    linear = EXERCISE_GROWTH[1] / EXERCISE_GROWTH[0]
    v.check(f"bytes copied grow linearly with the pieces (×{linear:g} pieces → at most ×{1.25 * linear:g} bytes)",
            growth <= 1.25 * linear,  # 25% slack for a fixed-size extra copy; quadratic growth is ×16
            f"×{growth:.1f} ({_device.fmt_bytes(copied[EXERCISE_GROWTH[0]])} → "
            f"{_device.fmt_bytes(copied[EXERCISE_GROWTH[1]])})")
    if _device.has_cuda():
        v.on_gpu(*speed_check(fn, torch.device("cuda")))
    else:
        v.on_gpu(f"at least {GPU_SPEEDUP_BAR:g}× faster than the starter at {GPU_SPEED_SHAPE[0]} pieces", None)
    return v


# On a GPU the exercise is also timed, at 256 pieces of 256 × 1024 float32 (1 MiB each), against GPU_SPEEDUP_BAR.
# `speed_model` predicts the ratio: BOTH sides issue four ops a piece from the host (the starter adds a sync a
# piece, about two ops' worth), the starter's quadratic cat bytes (69 GB, 17 ms at 85% of 4.8 TB/s) partly hide
# under its own next launches, and the solution's 1.3 GB take 0.3 ms: the solution is host-bound. Its constants are
# measured apart from this exercise: the host's cost per op (HOST_OP: roofline.ASSUMED_LAUNCH, a one-element add on
# the H200's host, 7.3 µs) and a copy's share of the bandwidth (COPY_EFFICIENCY). At them it predicts 3.3× on an H200
# (4.3× on an H100, 35× on a T4); the H200 measured 2.27× (the claim test, median of 5 paired rounds, IQR
# 2.25-2.30×, 2026-11-26): the model 45% high. As the host slows the ratio falls towards the same four ops a piece
# plus the starter's syncs, 6/4 (`slow_host_limit`: 1.50× at 256 pieces), never below it.
# GPU_SPEEDUP_BAR = 1.5 is a REGRESSION bar from a measured run, not a prediction: it was set after the H200 measured
# 2.27×, and it sits at the model's slow-host limit. History: the first model (bytes over bandwidth PLUS 5 µs a
# launch) said ≈4.3× and the bar was 3×; after the H200's 2.27× the host cost was doubled to make the model fit (2.2×)
# and the bar was taken from that fit over a margin (1.73×, rounded down to 1.5×).
HOST_OP = roofline.ASSUMED_LAUNCH["H200"]  # host seconds per eager op, measured on the H200's host
COPY_EFFICIENCY = 0.85  # of datasheet bandwidth (the H200 measured 4.07 TB/s of 4.8 for a large copy: h200.json)


def speed_model(bandwidth: float, host_op: float = HOST_OP, shape: tuple | None = None) -> tuple[float, float]:
    """Modelled seconds (starter, one-cat solution) on a GPU with `bandwidth` bytes/s (datasheet) and `host_op`
    host seconds per eager op. Starter, per piece i: abs and max queued (2 ops), `.item()` waits for them and
    for the previous piece's cat (a sync costs about two ops of host time: the read and the wait), then the
    division and the cat (i MiB read and written) are queued: the cat's GPU time hides under the next piece's
    first two launches only. Solution: four ops a piece and one cat from the host (torch.cat's host time grows
    by ~0.2 µs per input: the H200 recorded 60 µs for 256), the GPU's 5 bytes a piece-byte overlapped."""
    n, rows, cols = shape or GPU_SPEED_SHAPE
    piece, bw = rows * cols * 4, bandwidth * COPY_EFFICIENCY
    sync = 2 * host_op
    starter = 0.0
    for i in range(1, n + 1):
        gpu = (5 * piece + 2 * i * piece) / bw  # abs, max, division; the cat reads i pieces' bytes and writes them
        starter += 4 * host_op + sync + max(0.0, gpu - 2 * host_op)
    host = 4 * n * host_op + host_op + 0.2e-6 * n
    solution = max(host, (5 * n * piece + 2 * n * piece) / bw)
    return starter, solution


def predicted_ratio(gpu: str = "H200", host_op: float = HOST_OP) -> float:
    """`speed_model`'s starter over solution on `gpu` (datasheet bandwidth) at `host_op` host seconds per op."""
    starter, solution = speed_model(roofline.DATASHEET[gpu][4] * 1e9, host_op)
    return starter / solution


def slow_host_limit(gpu: str = "H200") -> float:
    """What `speed_model` tends to on `gpu` as the host's cost per op grows: both sides' ops a piece, the starter's
    syncs included (1.50× at 256 pieces). The bar sits here; it is not a prediction."""
    return predicted_ratio(gpu, 1.0)  # one second an op: the host is all there is


GPU_SPEEDUP_BAR = 1.5
GPU_SPEED_SHAPE = (256, 256, 1024)  # pieces, rows, cols
# The starter's call the checker may time (speed_model at the GPU's datasheet bandwidth): a comparison needs 10 paired
# rounds of ~10 calls. At 256 pieces a T4's starter is ~0.27 s a call: 10 rounds ~26 s, past the checker's 20 s, so
# a T4 could never pass; at 128 pieces ~74 ms (~10 s). The solution is still ~10x faster there (the bar is 1.5x).
SPEED_CALL_S = 0.08


def gpu_speed_shape(device) -> tuple:
    """GPU_SPEED_SHAPE, halving the pieces (to 64 at least) while the starter's modelled call on this GPU's datasheet
    bandwidth (roofline.DATASHEET; an unknown GPU keeps 256) is over SPEED_CALL_S."""
    dev = torch.device(device)
    peaks = roofline.datasheet(torch.cuda.get_device_name(dev)) if dev.type == "cuda" else None
    n, rows, cols = GPU_SPEED_SHAPE
    while peaks is not None and n > 64 and speed_model(peaks.bandwidth, 2 * HOST_OP, (n, rows, cols))[0] > SPEED_CALL_S:
        n //= 2
    return n, rows, cols


def speed_check(fn, device, shape: tuple | None = None, max_time: float = 20.0) -> tuple[str, bool, str]:
    """(name, ok, detail): `fn` against the starter on `shape` (pieces, rows, cols) on `device`, in paired,
    alternating rounds (`grading.speed_check`). The checker calls it on a CUDA GPU at `gpu_speed_shape` (by default:
    GPU_SPEED_SHAPE, fewer pieces on a slow GPU); the tests call it small, on a CPU and on the simulated GPU."""
    device = torch.device(device)
    shape = shape or gpu_speed_shape(device)
    gen = torch.Generator().manual_seed(2)
    pieces = _exercise_pieces(*shape, gen, device)
    return grading.speed_check(f"at least {GPU_SPEEDUP_BAR:g}× faster than the starter at {shape[0]} pieces",
                               lambda: exercise_starter(*pieces), lambda: fn(*pieces), GPU_SPEEDUP_BAR, device,
                               max_time)
