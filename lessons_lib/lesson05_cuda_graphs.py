"""Lesson 05: CUDA graphs, when launches and not maths set the speed (forum seed 003).

In seed 003 a reply wraps the small-layer model in `torch.cuda.make_graphed_callables`, and
PseudoLinear's speed-up over Linear at width 512 goes from 0.44× to 1.74× on their GPU. Lesson
04 measured why: every eager op pays a fixed host cost (dispatch, a kernel launch). When the
kernels are shorter than that cost, the GPU waits for the CPU; a graph replays every kernel of a
step with one launch, so the host cost is paid once.

Two layers, both real:
- on any machine: the launch model (launch_queue: the host's dispatch measured here, kernels'
  device time from their trace and a named GPU's datasheet), and `graphs.graph_check`, which
  finds what capture would refuse or freeze, with a catalogue of safe and unsafe functions;
- on a GPU: capture and replay by hand, `make_graphed_callables`, `torch.compile(mode=
  "reduce-overhead")`, each timed with the course harness, capture cost and memory separate.

Shapes: x (batch, width); w and b (layers, width); g, the upstream gradient, like x.
"""
from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from . import graphs, grading, launch_queue, noise, plots, results, roofline, timing
from . import device as _device
from .display import text_table
from .grading import Verdict
from .lesson import Lesson, Param, Variant
from .timing import fmt_time
from .trace import on_meta, trace_ops
from .widgets import Explorer

KEY = "05_cuda_graphs"
SEED_KEY = "04_launch_overhead"  # the thread's tables are stored once, with lesson 04's reported figures
MODEL_BATCH = 64  # the thread does not state the batch of its tables; the model assumes this one
MODEL_LAYERS = 4
REPORTED_WIDTHS = [128, 256, 512, 1024, 2048, 4096, 6144]


# --- the seed's model: a stack of PseudoLinear (or Linear) layers, one training step --------------


def pseudo_linear(x, w, b):
    """The thread's PseudoLinear per layer: x * w + b (two elementwise kernels)."""
    for l in range(w.shape[0]):
        x = x * w[l] + b[l]
    return x


def eager_step(x, w, b, g):
    """Forward and backward from the upstream gradient g: (output, dx, dw, db). `autograd.grad`
    returns the gradients instead of accumulating them, so repeated steps (and replays) add nothing."""
    out = pseudo_linear(x, w, b)
    return (out, *torch.autograd.grad(out, (x, w, b), g))


def linear_step(x, W, b, g):
    """The same with nn.Linear layers (F.linear: one GEMM with its bias per layer)."""
    out = x
    for l in range(W.shape[0]):
        out = F.linear(out, W[l], b[l])
    return (out, *torch.autograd.grad(out, (x, W, b), g))


def make_inputs(p: dict, device, dtype):
    """x ~ N(0, 1); w in [0.5, 1.5) so a deep stack neither explodes nor vanishes; all require grad."""
    B, N, L = p["batch"], p["width"], p["layers"]
    x = torch.randn(B, N, device=device, dtype=dtype).requires_grad_()
    w = (0.5 + torch.rand(L, N, device=device, dtype=dtype)).requires_grad_()
    b = (0.1 * torch.randn(L, N, device=device, dtype=dtype)).requires_grad_()
    g = torch.randn(B, N, device=device, dtype=dtype)
    return x, w, b, g


def peak_bytes(p: dict, dtype) -> int:
    """Training step: two saved activations a layer, x, g, the output and its gradients; a graph's
    static copies and private pool double that on a GPU."""
    e = torch.empty(0, dtype=dtype).element_size()
    B, N, L = p["batch"], p["width"], p["layers"]
    return 2 * e * ((2 * L + 6) * B * N + 6 * L * N)


PARAMS = [
    Param("width", "width (features)", cpu=512, gpu=512, lo=1, hi=16384),
    Param("batch", "batch (rows)", cpu=64, gpu=64, lo=1, hi=1 << 20),
    Param("layers", "layers (depth)", cpu=4, gpu=4, lo=1, hi=64),
]
ODD_SHAPES = [{"width": 33, "batch": 5, "layers": 3}, {"width": 1, "batch": 1, "layers": 1}]


def _model_metrics(gpu: str):
    """Explorer metrics: the launch model's prediction for this shape on a named GPU (labelled model)."""
    def metrics(_fn, x, w, *_rest) -> dict[str, float]:
        p = {"batch": x.shape[0], "width": x.shape[1], "layers": w.shape[0]}
        m = model_step(p, gpu)
        return {f"{gpu} model: eager ÷ graphed (×, predicted)": m.speedup,
                f"{gpu} model: GPU idle in eager (%, predicted)": 100 * (1 - m.eager_utilization)}
    return metrics


LESSON = Lesson(
    key=KEY,
    title="PseudoLinear training step: eager, and replayed as a CUDA graph",
    params=PARAMS,
    variants=[Variant("eager", eager_step, "forward + backward, one kernel launch per op")],
    make_inputs=make_inputs,
    peak_bytes=peak_bytes,
    reduction=lambda p: max(p["layers"], p["batch"]),  # dw sums over the batch
    baseline="eager",
    odd_shapes=ODD_SHAPES,
    reported_from=SEED_KEY,  # the thread's graphed speed-ups replay in this explorer too
    model_work=lambda p, dt: graphed_work(p, dt),
)


def graphed_work(params: dict, dtype=torch.float32) -> dict:
    """Model files' "CUDA graph" variant: the eager step's FLOPs and bytes, issued by the host in one
    graph launch (`record --model`; the device's own gaps between kernels are not modelled)."""
    return {"CUDA graph": dataclasses.replace(LESSON.work(params, dtype)["eager"], launches=1)}


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
            lambda: timing.measure(torch.add, one, one, label="per-op overhead", min_run_time=0.05, max_time=1.0).median,
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
                f"{self.kind} step at {_shape(self.params)}, {len(self.kernels)} ops (one kernel each in the model): eager "
                f"{fmt_time(self.eager_s)}, graphed {fmt_time(self.graphed_s)} per step "
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


def gpu_model(params: dict, device="cuda") -> ModelStep:
    """On a GPU: the model with this host's measured cost of a tiny CUDA op (launch included, so no
    assumed launch cost on top) and this GPU's datasheet (T4's when the GPU has no preset)."""
    dev = torch.device(device)
    p = dataclasses.replace(launch_queue.preset(_preset_for(dev)), kernel_launch=0.0)
    return model_step(params, p.name, dispatch=roofline.overhead(dev), preset=p)


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


def reported_tables() -> tuple[str, dict[str, dict[int, float]]]:
    """(label, {table: {width: PseudoLinear speed-up over Linear}}) as reported in the thread,
    read from the recorded file (kind: reported)."""
    for rec in results.for_lesson(SEED_KEY, kinds="reported"):
        tables = (rec.lessons[SEED_KEY].get("speedups") or {}).get("tables")
        if tables:
            return rec.label(), {name: dict(zip(t["values"], t["speedup"])) for name, t in tables.items()}
    return "", {}


def _graphed_pair() -> tuple[str, str]:
    """The names of the thread's eager and graphed tables from the same GPU."""
    _label, tables = reported_tables()
    graphed = next(n for n in tables if "graph" in n.lower())
    eager = next(n for n in tables if n != graphed and set(tables[n]) == set(tables[graphed]))
    return eager, graphed


def reported_table() -> str:
    """The thread's tables from the GPU it ran with and without graphs (reported figures)."""
    label, tables = reported_tables()
    eager, graphed = _graphed_pair()
    rows = [("width", "eager", "make_graphed_callables")]
    rows += [(str(w), f"{tables[eager][w]:.2f}×", f"{tables[graphed][w]:.2f}×") for w in sorted(tables[eager])]
    return (f"PseudoLinear speed-up over Linear, {label}\n" + text_table(rows, numbers=True) +
            "\nThe GPU is not named and the batch is not stated in the thread.")


def model_vs_reported(gpu: str = "T4", batch: int = MODEL_BATCH, layers: int = MODEL_LAYERS,
                      dispatch: float | None = None) -> tuple[list[int], dict[str, list[float]]]:
    """Widths and series: the thread's eager and graphed tables (reported) and the model's (predicted)."""
    label, tables = reported_tables()
    eager, graphed = _graphed_pair()
    curve = speedup_curve(REPORTED_WIDTHS, batch, layers, gpu, dispatch)
    return REPORTED_WIDTHS, {
        "reported, eager": [tables[eager][w] for w in REPORTED_WIDTHS],
        "reported, make_graphed_callables": [tables[graphed][w] for w in REPORTED_WIDTHS],
        f"model ({gpu}, batch {batch}), eager": curve["Linear ÷ PseudoLinear, eager"],
        f"model ({gpu}, batch {batch}), graphed": curve["Linear ÷ PseudoLinear, graphed"],
    }


def fit_to_reported(batch: int = MODEL_BATCH, dispatch: float | None = None) -> dict[str, float]:
    """{preset: mean |log(model / reported)|} over both tables: how far each preset's curve lies from
    the thread's figures (0 = on them). The thread names no GPU, so this is a comparison, not evidence."""
    dispatch = host_dispatch() if dispatch is None else dispatch
    out = {}
    for gpu in launch_queue.PRESETS:
        _w, s = model_vs_reported(gpu, batch, dispatch=dispatch)
        rep, mod = list(s.values())[:2], list(s.values())[2:]
        pairs = [(m, r) for ms, rs in zip(mod, rep) for m, r in zip(ms, rs)]
        out[gpu] = sum(abs(math.log(m / r)) for m, r in pairs) / len(pairs)
    return out


def closest_preset() -> tuple[str | None, str]:
    """(preset, sentence): the preset whose model curve lies closest to the thread's, stated only when it is
    the same at both ends of the measured dispatch's spread (the noise rule); (None, not decided) otherwise."""
    est = dispatch_estimate()
    best = {min(f, key=f.get) for f in (fit_to_reported(dispatch=d) for d in (est.low, est.median, est.high))}
    if len(best) == 1 and est.decided:
        name = best.pop()
        return name, f"closest to the reported curves with this host's dispatch: {name} (a comparison, not evidence)"
    return None, "closest preset: " + est.not_decided()


def model_vs_reported_table(gpu: str = "T4", batch: int = MODEL_BATCH, dispatch: float | None = None) -> str:
    widths, series = model_vs_reported(gpu, batch, dispatch=dispatch)
    rows = [("width", *series)]
    rows += [(str(w), *(f"{s[i]:.2f}×" for s in series.values())) for i, w in enumerate(widths)]
    label, _t = reported_tables()
    return (text_table(rows, numbers=True) + f"\nreported: {label} (GPU not named; batch not stated)."
            f"\nmodel: launch model, {gpu} datasheet peaks, batch {batch} assumed, dispatch measured on this host.")


def graph_gain(gpu: str = "T4", batch: int = MODEL_BATCH, dispatch: float | None = None) -> dict[str, list[float]]:
    """How much graphs raise PseudoLinear's speed-up over Linear at each reported width (graphed
    ratio ÷ eager ratio): the thread's (reported) and the model's (predicted)."""
    _w, s = model_vs_reported(gpu, batch, dispatch=dispatch)
    (_re, rep_e), (_rg, rep_g), (_me, mod_e), (_mg, mod_g) = s.items()
    return {"reported": [g / e for e, g in zip(rep_e, rep_g)],
            f"model ({gpu}, batch {batch})": [g / e for e, g in zip(mod_e, mod_g)]}


def graph_gain_cap(dispatch: float | None = None, gpu: str = "T4") -> float:
    """The most a graph can speed up a step in the model: per kernel, the eager host cost (dispatch +
    launch) over what a replay still costs the device (the shortest kernel + the graph's gap), or
    the stream's gap over the graph's when the device is the bottleneck."""
    p = launch_queue.preset(gpu)
    dispatch = host_dispatch() if dispatch is None else dispatch
    return max((dispatch + p.kernel_launch) / (p.kernel_min + p.graph_gap),
               (p.kernel_min + p.stream_gap) / (p.kernel_min + p.graph_gap))


def graph_gain_table(gpu: str = "T4", batch: int = MODEL_BATCH, dispatch: float | None = None) -> str:
    """graph_gain as a table, with one sentence each on where the rise is largest (computed)."""
    gain = graph_gain(gpu, batch, dispatch)
    rows = [("width", *(f"graphs raise the ratio, {k}" for k in gain))]
    rows += [(str(w), *(f"×{v[i]:.2f}" for v in gain.values())) for i, w in enumerate(REPORTED_WIDTHS)]
    lines = [text_table(rows, numbers=True)]
    for k, v in gain.items():
        i = max(range(len(v)), key=v.__getitem__)
        lines.append(f"{k}: at or above ×1 at {sum(x >= 0.995 for x in v)} of {len(v)} widths; largest "
                     f"×{v[i]:.2f} at width {REPORTED_WIDTHS[i]}")
    return "\n".join(lines)


def model_vs_reported_figure(gpu: str = "T4", batch: int = MODEL_BATCH, dispatch: float | None = None):
    import matplotlib.pyplot as plt

    widths, series = model_vs_reported(gpu, batch, dispatch=dispatch)
    fig = plots.lines(widths, series, xlabel="width (features)",
                      ylabel="PseudoLinear speed-up over Linear (×, log)",
                      title="Seed 003: reported (their GPU) next to the launch model (predicted)")
    ax = fig.axes[0]
    for line in ax.get_lines():
        if line.get_label().startswith("reported"):
            line.set_linestyle("--")
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _pos: f"{v:g}"))
    return fig


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
             f"The kernels of its {len(m.kernels)} ops keep the GPU busy for {fmt_time(busy)} a step; eager, the host "
             f"needs {fmt_time(len(m.kernels) * (m.dispatch + launch_queue.KERNEL_LAUNCH))} to issue them."]
    if dispatch is None:
        est = dispatch_estimate()
        ends = {_regime(model_step(params, gpu, dispatch=d).speedup) for d in (est.low, est.high)}
        lines.append(ends.pop() if len(ends) == 1 and est.decided else
                     "Which regime: " + est.not_decided() + " (the measured dispatch spans more than one regime)")
    else:
        lines.append(_regime(m.speedup))
    return "\n".join(lines)


def widths_above_cap(gpu: str = "T4") -> str:
    """Where the thread's reported rise from graphs exceeds the model's cap, with the measured dispatch's
    spread: stated only when both ends of its inter-quartile range give the same widths (the noise rule)."""
    est = dispatch_estimate()
    reported = graph_gain(gpu, dispatch=est.median)["reported"]
    found = [tuple(w for w, g in zip(REPORTED_WIDTHS, reported) if g > graph_gain_cap(d, gpu))
             for d in (est.low, est.median, est.high)]
    caps = [graph_gain_cap(d, gpu) for d in (est.low, est.high)]
    if not est.decided or found[0] != found[2]:
        return f"the model's cap on any step's gain from graphs: ×{caps[0]:.2f} to ×{caps[1]:.2f}; " + est.not_decided()
    return (f"the model's cap on any step's gain from graphs, with this host's dispatch: ×{graph_gain_cap(est.median, gpu):.2f}"
            f" (×{caps[0]:.2f} to ×{caps[1]:.2f} over the measurement's spread); reported rises above it at "
            f"width(s): {', '.join(map(str, found[1])) or 'none'}")


# --- capture safety: a catalogue of functions known to be safe or unsafe ---------------------------


@dataclass
class Entry:
    name: str
    fn: Callable
    inputs: Callable[[torch.device], tuple]  # example inputs on a device
    verdict: str  # expected under capture: "safe", "fails" or "frozen" (from CUDA's and PyTorch's rules)
    kinds: tuple[str, ...] = ()  # hazard kinds graph_check must name
    also: Callable[[torch.device], list] | None = None  # other calls (shape changes, control flow)
    second: Callable[[tuple], tuple] | None = None  # frozen entries: the call whose replay differs from eager
    source: str = ""  # where the expected behaviour is documented

    @property
    def expected_report(self) -> str:
        """The graph_check verdict this entry expects ("safe" shows as "no hazard seen": not a proof)."""
        return graphs.CLEAN if self.verdict == "safe" else self.verdict


def _xy(device, n: int = 8):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n, n, generator=gen).to(device), torch.randn(n, generator=gen).to(device)


def mlp(x, w):
    return torch.relu(x @ w + 1)


def leaky(x, w):
    return torch.where(x > 0, x, 0.1 * x) * w


def zero_negatives(x, w):
    return x.masked_fill(x < 0, 0.0) + w


def top3(x, w):
    return (x * w).topk(3, dim=1).values


def decay_in_place(x, w):
    return x.mul_(0.9).add_(w)


def grads(x, w):
    loss = torch.relu(x @ w).square().sum()
    return torch.autograd.grad(loss, w)


def sgd_tensor_lr(p, lr):
    with torch.no_grad():
        p.sub_(lr * p.grad)
    return p


def gather_rows(x, idx):
    return x.index_select(0, idx)


def dropout(x, w):
    return F.dropout(x, 0.5, training=True) * w


def log_item(x, w):
    loss = (x @ w).square().mean()
    LOSSES.append(loss.item())
    return loss


def print_loss(x, w):
    loss = (x @ w).square().mean()
    print(loss)
    return loss


def branch_on_value(x, w):
    y = x @ w
    if y.sum() > 0:
        y = y * 2
    return y


def to_host(x, w):
    return (x @ w).cpu()


def positives_nonzero(x, w):
    return torch.nonzero(x > 0)


def positives_mask(x, w):
    return x[x > 0] * 2


def distinct(x, w):
    return torch.unique(x.round())


def selected(x, w):
    return torch.masked_select(x, x > 0)


def constant_from_python(x, w):
    return x * torch.tensor([2.0], device=x.device) + w


def scale_by_float(x, lr):
    return x * lr


def device_sync(x, w):
    y = x @ w
    torch.cuda.synchronize()
    return y


_STEP = {"n": 0}


def every_other_step(x, w):
    _STEP["n"] += 1
    y = x @ w
    if _STEP["n"] % 2:
        y = y + 1
    return y


def constant_tensor(x, w):
    return x * torch.tensor(2.0) + w


def noise_from_host(x, w):
    return x + torch.randn(x.shape).to(x.device) * w


def noise_on_device(x, w):
    return x + torch.randn(x.shape, device=x.device) * w


def noise_scale_from_random(x, w):
    return x * (1 + 0.1 * random.random()) + w


def zero_negatives_by_index(x, w):
    x = x.clone()
    x[x < 0] = 0
    return x + w


def class_counts(x, w):
    return torch.bincount((x > 0).long().flatten())


def one_hot_fixed(x, w):
    return F.one_hot((x > 0).long().flatten(), num_classes=2).float().sum(0)


def _sgd_inputs(device, momentum: bool = False):
    p = torch.nn.Parameter(torch.randn(8, device=device))
    p.grad = torch.ones(8, device=device)
    return (p,)


def _optimizer_step(kind: str):
    """A one-parameter optimizer step (the optimizer made on first use, on the parameter's device)."""
    state: dict = {}

    def step(p):
        if state.get("param") is not p:  # a new parameter (another device, say): a new optimizer
            state["param"] = p
            state["opt"] = torch.optim.Adam([p], lr=0.1) if kind == "Adam" else torch.optim.SGD([p], lr=0.1)
        state["opt"].step()
        return p

    step.__name__ = f"{kind.lower()}_step"
    step.state = state
    return step


adam_step = _optimizer_step("Adam")
sgd_step = _optimizer_step("SGD")
LOSSES: list[float] = []


def _with_lr(x, _w):
    return (x, 0.1)


_NOTES = "CUDA Graphs notes, cuda.rst"  # PyTorch's docs/source/notes/cuda.rst
CATALOGUE = [
    Entry("matmul + relu", mlp, _xy, "safe", source="kernels only"),
    Entry("torch.where instead of a branch", leaky, _xy, "safe", source="kernels only"),
    Entry("masked_fill instead of a boolean index", zero_negatives, _xy, "safe", source="kernels only"),
    Entry("x[mask] = 0 (ATen makes it masked_fill_)", zero_negatives_by_index, _xy, "safe",
          source="TensorAdvancedIndexing.cpp, _index_put_impl_ / canDispatchToMaskedFill"),
    Entry("topk (a fixed k)", top3, _xy, "safe", source="a fixed output size"),
    Entry("in-place update of an input", decay_in_place, _xy, "safe", source="kernels only"),
    Entry("forward + backward (autograd.grad)", grads, lambda d: (_xy(d)[0], _xy(d)[1].requires_grad_()), "safe",
          source=_NOTES + ": backward can be captured"),
    Entry("SGD by hand, lr a 0-dim device tensor", sgd_tensor_lr,
          lambda d: (*_sgd_inputs(d), torch.tensor(0.1, device=d)), "safe", source=_NOTES + ": tensor lr"),
    Entry("index_select with a tensor index", gather_rows,
          lambda d: (_xy(d)[0], torch.tensor([3, 1, 4], device=d)), "safe", source="a fixed output size"),
    Entry("dropout (graph-safe random numbers)", dropout, _xy, "safe", source=_NOTES + ": graph-safe RNG"),
    Entry("randn(shape, device=x.device)", noise_on_device, _xy, "safe", source=_NOTES + ": graph-safe RNG"),
    Entry("one_hot with num_classes", one_hot_fixed, _xy, "safe", source="Onehot.cpp: CUDA skips the host checks"),
    Entry(".item() to log the loss", log_item, _xy, "fails", ("host sync",), source=_NOTES + ": no sync"),
    Entry("print(loss)", print_loss, _xy, "fails", ("host sync",), source=_NOTES + ": no sync"),
    Entry("if tensor: a branch on a value", branch_on_value, _xy, "fails", ("host sync",), source=_NOTES + ": no sync"),
    Entry(".cpu() of a result", to_host, _xy, "fails", ("host sync",), source="cuda/Copy.cu: memcpy_and_sync"),
    Entry("nonzero", positives_nonzero, _xy, "fails", ("data-dependent shape",),
          source="cuda/Nonzero.cu: memcpy_and_sync"),
    Entry("boolean-mask indexing x[x > 0]", positives_mask, _xy, "fails", ("data-dependent shape",),
          source="index with a bool mask calls nonzero"),
    Entry("unique", distinct, _xy, "fails", ("data-dependent shape",), source="output size from the data"),
    Entry("masked_select", selected, _xy, "fails", ("data-dependent shape",), source="output size from the data"),
    Entry("bincount", class_counts, _xy, "fails", ("host sync",), source="cuda/SummaryOps.cu: .item() inside"),
    Entry("torch.tensor(data, device=x.device) inside", constant_from_python, _xy, "fails", ("host↔device copy",),
          source="a copy from host memory (Copy.cu)"),
    Entry("torch.randn(shape).to(x.device)", noise_from_host, _xy, "fails", ("host↔device copy",),
          source="a blocking pageable copy (Copy.cu)"),
    Entry("torch.cuda.synchronize() inside", device_sync, _xy, "fails", ("device sync",), source=_NOTES),
    Entry("a new shape on the next call", mlp, _xy, "fails", ("shape change",),
          also=lambda d: [(torch.randn(16, 8, device=d), _xy(d)[1])], source=_NOTES + ": static shapes"),
    Entry("Adam built without capturable=True", adam_step, _sgd_inputs, "fails", ("optimizer",),
          source="torch/optim/optimizer.py: _cuda_graph_capture_health_check"),
    Entry("x * torch.tensor(2.0): a 0-dim host tensor", constant_tensor, _xy, "frozen", ("frozen host tensor",),
          source="cuda/Loops.cuh, gpu_kernel_with_scalars: a CPU scalar is a kernel argument"),
    Entry("a learning rate passed as a Python float", scale_by_float, lambda d: (_xy(d)[0], 0.1), "frozen",
          ("frozen Python value",), second=lambda inputs: (inputs[0], 0.2), source=_NOTES + ": kernel arguments"),
    Entry("SGD with a float lr (a scheduler changes it)", sgd_step, _sgd_inputs, "frozen",
          ("frozen Python value",), source=_NOTES + ": kernel arguments"),
    Entry("a number from Python's random", noise_scale_from_random, _xy, "frozen", ("frozen Python value",),
          source=_NOTES + ": host code runs once, at capture"),
    Entry("a Python counter picks the branch", every_other_step, _xy, "frozen", ("control flow",),
          also=lambda d: [_xy(d)], source=_NOTES + ": host code runs once, at capture"),
]


def check_entry(e: Entry, device="cpu") -> graphs.GraphReport:
    dev = torch.device(device)
    also = e.also(dev) if e.also else ()
    return graphs.graph_check(e.fn, *e.inputs(dev), also=also)


def catalogue_table(device="cpu"):
    """graph_check's verdict on every catalogue entry, next to the verdict the course expects from CUDA's and
    PyTorch's rules (not a capture: on a GPU, tests/test_graphs.py captures each). Device-independent:
    nbval compares it. An HTML table in a notebook, fixed-width text when printed."""
    from .display import html_table

    rows = [("function", "expected (source)", "graph_check", "hazards named", "as expected")]
    for e in CATALOGUE:
        r = check_entry(e, device)
        ok = r.verdict == e.expected_report and set(e.kinds) <= set(r.kinds)
        rows.append((e.name, f"{e.verdict} ({e.source})", r.verdict, ", ".join(r.kinds) or "-", "✓" if ok else "✗"))
    return html_table(rows, caption="expected: from the rules and source named; graph_check: this run, on this "
                                    "machine, at the dispatcher (what it cannot see is listed under any report)")


# --- on a GPU: capture by hand, make_graphed_callables, reduce-overhead --------------------------------


def _cpu_note(what: str) -> str:
    return f"{graphs.no_graphs_reason()}\n({what} needs a CUDA GPU: run this notebook on Colab with a GPU runtime.)"


def kept_reference_demo(device=None) -> str:
    """Capture by hand, then the bug readers hit: a kept reference to a replay's output is
    overwritten by the next replay. Clone what you keep."""
    dev = _device.pick(device)
    if dev.type != "cuda" or not graphs.has_graphs():
        return _cpu_note("Capture and replay")
    x = torch.zeros(4, device=dev)
    cap = graphs.capture(lambda t: t * 2 + 1, x)
    first = cap.replay(torch.full((4,), 1.0, device=dev))
    kept_clone = first.clone()
    cap.replay(torch.full((4,), 10.0, device=dev))
    return (f"captured in {fmt_time(cap.capture_seconds)}, private pool {_device.fmt_bytes(cap.pool_bytes)}\n"
            f"replay with x = 1:  output {kept_clone.cpu().tolist()}  (cloned right away)\n"
            f"after a replay with x = 10, the kept reference `first` reads {first.cpu().tolist()}: overwritten\n"
            f"`first is cap.static_outputs`: {first is cap.static_outputs}")


def _prepare_graph(fn, *inputs):
    """Variant.prepare: capture `fn` on static copies of the inputs (outside the clock); the timed
    callable copies new inputs in and replays (the copies are part of the honest cost)."""
    cap, problem = graphs.try_capture(fn, *inputs)
    if cap is None:
        raise ValueError(problem)

    def replay(*args):
        return cap.replay(*args)

    replay.captured = cap
    return replay


def _prepare_reduce_overhead(fn, *inputs):
    """Variant.prepare: torch.compile(mode="reduce-overhead") of the forward, warmed up here (it
    records its graphs on the first calls); the step marks each iteration's start."""
    problem = graphs.reduce_overhead_problem(inputs[0].device)
    if problem:
        raise ValueError(problem)
    torch._dynamo.reset()
    compiled = torch.compile(pseudo_linear, mode="reduce-overhead")

    def step(x, w, b, g):
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(x, w, b)
        return (out, *torch.autograd.grad(out, (x, w, b), g))

    for _ in range(3):
        step(*inputs)
    return step


def gpu_lesson(device=None) -> Lesson:
    """The lesson with the GPU variants this torch offers: eager, a hand-captured graph, and
    reduce-overhead (where torch.compile works on this GPU)."""
    dev = _device.pick(device)
    variants = list(LESSON.variants)
    if dev.type == "cuda" and graphs.has_graphs():
        variants.append(Variant("CUDA graph", eager_step, "the whole step captured, replayed", prepare=_prepare_graph))
        if graphs.reduce_overhead_problem(dev) is None:
            variants.append(Variant("reduce-overhead", eager_step, "torch.compile(mode='reduce-overhead')",
                                    prepare=_prepare_reduce_overhead))
    return dataclasses.replace(LESSON, variants=variants)


def explorer(device=None, gpu: str = "T4") -> Explorer:
    """The explorer: on a GPU, eager vs graphed (vs reduce-overhead) measured; on any machine, the
    launch model's prediction for `gpu` (a preset: T4, A100, H100) beside it, labelled predicted."""
    dev = _device.pick(device)
    launch_queue.preset(gpu)  # refuses an unknown GPU now, with the names it knows
    lesson = dataclasses.replace(gpu_lesson(dev), metrics=_model_metrics(gpu))
    return Explorer(lesson, dev)


@dataclass
class GpuComparison:
    params: dict
    run: object | None  # lesson.Run on a GPU
    model: ModelStep
    note: str = ""

    def __str__(self) -> str:
        lines = [str(self.model)]
        if self.run is None:
            lines.insert(0, self.note)
            return "\n".join(lines)
        lines.insert(0, self.run.table("eager"))
        for name, s in self.run.prepare_seconds.items():
            lines.append(f"{name}: prepared (captured / compiled) in {fmt_time(s)}, outside the timings")
        t = self.run.timings
        if "CUDA graph" in t:  # one pass each: the spreads decide whether the ratio can be stated (noise rule)
            said = noise.from_timings(t["eager"], t["CUDA graph"]).say(
                "measured: eager takes {r:.2f}× the graph replay's time here")
            lines.append(f"{said}; the model predicted {self.model.speedup:.2f}× for a {self.model.gpu}.")
        return "\n".join(lines)


def compare_on_gpu(params: dict | None = None, device=None, gpu: str | None = None,
                   min_run_time: float = 0.2) -> GpuComparison:
    """Eager vs graphed (vs reduce-overhead), timed with the harness on a GPU; on a CPU, the model only."""
    dev = _device.pick(device)
    p = LESSON.check(params or {}, dev, torch.float32)
    model = model_step(p, gpu or _preset_for(dev))
    if dev.type != "cuda" or not graphs.has_graphs():
        return GpuComparison(p, None, model, _cpu_note("Timing a graph replay") + "\nBelow: the model's prediction.")
    run = gpu_lesson(dev).run(p, dev, min_run_time=min_run_time)
    return GpuComparison(p, run, gpu_model(p, dev) if gpu is None else model)


def _preset_for(dev: torch.device) -> str:
    """The preset that names this GPU, or T4 (Colab's) when it is unknown or there is none."""
    if dev.type == "cuda":
        name = _device.describe(dev).name
        for key in sorted(roofline.DATASHEET, key=len, reverse=True):
            if key.lower() in name.lower():
                return key
    return "T4"


def check_graphed(params: dict | None = None, device=None) -> str:
    """The replayed step against eager (float32 tolerance) and float64, at `params` and an odd shape."""
    dev = _device.pick(device)
    if dev.type != "cuda" or not graphs.has_graphs():
        return _cpu_note("Checking a replay against eager")
    lines = []
    for p in (LESSON.check(params or {}, dev, torch.float32), {"width": 33, "batch": 5, "layers": 3}):
        inputs = make_inputs(p, dev, torch.float32)
        cap, problem = graphs.try_capture(eager_step, *inputs)
        if cap is None:
            return problem
        new = make_inputs(p, dev, torch.float32)
        got = [t.clone() for t in cap.replay(*new)]
        eager = eager_step(*new)
        ref = eager_step(*(t.detach().double().requires_grad_(t.requires_grad) for t in new))
        tol = LESSON.tolerance(p, torch.float32, dev)
        e_eager, e_ref = grading.rel_error(got, eager), grading.rel_error(got, ref)
        lines.append(f"{'✓' if e_eager <= tol and e_ref <= tol else '✗'} {_shape(p)}: replay vs eager "
                     f"{e_eager:.1e}, vs float64 {e_ref:.1e} (tolerance {tol:.1e})")
    return "\n".join(lines)


def seed_model(kind: str, width: int, layers: int, device=None) -> torch.nn.Module:
    """The thread's model, fixed (lesson 04): `layers` Linear or PseudoLinear layers, no ReLU."""
    from .lesson04_launch_overhead import fixed_model

    return fixed_model(kind, width, layers, device)


def seed_model_bytes(p: dict) -> int:
    """float32 bytes of graphed_callables_ratio at `p`: each of the four models (two kinds, eager and
    graphed) holds its weights and their gradients (Linear: width² + width a layer), and a graph's
    static inputs, outputs and private pool keep about four activations a layer."""
    B, N, L = p["batch"], p["width"], p["layers"]
    weights = 2 * 2 * L * (N * N + N) + 2 * 2 * L * 2 * N  # Linear and PseudoLinear, eager and graphed
    return 4 * (2 * weights + 4 * (2 * L + 4) * B * N)


def graphed_callables_ratio(width: int = 512, batch: int = MODEL_BATCH, layers: int = MODEL_LAYERS,
                            device=None, min_run_time: float = 0.2, max_time: float = 8.0) -> dict | str:
    """Seed 003's experiment on this GPU: Linear's training step over PseudoLinear's, eager and with
    each model wrapped in make_graphed_callables (forward and backward graphed), in paired rounds (the noise
    rule: "sentence" states the two ratios only where the rounds agree). A sentence without a GPU."""
    dev = _device.pick(device)
    if dev.type != "cuda" or not graphs.has_graphs():
        return _cpu_note("make_graphed_callables")
    problem = graphs.graphed_callables_problem()
    if problem:
        return problem
    try:  # refuse before allocating: the Linear model's weights dominate (LESSON counts PseudoLinear only)
        p = LESSON.check({"width": width, "batch": batch, "layers": layers}, dev, torch.float32)
        _device.check_fits(seed_model_bytes(p), dev, what=f"seed 003's two models at {_shape(p)}")
    except ValueError as err:
        return str(err)
    x = torch.randn(batch, width, device=dev, requires_grad=True)
    g = torch.randn(batch, width, device=dev)
    steps = {}
    for kind in ("Linear", "PseudoLinear"):
        model = seed_model(kind, width, layers, dev)
        graphed = torch.cuda.make_graphed_callables(seed_model(kind, width, layers, dev), (x,))
        for label, m in (("eager", model), ("graphed", graphed)):
            steps[f"{kind} {label}"] = lambda m=m: m(x).backward(g)
    pairs = [("Linear eager", "PseudoLinear eager"), ("Linear graphed", "PseudoLinear graphed")]
    cmp = noise.compare(steps, pairs=pairs, min_run_time=min_run_time / 4, max_time=max_time)
    ratio = {lbl: cmp.ratio(f"Linear {lbl}", f"PseudoLinear {lbl}") for lbl in ("eager", "graphed")}
    sentence = "; ".join(r.say(f"{lbl}: Linear takes {{r:.2f}}× PseudoLinear's time") for lbl, r in ratio.items())
    return {"timings": cmp.timings, "ratio": {k: r.median for k, r in ratio.items()}, "sentence": sentence,
            "params": {"width": width, "batch": batch, "layers": layers}}


def reduce_overhead_note(device=None) -> str:
    """Where reduce-overhead applies here, in one or two sentences."""
    dev = _device.pick(device)
    problem = graphs.reduce_overhead_problem(dev)
    if problem is None:
        return ("torch.compile(mode='reduce-overhead') is available here: it records one graph per distinct input "
                "size (and warns once there are more than torch._inductor.config.triton."
                "cudagraph_dynamic_shape_warn_limit); a later run may reuse an output's memory, and reading a kept "
                "output then raises an error, so clone outputs you keep; where torch cannot tell that a new "
                "iteration has begun (say, two calls before one backward), mark it with "
                "torch.compiler.cudagraph_mark_step_begin().")
    return problem


# --- exercise: make a training step graph-safe without changing its result ------------------------
# A small regression step logs its loss with .item() and keeps only the rows whose target is
# positive with a boolean mask. Both stop capture. Rewrite it so graph_check finds nothing and the
# loss and gradients stay the same (float64 reference).

HISTORY: list[float] = []


def exercise_starter(x, w, b, y):
    pred = x @ w + b
    keep = y > 0
    err = pred[keep] - y[keep]
    loss = err.square().sum() / keep.sum()
    HISTORY.append(loss.item())
    gw, gb = torch.autograd.grad(loss, (w, b))
    return loss, gw, gb


def exercise_reference(x, w, b, y):
    keep = y > 0
    err = (x @ w + b - y)[keep]
    loss = err.square().sum() / keep.sum()
    return (loss, *torch.autograd.grad(loss, (w, b)))


EXERCISE_SHAPES = [(64, 16), (7, 3), (33, 5)]  # (rows, features)


def exercise_inputs(rows: int, features: int, device="cpu", seed: int = 0):
    gen = torch.Generator().manual_seed(seed + rows)
    x = torch.randn(rows, features, generator=gen)
    w = torch.randn(features, generator=gen)
    b = torch.randn((), generator=gen)
    y = torch.randn(rows, generator=gen)
    y[0] = abs(y[0]) + 0.1  # at least one positive target
    return x.to(device), w.to(device).requires_grad_(), b.to(device).requires_grad_(), y.to(device)


def _analyse(fn):
    def analyse(*inputs):
        report = graphs.graph_check(fn, *inputs)
        if report.error:  # stopped early (on meta, .item() raises): let analyse_reader try the CPU
            raise RuntimeError(report.error)
        return report
    return analyse


def check_exercise(fn) -> Verdict:
    """Grade the rewrite: loss and gradients against float64 at odd shapes, then graph_check (no
    hazard left), both on any machine; on a GPU, a real capture whose replay matches eager."""
    v = Verdict(f"Exercise 05 ({getattr(fn, '__name__', 'your function')})")
    if not callable(fn):
        v.check("is a function", False, f"got {type(fn).__name__}; pass your function itself, e.g. my_step")
        return v
    worst = 0.0
    for rows, feats in EXERCISE_SHAPES:
        inputs = exercise_inputs(rows, feats)
        # the reference from copies made before the reader's code can touch the inputs
        ref = exercise_reference(*(t.detach().double().requires_grad_(t.requires_grad) for t in inputs))
        out, problem = grading.call_reader(fn, *inputs)
        if problem:
            v.check("runs and returns (loss, grad w, grad b)", False, problem)
            return v
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            v.check("returns (loss, grad w, grad b)", False, f"got {type(out).__name__}")
            return v
        worst = max(worst, grading.rel_error(list(out), list(ref)))
    v.check(f"loss and gradients match float64 at {len(EXERCISE_SHAPES)} shapes", worst < 1e-5,
            "" if worst < 1e-5 else "NaN or inf, or a wrong shape or type" if worst == math.inf else
            f"worst relative error {worst:.1e}")
    report, _dev, problem = grading.analyse_reader(_analyse(fn), lambda d: exercise_inputs(*EXERCISE_SHAPES[0], d))
    if problem:
        v.check("graph_check can run it", False, problem)
        return v
    v.check("graph_check finds nothing that capture would refuse or freeze", report.safe,
            "; ".join(f"{h.kind}: {h.what} [{h.where}]" for h in report.hazards))
    if _device.has_cuda() and graphs.has_graphs():
        v.on_gpu(*_gpu_replay_check(fn))
    else:
        v.on_gpu(GPU_CHECK, None)
    return v


GPU_CHECK = "captures, and a replay on new inputs matches eager (float32)"


def _gpu_replay_check(fn) -> tuple[str, bool, str]:
    """Capture the reader's step on the GPU, replay it on new inputs, and compare with eager on copies
    of the same inputs. Every call of the reader's code runs under the checker's time limit; what it
    raises or returns becomes the detail of one line."""
    name = GPU_CHECK
    inputs = exercise_inputs(*EXERCISE_SHAPES[0], "cuda")
    captured, problem = grading.call_reader(lambda *t: graphs.try_capture(fn, *t), *inputs)
    if problem:
        return name, False, problem
    cap, why = captured
    if cap is None:
        return name, False, why
    new = exercise_inputs(*EXERCISE_SHAPES[0], "cuda", seed=1)
    copies = [t.detach().clone().requires_grad_(t.requires_grad) for t in new]
    replayed, problem = grading.call_reader(lambda *t: [o.clone() for o in cap.replay(*t)], *new)
    if problem:
        return name, False, problem
    eager, problem = grading.call_reader(fn, *copies)
    if problem:
        return name, False, problem
    err = grading.rel_error(replayed, list(eager) if isinstance(eager, (tuple, list)) else eager)
    return name, err < 1e-5, f"relative error {err:.1e}"


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


def _shape(p: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in p.items())


__all__ = ["LESSON", "KEY", "pseudo_linear", "eager_step", "linear_step", "make_inputs", "step_kernels",
           "host_dispatch", "ModelStep", "model_step", "timeline_figure", "speedup_curve", "reported_tables", "reported_table",
           "model_vs_reported", "model_vs_reported_table", "graph_gain", "graph_gain_table", "graph_gain_cap", "model_vs_reported_figure", "graphs_speedup_figure",
           "model_summary", "gpu_model", "fit_to_reported", "Entry", "CATALOGUE", "check_entry", "catalogue_table", "kept_reference_demo",
           "gpu_lesson", "explorer", "compare_on_gpu", "GpuComparison", "check_graphed", "seed_model", "seed_model_bytes",
           "graphed_callables_ratio", "reduce_overhead_note", "exercise_starter", "exercise_inputs",
           "check_exercise", "record", "targets", "OVERHEAD_BOUND", "COMPUTE_BOUND", "dispatch_estimate",
           "widths_above_cap", "closest_preset", "kernels_at_least", "MULTI_KERNEL_OPS"]
