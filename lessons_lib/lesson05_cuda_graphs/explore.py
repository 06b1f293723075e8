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
from .on_gpu import GraphParts, gpu_lesson, graph_parts, graphed_callables_ratio


def _model_metrics(gpu: str):
    """Explorer metrics: the launch model's prediction for this shape on a named GPU (labelled model)."""
    def metrics(_fn, x, w, *_rest) -> dict[str, float]:
        p = {"batch": x.shape[0], "width": x.shape[1], "layers": w.shape[0]}
        m = model_step(p, gpu)
        return {f"{gpu} model: eager ÷ graphed (×, predicted)": m.speedup,
                f"{gpu} model: GPU idle in eager (%, predicted)": 100 * (1 - m.eager_utilization)}
    return metrics


REPLAYED = ("CUDA graph", "reduce-overhead")  # variants whose timed call replays a graph


def replayed_work(params: dict, dtype=torch.float32) -> dict:
    """The work of the variants that replay a graph: the eager step's FLOPs and bytes, issued by the host with one
    graph launch. The op trace of their `fn` (eager_step) counts a launch per op: a floor drawn from it lies above
    the measured replay (38 launches, 272 µs on the H200's measured peaks, against 82 µs measured)."""
    eager = LESSON.work(params, dtype)["eager"]
    return {name: dataclasses.replace(eager, launches=1) for name in REPLAYED}


def _with_replayed_work(run):
    """A run whose graph variants' work (floors and regimes) is replayed_work's."""
    run.work.update({n: w for n, w in replayed_work(run.params, getattr(torch, run.dtype)).items() if n in run.timings})
    return run


def replay_floor(params: dict, peaks: roofline.Peaks) -> float:
    """The launch model's step replayed as one graph (evidence.model_step), on `peaks` (a record's measured peaks:
    its host cost per op as the dispatch, launch included): one host launch, then the eager step's kernels back to
    back on the device, each at least launch_queue.KERNEL_MIN plus GRAPH_GAP. A model figure, not a measurement:
    the H200's replays of 38 and 78 kernels took 82 and 152 µs against its 47.5 and 97.5 µs."""
    preset = launch_queue.Preset("recorded peaks", peaks.flops, peaks.bandwidth, peaks.source, kernel_launch=0.0)
    return model_step(params, kind="PseudoLinear", dispatch=peaks.launch, preset=preset).graphed_s


def model_rows(section: dict) -> dict:
    """A recorded section (results.run_to_dict) with each replayed variant's model fields as the launch model
    computes them: `kernels` (the eager step's, one per op), `floor` (replay_floor on the section's peaks) and
    `regime` (overhead: set by the kernels' count, not their FLOPs or bytes). The measured fields stay as they are."""
    if not any(name in section["variants"] for name in REPLAYED):
        return section
    peaks = roofline.Peaks(**{k: section["peaks"][k] for k in ("flops", "bandwidth", "launch", "source")}, cuda=True)
    kernels = LESSON.work(section["params"], getattr(torch, section["dtype"]))["eager"].launches
    floor = replay_floor(section["params"], peaks)
    for name in REPLAYED:
        row = section["variants"].get(name)
        if row is not None:
            row.update({"kernels": kernels, "floor": floor, "regime": "overhead"})
    return section


def explorer(device=None, gpu: str = "T4") -> Explorer:
    """The explorer: on a GPU, eager vs graphed (vs reduce-overhead) measured; on any machine, the
    launch model's prediction for `gpu` (a preset: T4, A100, H100) beside it, labelled predicted."""
    dev = _device.pick(device)
    launch_queue.preset(gpu)  # refuses an unknown GPU now, with the names it knows
    lesson = dataclasses.replace(gpu_lesson(dev), metrics=_model_metrics(gpu))
    return Explorer(lesson, dev, work_of=replayed_work)


# --- recorded results ---------------------------------------------------------------------------------

OVERHEAD_BOUND = {"width": 256, "batch": 64, "layers": 8}  # the model: eager ≫ graphed on every preset
# Long kernels: 18 elementwise ops of up to 768 MiB each (5.5 GiB a step, no FLOPs to speak of: memory-bound),
# about 1.8 ms a step on an H100's datasheet while the host issues them in about 0.1 ms. The kernels set the
# pace (not compute): the model puts the graph's gain within 1% on every preset.
KERNEL_BOUND = {"width": 4096, "batch": 16384, "layers": 2}


def record(device, quick: bool = False) -> dict:
    """Measured only: eager (and on a GPU graphed, reduce-overhead) at the overhead-bound and the
    kernel-bound shapes, capture cost, and at the kernel-bound shape the replay and the input copies apart;
    a width sweep of eager. Model figures are not stored here (copies_model is the bytes' ratio)."""
    dev = torch.device(device)
    t = 0.05 if quick else 0.2
    out: dict = {"dispatch_s": host_dispatch()}
    lesson = gpu_lesson(dev)
    shapes = {"overhead_bound": OVERHEAD_BOUND} if dev.type != "cuda" or quick else \
        {"overhead_bound": OVERHEAD_BOUND, "kernel_bound": KERNEL_BOUND}
    pk = roofline.measure_peaks(dev)
    for label, shape in shapes.items():
        run = _with_replayed_work(lesson.run(shape, dev, min_run_time=t))
        out[label] = {**model_rows(results.run_to_dict(run, pk)), "prepare_s": run.prepare_seconds}
    out["headline"] = model_rows(results.run_to_dict(
        _with_replayed_work(lesson.run(LESSON.defaults(dev), dev, min_run_time=t)), pk))
    widths = [64, 256] if quick else [64, 256, 1024, 4096]
    out["sweeps"] = {"width": results.sweep_to_dict(lesson.sweep("width", widths, None, dev, min_run_time=t / 2,
                                                                 progress=False))}
    if dev.type == "cuda" and not quick:
        parts = graph_parts(KERNEL_BOUND, dev)
        if isinstance(parts, GraphParts):
            out["kernel_bound"]["parts"] = {"replay": parts.replay.median, "with_copies": parts.with_copies.median,
                                            "copies_model": parts.copies_model}
        r = graphed_callables_ratio(512, device=dev, min_run_time=t)
        if isinstance(r, dict):
            out["seed_ratio_512"] = {"params": r["params"], "ratio": r["ratio"], "left_eager": r["left_eager"]}
    return out


def targets(device, section: dict) -> list[dict]:
    """The course's bars for this lesson that a recorded GPU section can speak to."""
    out = []
    v = section.get("overhead_bound", {}).get("variants", {})
    if "CUDA graph" in v and "eager" in v:
        s = v["eager"]["median"] / v["CUDA graph"]["median"]
        out.append({"name": "graph speed-up, overhead-bound step", "value": s, "bar": ">= 2", "ok": bool(s >= 2)})
    parts = section.get("kernel_bound", {}).get("parts")
    if parts:  # the claim tests' bars: the replay within 10% of no change, the copies within 10% of their bytes' model
        r, c, m = parts["replay"], parts["with_copies"], parts["copies_model"]
        out.append({"name": "graph replay, kernel-bound step", "value": r, "bar": "within 10% of 1",
                    "ok": bool(1 / 1.1 <= r <= 1.1)})
        out.append({"name": "graph replay + input copies, kernel-bound step", "value": c,
                    "bar": f"within 10% of {m:.2f} (bytes)", "ok": bool(m / 1.1 <= c <= m * 1.1)})
    return out
