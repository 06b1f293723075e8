"""Lesson 01's explorer and recorded results: LESSON (the explorer's declaration), explorer(), record and
targets. `python -m lessons_lib.record` imports this module and reads LESSON, `record` and `targets`."""
from __future__ import annotations

import torch

from .. import results, roofline
from ..lesson import Lesson, Param, Variant
from ..widgets import Explorer
from .variants import THREAD_SHAPE, broadcast_matmul, einsum, folded_mm, loop, make_inputs, stacked_bmm


def peak_bytes(p: dict, dtype) -> int:
    """The broadcast variant's peak: inputs, both expanded copies, the bmm output and the sum."""
    m, i, b, e = p["num_modules"], p["num_inputs"], p["batch_size"], p["embed_dims"]
    inputs = i * b * e + m * e * e + m * e
    extra = m * i * b * e + m * i * e * e + 2 * m * i * b * e
    return (inputs + extra) * torch.empty(0, dtype=dtype).element_size()


LESSON = Lesson(
    key="01_broadcast_matmul",
    title="Broadcast matmul vs loop",
    params=[
        Param("num_modules", "modules", cpu=12, gpu=12, lo=1, hi=256),
        Param("num_inputs", "inputs", cpu=13, gpu=13, lo=1, hi=512),
        Param("batch_size", "batch size", cpu=16, gpu=16, lo=1, hi=4096),
        Param("embed_dims", "embedding dims", cpu=256, gpu=512, lo=1, hi=8192),
    ],
    variants=[
        Variant("broadcast matmul", broadcast_matmul, "seed 000's batched version"),
        Variant("loop", loop, "seed 000's loop over modules"),
        Variant("einsum", einsum, "one GEMM, weight viewed"),
        Variant("stacked bmm", stacked_bmm, "one batched GEMM, x expanded as a view"),
        Variant("folded mm", folded_mm, "one GEMM: (inputs·batch) × E @ E × (modules·E)"),
    ],
    make_inputs=make_inputs,
    peak_bytes=peak_bytes,
    reduction=lambda p: p["embed_dims"],
    baseline="broadcast matmul",
    compare=("broadcast matmul", "loop"),
    odd_shapes=[
        {"num_modules": 7, "num_inputs": 5, "batch_size": 3, "embed_dims": 33},
        {"num_modules": 1, "num_inputs": 1, "batch_size": 1, "embed_dims": 1},
        {"num_modules": 3, "num_inputs": 2, "batch_size": 9, "embed_dims": 17},
    ],
)


def explorer(device=None) -> Explorer:
    return Explorer(LESSON, device)


# --- recorded results ---------------------------------------------------------------------

SWEEPS_GPU = {"num_modules": [1, 2, 4, 8, 12, 16, 32, 64], "embed_dims": [64, 128, 256, 512, 1024, 2048],
              "num_inputs": [1, 2, 4, 8, 13, 26, 52]}
# num_inputs: the notebook's "one input to many" question, replayed from here (too slow to sweep live on a CPU)
SWEEPS_CPU = {"num_modules": [1, 2, 4, 8, 12, 16], "embed_dims": [32, 64, 128, 256, 512], "num_inputs": [1, 2, 4, 8, 16]}


def record(device, quick: bool = False) -> dict:
    """This lesson's section of the recorded results: the seed shape, and two sweeps."""
    dev = torch.device(device)
    t = 0.05 if quick else 0.3
    peaks = roofline.measure_peaks(dev)
    head = LESSON.run(THREAD_SHAPE, dev, min_run_time=t)
    sweeps = SWEEPS_GPU if dev.type == "cuda" else SWEEPS_CPU
    if quick:
        sweeps = {"num_modules": sweeps["num_modules"][:3]}
    out = {"headline": results.run_to_dict(head, peaks), "sweeps": {}}
    for param, values in sweeps.items():
        sw = LESSON.sweep(param, values, THREAD_SHAPE if dev.type == "cuda" else None, dev, min_run_time=t / 2,
                          progress=False)
        out["sweeps"][param] = results.sweep_to_dict(sw)
    return out


def targets(device, section: dict) -> list[dict]:
    """This lesson's bars, as measured in its recorded section (see record.targets)."""
    import time

    out = []
    head = section.get("headline")
    gpu = torch.device(device).type == "cuda"
    if head:
        v = head["variants"]
        speedup = v["broadcast matmul"]["median"] / v["einsum"]["median"]
        out.append({"name": "01 einsum speed-up over broadcast matmul at the thread's shape", "value": speedup,
                    "bar": ">= 3.1 (GPU claim, roofline-derived)", "ok": speedup >= 3.1 if gpu else None})
        if "floor" in v["einsum"]:
            ratio = v["einsum"]["median"] / v["einsum"]["floor"]
            out.append({"name": "01 einsum time / floor at the thread's shape", "value": ratio,
                        "bar": "<= 2.2 (GPU, roofline-derived)", "ok": ratio <= 2.2 if gpu else None})
    ex = explorer(device)
    ex.run()  # the first run pays for peak measurement and warm-up
    t0 = time.perf_counter()
    ex.run()
    rerun = time.perf_counter() - t0
    out.append({"name": "01 explorer rerun at the default shape (s)", "value": rerun, "bar": "<= 2 (CPU)",
                "ok": rerun <= 2 if not gpu else None})
    return out
