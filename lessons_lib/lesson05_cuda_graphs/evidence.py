"""Lesson 05's launch model: the kernels of one training step (traced on meta), this host's dispatch
(measured), ModelStep (eager and graph-replayed, on a named GPU's datasheet), its timelines, curves and
summary, and the cap on what a graph can gain. Model figures, never measurements."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .. import launch_queue, noise, plots, roofline, timing
from .. import device as _device
from ..display import count
from ..timing import fmt_time
from ..trace import on_meta, trace_ops
from .lessons import LESSON, MODEL_BATCH, MODEL_LAYERS, _shape, make_inputs
from .variants import eager_step, linear_step


# --- the launch model -------------------------------------------------------------------------------


def step_kernels(params: dict, kind: str = "PseudoLinear", dtype=torch.float32) -> list[tuple[str, int, int]]:
    """(op, FLOPs, bytes) of every aten op that does work in one training step, from its trace on meta
    (nothing allocated). These are ops, not kernels: on CUDA each launches at least one kernel, and some
    more (select_backward is a zero fill and a copy: two). The launch model counts one kernel per op,
    so it under-counts launches."""
    full = LESSON.check(params, "cpu", dtype, memory=False)
    x, w, b, g = on_meta(*make_inputs(full, torch.device("meta"), dtype))
    if kind == "Linear":
        W = torch.empty(full["layers"], full["width"], full["width"], device="meta", dtype=dtype, requires_grad=True)
        t = trace_ops(linear_step, x, W, b, g)
    elif kind == "PseudoLinear":
        t = trace_ops(eager_step, x, w, b, g)
    else:
        raise ValueError(f"kind must be 'PseudoLinear' or 'Linear', got {kind!r}.")
    return [(op.name, op.flops, op.accessed_bytes) for op in t.compute_ops]


# ops that launch more than one CUDA kernel (checked with torch.profiler on 2.13: select_backward calls
# zeros -> fill_ and copy_); the rest launch one, as far as the course has checked.
MULTI_KERNEL_OPS = {"select_backward": 2}


def kernels_at_least(ops: list[tuple]) -> int:
    """A lower bound on the CUDA kernels these ops launch."""
    return sum(MULTI_KERNEL_OPS.get(name, 1) for name, *_ in ops)


_DISPATCH: dict = {}


def dispatch_estimate() -> noise.Estimate:
    """This host's cost of one tiny eager op (torch.add of one-element tensors, the harness's median),
    re-measured until the rounds agree (noise.settle); cached. The model's only measured input."""
    if "cpu" not in _DISPATCH:
        one = torch.ones(1)
        _DISPATCH["cpu"] = noise.settle(
            lambda: timing.measure(torch.add, one, one, label="per-op overhead", min_run_time=0.05, max_time=1.0,
                                   device="cpu").median,
            rounds=3, max_rounds=7, max_time=3.0)
    return _DISPATCH["cpu"]


def host_dispatch() -> float:
    """Seconds PyTorch spends on one eager op on this host (the median of `dispatch_estimate`; on a GPU
    host the launch comes on top, from the model)."""
    return dispatch_estimate().median


@dataclass
class ModelStep:
    """The launch model for one training step on a named GPU: model figures, not measurements."""

    params: dict
    gpu: str
    kind: str
    dispatch: float  # host seconds per eager op (measured here)
    kernels: list[tuple[str, float]]  # (op, device seconds)
    eager: launch_queue.Timeline  # one step, for drawing
    graphed: launch_queue.Timeline
    eager_s: float  # steady state, seconds per step
    graphed_s: float

    @property
    def speedup(self) -> float:
        return self.eager_s / self.graphed_s

    @property
    def eager_utilization(self) -> float:
        return min(1.0, sum(t for _n, t in self.kernels) / self.eager_s)

    def __str__(self) -> str:
        return (f"model ({self.gpu} datasheet, {fmt_time(self.dispatch)} dispatch per op measured here): "
                f"{self.kind} step at {_shape(self.params)}, {count(len(self.kernels), 'op')} (one kernel each in the "
                f"model): eager {fmt_time(self.eager_s)}, graphed {fmt_time(self.graphed_s)} per step "
                f"(predicted {self.speedup:.2f}×)")


def model_step(params: dict, gpu: str = "T4", kind: str = "PseudoLinear", dispatch: float | None = None,
               preset: launch_queue.Preset | None = None) -> ModelStep:
    """Predict one training step, eager and as a graph replay, on `gpu` (a preset name)."""
    p = preset or launch_queue.preset(gpu)
    dispatch = host_dispatch() if dispatch is None else dispatch
    kernels = [(name, p.kernel_seconds(f, nb)) for name, f, nb in step_kernels(params, kind)]
    eager_ops = launch_queue.eager_ops(kernels, dispatch, p)
    graph_ops = launch_queue.graph_ops(kernels, p)
    return ModelStep(dict(params), p.name, kind, dispatch, kernels, launch_queue.schedule(eager_ops),
                     launch_queue.schedule(graph_ops), launch_queue.per_step(eager_ops),
                     launch_queue.per_step(graph_ops))


def gpu_model(params: dict, device="cuda", kind: str = "PseudoLinear") -> ModelStep:
    """On a GPU: the model with this host's measured cost of a tiny CUDA op (launch included, so no
    assumed launch cost on top) and this GPU's datasheet (T4's when the GPU has no preset)."""
    dev = torch.device(device)
    p = dataclasses.replace(launch_queue.preset(_preset_for(dev)), kernel_launch=0.0)
    return model_step(params, p.name, kind, dispatch=roofline.overhead(dev), preset=p)


def timeline_figure(params: dict, gpu: str = "T4", dispatch: float | None = None):
    """One step's eager and graph-replayed timelines, one above the other (model)."""
    m = model_step(params, gpu, dispatch=dispatch)
    unit = "µs" if m.eager.total < 2e-3 else "ms"
    return plots.timeline({"eager": m.eager, "CUDA graph": m.graphed}, unit=unit,
                          title=f"Model, not a measurement: {m.kind} training step on a {gpu} (datasheet), "
                                f"{_shape(params)}\nhost issues (blue), GPU runs (green), GPU idle (red)")


def speedup_curve(widths, batch: int = MODEL_BATCH, layers: int = MODEL_LAYERS, gpu: str = "T4",
                  dispatch: float | None = None) -> dict[str, list[float]]:
    """Predicted (model) figures over width: each kind's graphed/eager speed-up and the thread's
    quantity, PseudoLinear's speed-up over Linear, eager and graphed."""
    dispatch = host_dispatch() if dispatch is None else dispatch
    out: dict[str, list[float]] = {k: [] for k in ("graphs: PseudoLinear", "graphs: Linear",
                                                   "Linear ÷ PseudoLinear, eager", "Linear ÷ PseudoLinear, graphed")}
    for n in widths:
        p = {"width": n, "batch": batch, "layers": layers}
        pl, li = model_step(p, gpu, "PseudoLinear", dispatch), model_step(p, gpu, "Linear", dispatch)
        out["graphs: PseudoLinear"].append(pl.speedup)
        out["graphs: Linear"].append(li.speedup)
        out["Linear ÷ PseudoLinear, eager"].append(li.eager_s / pl.eager_s)
        out["Linear ÷ PseudoLinear, graphed"].append(li.graphed_s / pl.graphed_s)
    return out


# --- what the model says: the cap on a graph's gain, the speed-up curve, the summary ----------------


def graph_gain_cap(dispatch: float | None = None, gpu: str = "T4") -> float:
    """The most a graph can speed up a step in the model: per kernel, the eager host cost (dispatch +
    launch) over what a replay still costs the device (the shortest kernel + the graph's gap), or
    the stream's gap over the graph's when the device is the bottleneck."""
    p = launch_queue.preset(gpu)
    dispatch = host_dispatch() if dispatch is None else dispatch
    return max((dispatch + p.kernel_launch) / (p.kernel_min + p.graph_gap),
               (p.kernel_min + p.stream_gap) / (p.kernel_min + p.graph_gap))


def graphs_speedup_figure(gpu: str = "T4", batch: int = MODEL_BATCH, dispatch: float | None = None):
    import matplotlib.pyplot as plt

    widths = [16, 64, 256, 1024, 4096, 16384]
    c = speedup_curve(widths, batch, MODEL_LAYERS, gpu, dispatch)
    fig = plots.lines(widths, {k: v for k, v in c.items() if k.startswith("graphs")}, xlabel="width (features)",
                      ylabel="eager ÷ graphed step time (×)",
                      title=f"Predicted by the launch model ({gpu} datasheet, batch {batch}): not measured")
    fig.axes[0].axhline(1, color="gray", lw=0.8)
    fig.axes[0].xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _pos: f"{v:g}"))
    return fig


def _regime(speedup: float) -> str:
    if speedup > 1.5:
        return ("Here the host sets the pace: the GPU idles between kernels, and one graph launch removes most of the "
                "host's cost.")
    if speedup < 1.1:
        return "Here the kernels set the pace: the host is ahead, and a graph changes little."
    return "Here host and kernels take comparable time: a graph helps, modestly."


def model_summary(params: dict, gpu: str = "T4", dispatch: float | None = None) -> str:
    """What the model says at `params`, in words that follow its numbers. With the measured dispatch
    (dispatch=None) the regime is stated only if it is the same at both ends of the measurement's
    inter-quartile range (the noise rule); a given dispatch is taken as exact."""
    m = model_step(params, gpu, dispatch=dispatch)
    busy = sum(t for _n, t in m.kernels)
    lines = [str(m),
             f"The kernels of its {count(len(m.kernels), 'op')} keep the GPU busy for {fmt_time(busy)} a step; eager, "
             f"the host needs {fmt_time(len(m.kernels) * (m.dispatch + launch_queue.KERNEL_LAUNCH))} to issue them."]
    if dispatch is None:
        est = dispatch_estimate()
        ends = {_regime(model_step(params, gpu, dispatch=d).speedup) for d in (est.low, est.high)}
        lines.append(ends.pop() if len(ends) == 1 and est.decided else
                     "Which regime: " + est.not_decided() + " (the measured dispatch spans more than one regime)")
    else:
        lines.append(_regime(m.speedup))
    return "\n".join(lines)


# --- the preset that names this GPU ---------------------------------------------------------------------


def _preset_for(dev: torch.device) -> str:
    """The preset that names this GPU, or T4 (Colab's) when it is unknown or there is none."""
    if dev.type == "cuda":
        name = _device.describe(dev).name
        for key in sorted(roofline.DATASHEET, key=len, reverse=True):
            if key.lower() in name.lower():
                return key
    return "T4"
