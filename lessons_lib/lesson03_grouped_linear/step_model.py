"""Lesson 03's GPU step model: where each batched strategy's training step should land on a GPU, predicted from
microbenchmarks measured apart from the step (DESIGN.md, "Predict, then measure").

At the thread's shape (batch 8, 100 groups of 100, length 512: 4096 rows) a batched step is 3 batched GEMMs of
8.2 GFLOP and a few elementwise kernels; traced on meta it moves 1.5 GiB (channels-first matmul) to 2.6 GiB (bmm
rows first, einsum). On an A100, H100 or H200 its memory bound is about its compute bound (the ridge), and the
roofline floor (0.37 ms on an H200) is far below what GEMMs with K = 100 reach: the H200 ran the best step at 3.6×
it. So the claim is not "near the floor" but "where the microbenchmarks put it".

The model: the step's kernels one after another (one stream), each GEMM at the time one GEMM of its shape takes
alone, every other kernel (and baddbmm's bias copy) at its bytes over a large copy's bandwidth
(microbench.serial_seconds). Two forms of it:
- `predict(device)`: on the GPU at hand, each GEMM shape and the copy measured there and then. The claim test
  calls it BEFORE it times the steps.
- `step_model(gpu)`: on a named GPU's datasheet, with the efficiencies the H200's microbenchmarks measured
  (H200_MEASURED, the GPU probe of 2026-11-26, call1-probes.log lines 11-12): GEMM_EFFICIENCY, the FLOP/s of one
  GEMM at the channels-first forward's shape over the fp32 peak (28%), every GEMM at it; MEMORY_EFFICIENCY, a
  156 MiB copy's bandwidth over the datasheet's (73%). Neither is fitted to a step: the steps the same probe timed
  are what the model is tested against (`h200_errors`). On another GPU the two efficiencies are an assumption.

History: until 2026-11-27 the efficiencies (40% and 75%) were FITTED to the H200's step, the claim's bar was
1.25× that fit, and it moved three times after GPU results; the fit was 19% fast for bmm rows first.
"""
from __future__ import annotations

import dataclasses

import torch

from .. import microbench, roofline, timing
from ..display import text_table
from .lessons import THREAD_SHAPE, TRAIN_LESSON

STEP_VARIANTS = ("bmm, rows first", "matmul, channels first", "einsum")
# Measured on an NVIDIA H200 (torch 2.11.0+cu130, CUDA 13.0), 2026-11-26, by .ci/gpu-probes/
# lesson03_tf32_and_step_model.py, alone on the GPU: CUDA events, the median of 10 calls, at the thread's shape.
H200_MEASURED = {
    "date": "2026-11-26",
    "gemm_ms": 0.430, "gemm_peak_share": 0.28,  # bmm batch 800 of 100×100 @ 100×512 (the channels-first forward)
    "copy_gbs": 3496, "copy_bandwidth_share": 0.73,  # a 156 MiB copy
    "step_ms": {"matmul, channels first": 1.335, "bmm, rows first": 2.095},  # the training step
    "conv_step_ms": {"TF32": 17.34, "full float32": 21.84},  # grouped Conv1d's training step, cuDNN's two settings
    "conv_error": {"TF32": 4.1e-4, "full float32": 2.0e-7},  # against float64 (tolerances 3.2e-02 and 3.2e-05)
}
_H200_FP32, _H200_GBS = roofline.DATASHEET["H200"][0] * 1e12, roofline.DATASHEET["H200"][4]
_GEMM_FLOPS = 2 * 800 * 100 * 100 * 512  # the microbenchmark's GEMM
GEMM_EFFICIENCY = _GEMM_FLOPS / (H200_MEASURED["gemm_ms"] * 1e-3) / _H200_FP32  # 0.284: measured, not fitted
MEMORY_EFFICIENCY = H200_MEASURED["copy_gbs"] / _H200_GBS  # 0.728: measured, not fitted


def _traces(params: dict | None, variants) -> dict:
    lesson = dataclasses.replace(TRAIN_LESSON, variants=[TRAIN_LESSON.variant(v) for v in variants])
    return lesson.traces({**THREAD_SHAPE, **(params or {})})


def _peaks(gpu) -> roofline.Peaks:
    peaks = gpu if isinstance(gpu, roofline.Peaks) else roofline.datasheet(gpu, torch.float32, tf32=False)
    if peaks is None:
        raise ValueError(f"No datasheet for {gpu!r}: name one of {sorted(roofline.DATASHEET)} or pass Peaks.")
    return peaks


def step_model(gpu, params: dict | None = None, variants=STEP_VARIANTS) -> dict[str, dict[str, float]]:
    """Per variant, its training step at the thread's shape (traced on meta) against `gpu` (a datasheet name, or
    `roofline.Peaks`), in seconds: `compute` and `memory`, the roofline's bounds of the whole step; `floor`, their
    max; `serial`, each kernel at its own roofline bound, one after another; `model`, the microbenchmark model
    with the H200's efficiencies (GEMMs at GEMM_EFFICIENCY of the fp32 peak, the rest at MEMORY_EFFICIENCY of the
    bandwidth). A model from peaks, not a measurement."""
    peaks = _peaks(gpu)
    out = {}
    for name, t in _traces(params, variants).items():
        terms = peaks.terms(roofline.Work.from_trace(t))
        ops = t.compute_ops
        gemms = {op.gemm: op.flops / (GEMM_EFFICIENCY * peaks.flops) for op in ops if op.gemm}
        out[name] = {"compute": terms["compute"], "memory": terms["memory"],
                     "floor": max(terms["compute"], terms["memory"], terms["overhead"]),
                     "serial": peaks.serial_time(t),
                     "model": microbench.serial_seconds(ops, gemms, MEMORY_EFFICIENCY * peaks.bandwidth)}
    return out


def predict(device="cuda", params: dict | None = None, variants=STEP_VARIANTS) -> dict:
    """The model on the GPU at hand, from microbenchmarks run here and now, before any step is timed: each GEMM
    shape of the variants' steps alone, and a large copy (roofline.measure_peaks). {"steps": {variant: seconds},
    "gemms": {(batch, m, n, k): seconds}, "bandwidth": bytes/s}."""
    traces = _traces(params, variants)
    gemms = microbench.gemm_table([op for t in traces.values() for op in t.compute_ops], device)
    bandwidth = roofline.measure_peaks(device, torch.float32).bandwidth
    steps = {n: microbench.serial_seconds(t.compute_ops, gemms, bandwidth) for n, t in traces.items()}
    return {"steps": steps, "gemms": gemms, "bandwidth": bandwidth}


def h200_errors() -> dict[str, float]:
    """Per variant the H200 timed, its measured step over the datasheet model's (1.0: exact; H200_MEASURED)."""
    model = step_model("H200", variants=tuple(H200_MEASURED["step_ms"]))
    return {n: ms * 1e-3 / model[n]["model"] for n, ms in H200_MEASURED["step_ms"].items()}


def step_model_table(gpus=(*roofline.MODEL_GPUS, "H200"), params: dict | None = None) -> str:
    """`step_model` as a table for a few GPUs: the regime at the thread's shape and the modelled time, then what
    the H200 measured at the thread's shape (H200_MEASURED), each figure labelled."""
    rows = [("GPU (model)", "variant", "compute", "memory", "floor", "kernels one by one", "model")]
    for gpu in gpus:
        for name, m in step_model(gpu, params).items():
            rows.append((gpu, name, *(timing.fmt_time(m[k]) for k in ("compute", "memory", "floor", "serial",
                                                                       "model"))))
    text = (text_table(rows) + "\ntraining step at the thread's shape, float32 without TF32, from datasheet peaks: "
            f"model = each GEMM at {GEMM_EFFICIENCY:.0%} of the fp32 peak, every other kernel at "
            f"{MEMORY_EFFICIENCY:.0%} of the bandwidth (what one GEMM and a copy reached on an H200), one after "
            "another; a model, not a measurement.")
    if params is None and "H200" in gpus:
        text += "\n\n" + h200_measured()
    return text


def h200_measured() -> str:
    """What an H200 measured at the thread's shape (H200_MEASURED) beside the model's figures: labelled measured."""
    m, model, err = H200_MEASURED, step_model("H200"), h200_errors()
    steps = "; ".join(f"{name} {ms:.3f} ms (model {model[name]['model'] * 1e3:.3f} ms, measured / model "
                      f"{err[name]:.2f})" for name, ms in m["step_ms"].items())
    conv = m["conv_step_ms"]
    best = min(m["step_ms"].values())
    return (f"measured (NVIDIA H200, {m['date']}, the course's GPU probe alone on the GPU, median of 10 calls):\n"
            f"  one batched GEMM, batch 800 of 100×100 @ 100×512: {m['gemm_ms']:.3f} ms, {m['gemm_peak_share']:.0%} of "
            f"the fp32 peak (the model's GEMM efficiency)\n"
            f"  a 156 MiB copy: {m['copy_gbs']} GB/s, {m['copy_bandwidth_share']:.0%} of the datasheet bandwidth "
            "(its memory efficiency)\n"
            f"  training step: {steps}\n"
            f"  grouped Conv1d's training step: {conv['TF32']:.1f} ms in TF32 (cuDNN's default), "
            f"{conv['full float32']:.1f} ms in full float32: {conv['TF32'] / best:.0f}× the fastest step above")
