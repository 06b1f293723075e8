"""Lesson 05's explorer and recorded results: explorer(), record and targets, and the two shapes they
name. `python -m lessons_lib.record` imports this module and reads `record`, `targets` and LESSON."""
from __future__ import annotations

import dataclasses

import torch

from .. import launch_queue, results, roofline
from .. import device as _device
from ..widgets import Explorer
from .evidence import host_dispatch, model_step
from .lessons import LESSON
from .on_gpu import gpu_lesson, graphed_callables_ratio


def _model_metrics(gpu: str):
    """Explorer metrics: the launch model's prediction for this shape on a named GPU (labelled model)."""
    def metrics(_fn, x, w, *_rest) -> dict[str, float]:
        p = {"batch": x.shape[0], "width": x.shape[1], "layers": w.shape[0]}
        m = model_step(p, gpu)
        return {f"{gpu} model: eager ÷ graphed (×, predicted)": m.speedup,
                f"{gpu} model: GPU idle in eager (%, predicted)": 100 * (1 - m.eager_utilization)}
    return metrics


def explorer(device=None, gpu: str = "T4") -> Explorer:
    """The explorer: on a GPU, eager vs graphed (vs reduce-overhead) measured; on any machine, the
    launch model's prediction for `gpu` (a preset: T4, A100, H100) beside it, labelled predicted."""
    dev = _device.pick(device)
    launch_queue.preset(gpu)  # refuses an unknown GPU now, with the names it knows
    lesson = dataclasses.replace(gpu_lesson(dev), metrics=_model_metrics(gpu))
    return Explorer(lesson, dev)


# --- recorded results ---------------------------------------------------------------------------------

OVERHEAD_BOUND = {"width": 256, "batch": 64, "layers": 8}  # the model: eager ≫ graphed on every preset
COMPUTE_BOUND = {"width": 4096, "batch": 16384, "layers": 2}  # the model: within a few % on every preset


def record(device, quick: bool = False) -> dict:
    """Measured only: eager (and on a GPU graphed, reduce-overhead) at the overhead-bound and the
    compute-bound shapes, capture cost; a width sweep of eager. Model figures are not stored here."""
    dev = torch.device(device)
    t = 0.05 if quick else 0.2
    out: dict = {"dispatch_s": host_dispatch()}
    lesson = gpu_lesson(dev)
    shapes = {"overhead_bound": OVERHEAD_BOUND} if dev.type != "cuda" or quick else \
        {"overhead_bound": OVERHEAD_BOUND, "compute_bound": COMPUTE_BOUND}
    pk = roofline.measure_peaks(dev)
    for label, shape in shapes.items():
        run = lesson.run(shape, dev, min_run_time=t)
        out[label] = {**results.run_to_dict(run, pk), "prepare_s": run.prepare_seconds}
    out["headline"] = results.run_to_dict(lesson.run(LESSON.defaults(dev), dev, min_run_time=t), pk)
    widths = [64, 256] if quick else [64, 256, 1024, 4096]
    out["sweeps"] = {"width": results.sweep_to_dict(lesson.sweep("width", widths, None, dev, min_run_time=t / 2,
                                                                 progress=False))}
    if dev.type == "cuda" and not quick:
        r = graphed_callables_ratio(512, device=dev, min_run_time=t)
        if isinstance(r, dict):
            out["seed_ratio_512"] = {"params": r["params"], "ratio": r["ratio"]}
    return out


def targets(device, section: dict) -> list[dict]:
    """The course's bars for this lesson that a recorded GPU section can speak to."""
    out = []
    ob, cb = section.get("overhead_bound", {}), section.get("compute_bound", {})
    for label, data, bar, test in (("graph speed-up, overhead-bound step", ob, ">= 2", lambda s: s >= 2),
                                   ("graph change, compute-bound step", cb, "within 10%", lambda s: abs(s - 1) < 0.1)):
        v = data.get("variants", {})
        if "CUDA graph" in v and "eager" in v:
            s = v["eager"]["median"] / v["CUDA graph"]["median"]
            out.append({"name": label, "value": s, "bar": bar, "ok": bool(test(s))})
    return out
