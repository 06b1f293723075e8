"""Lesson 02's explorer and recorded results: LESSON (the explorer's declaration: a training step, with
memory metrics), explorer(), record, targets and the recorded reproductions. `python -m lessons_lib.record`
imports this module and reads LESSON, `record` and `targets`."""
from __future__ import annotations

import time

import torch

from .. import memory, results, roofline
from ..lesson import Lesson, Param, Variant
from ..widgets import Explorer
from .evidence import expanded_copy_bytes, measure_reproduction, step_memory, thread_inputs
from .variants import bmm_3d, broadcast_matmul, checkpointed, custom_function, einsum, make_inputs, train_step


def peak_bytes(p: dict, dtype) -> int:
    """The worst variant's step (posted or checkpointed), inputs included: the saved copy and the
    expanded gradient of W alive together, plus a few activation-sized tensors."""
    e = dtype.itemsize
    B, G, D = p["batch"], p["groups"], p["dim"]
    act, w = B * G * D * e, G * D * D * e
    return 2 * expanded_copy_bytes(p, dtype) + 6 * act + 3 * w


LESSON = Lesson(
    key="02_autograd_memory",
    title="Memory autograd keeps for a grouped matmul",
    params=[
        Param("batch", "batch size", cpu=256, gpu=8192, lo=1, hi=65536),
        Param("groups", "groups", cpu=8, gpu=8, lo=1, hi=64),
        Param("dim", "dims per group", cpu=64, gpu=64, lo=1, hi=512),
    ],
    variants=[
        Variant("broadcast matmul", broadcast_matmul, "seed 004 as posted"),
        Variant("einsum", einsum, "one bmm over the groups"),
        Variant("3-D bmm", bmm_3d, "the same bmm, written by hand"),
        Variant("custom Function", custom_function, "explicit backward, saves only x and W"),
        Variant("checkpointed", checkpointed, "posted version, recomputed in backward"),
    ],
    make_inputs=make_inputs,
    peak_bytes=peak_bytes,
    # the output and dx sum over dim; dW sums over the batch
    reduction=lambda p: max(p["dim"], p["batch"]),
    baseline="broadcast matmul",
    compare=("broadcast matmul", "einsum"),
    odd_shapes=[
        {"batch": 5, "groups": 3, "dim": 7},
        {"batch": 1, "groups": 1, "dim": 1},
        {"batch": 33, "groups": 2, "dim": 17},
    ],
    step=train_step,
    metrics=step_memory,
)


def explorer(device=None) -> Explorer:
    return Explorer(LESSON, device)


# --- recorded results ----------------------------------------------------------------------------------

SWEEP_GPU = [512, 1024, 2048, 4096, 8192, 16384]
SWEEP_CPU = [64, 128, 256, 512, 1024]


def record(device, quick: bool = False) -> dict:
    """This lesson's recorded results: a headline run with memory metrics, a batch sweep, and on a
    GPU the thread's experiment measured with memory_allocated()."""
    dev = torch.device(device)
    t = 0.05 if quick else 0.3
    shape = LESSON.defaults(dev)
    if quick and dev.type != "cuda":
        shape = {**shape, "batch": 128}
    head = LESSON.run(shape, dev, min_run_time=t)
    out = {"headline": results.run_to_dict(head, roofline.measure_peaks(dev))}
    out["headline"]["metrics"] = head.metrics
    values = SWEEP_GPU if dev.type == "cuda" else SWEEP_CPU
    if quick:
        values = values[:2]
    sw = LESSON.sweep("batch", values, shape, dev, min_run_time=t / 2, progress=False)
    out["sweeps"] = {"batch": {**results.sweep_to_dict(sw), "metrics": sw.metric_series()}}
    m = head.metrics
    out["claims"] = {
        "forward peak ratio, broadcast matmul / einsum": m["broadcast matmul"]["forward peak (MiB)"]
        / m["einsum"]["forward peak (MiB)"],
        "saved for backward, broadcast matmul (MiB)": m["broadcast matmul"]["saved for backward (MiB)"],
    }
    repro = measure_reproduction(dev)
    if repro:
        out["reproduce"] = repro
    return out


def targets(device, section: dict) -> list[dict]:
    """This lesson's bars (see record.targets): timings that unit tests must not judge on a busy machine.

    The meta analysis of the thread's full shape (ledger of a 1 GiB saved copy, nothing allocated) takes
    at most 1 s (the median of 5 tries, after torch's one-off meta set-up), on any machine."""
    import statistics

    x, W = thread_inputs()
    memory.ledger(broadcast_matmul, *thread_inputs({"batch": 8, "groups": 2, "dim": 4}))  # one-off set-up
    tries = []
    for _ in range(5):
        t0 = time.perf_counter()
        memory.ledger(broadcast_matmul, x, W)
        tries.append(time.perf_counter() - t0)
    value = statistics.median(tries)
    return [{"name": "02 meta ledger of the thread's full shape (s)", "value": value, "bar": "<= 1 (any machine)",
             "ok": value <= 1.0}]


def recorded_reproductions() -> list[tuple[str, dict]]:
    """(label, the thread's experiment) from every recorded GPU file that has it: measured with the
    course harness, or reported in the thread (the label says which)."""
    return [(f"{rec.label()} ({rec.conditions(LESSON.key)})", rec.lesson(LESSON.key)["reproduce"])
            for rec in results.for_lesson(LESSON.key, gpu_only=True) if "reproduce" in rec.lesson(LESSON.key)]

