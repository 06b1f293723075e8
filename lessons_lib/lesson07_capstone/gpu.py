"""The fixed step as shipped on a GPU, and what a CPU reader sees of it: graph_check, one CUDA graph, the model.

`GraphedTrain`: the fixed model's training loop as a practitioner ships it on a GPU: batch indices on the device,
one fused optimizer built once (its learning rate a 0-dim device tensor), and forward, backward and the update
captured as one CUDA graph that each step replays. `shipped_comparison` times it against the original and the
fixed loop eager, every optimizer living across calls (steady-state steps), in paired rounds.

`gpu_work` traces a step on `meta` as CUDA runs it (SGD's default is foreach there, attention takes the
memory-efficient kernel, only ops that launch work on the device count as launches: trace.OpTrace.gpu_ops), and
`gpu_model` puts it against T4, A100 and H100 datasheet peaks: figures labelled model, never measurements.
`h200_errors` says how far those floors fell under what an H200 measured (H200_MEASURED).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from .. import launch_queue
from .model import (Model, batches, fixed_optimizer, fixed_train, make_data, shape, slow_optimizer,
                    slow_train)

# Seconds a kernel keeps the GPU busy at least inside a CUDA graph: the shortest kernel (launch_queue.KERNEL_MIN,
# 0.75 µs: the H200's profile of these loops shows its shortest kernels at 0.71-0.81 µs, call1-probes.log lines
# 79-80) plus the graph's gap between kernels (GRAPH_GAP, assumed): 1.25 µs. It was an assumed 2 µs, once cited as
# the profile's "1.9-4 µs", which the profile does not show.
KERNEL_FLOOR = launch_queue.KERNEL_MIN + launch_queue.GRAPH_GAP
REPLAY_EXTRA = 3  # per replayed step, outside the graph: the batch's indices in, the loss and the outputs out
# Measured on an NVIDIA H200 (torch 2.11, 2026-11-26) by .ci/gpu-probes/lesson07.py, steady state, 4 steps a call,
# CUDA events, median of 7 calls (call1-probes.log line 70), and the device's own time a step from torch.profiler
# (lines 79-80): what the floors of `gpu_model` are tested against, never an input to them.
H200_MEASURED = {"step_ms": {"original": 6.584, "fixed": 2.089, "fixed, one CUDA graph": 0.454},
                 "device_ms": {"original": 1.222, "fixed": 0.388}, "ratio": 14.50}


def fixed_step(model: Model, opt, x=None, y=None):
    """One training step of the fixed model: what a CUDA graph captures. step(xb, yb), or with `x` and `y`
    step(idx): the batch gathered from them by device indices inside the step. The gradients stay in place
    (zero_grad(set_to_none=False)): a graph replays into the same memory."""
    def step(xb, yb):
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss.detach()

    if x is None:
        return step

    def gathered(idx):
        xb, yb = x[idx], y[idx]
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss.detach(), out.detach()
    return gathered


class GraphedTrain:
    """The fixed loop as shipped on a GPU: `GraphedTrain(model, x, y, batch)(steps)` trains like
    `fixed_train(model, x, y, steps, batch)` and returns the same (losses, outputs), but each step is one
    replay of a CUDA graph of the whole step (gather, forward, backward, fused SGD). Its optimizer is built once
    and lives across calls. Capture's warm-up trains three steps; the weights are put back after it and the
    momentum zeroed (SGD's first step sets the momentum to the gradient: the same), so the losses follow eager's."""

    def __init__(self, model: Model, x, y, batch: int, lr: float = 1e-2):
        from .. import graphs

        self.model, self.x, self.y, self.batch = model, x, y, batch
        self.opt = fixed_optimizer(model, lr)
        start = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.captured = graphs.capture(fixed_step(model, self.opt, x, y), torch.arange(batch, device=x.device))
        with torch.no_grad():
            for k, v in model.state_dict().items():
                v.copy_(start[k])
            for state in self.opt.state.values():
                state["momentum_buffer"].zero_()

    def __call__(self, steps: int):
        losses = torch.empty(steps, dtype=self.x.dtype, device=self.x.device)
        outs = []
        for s, idx in enumerate(batches(len(self.x), steps, self.batch, device=self.x.device)):
            loss, out = self.captured.replay(idx)
            losses[s] = loss
            outs.append(out.clone())  # the next replay overwrites the graph's output
        return losses, torch.cat(outs)


def shipped_comparison(device="cuda", steps: int = 4, max_time: float = 10.0, dims: dict | None = None,
                       graph: bool = True):
    """On a CUDA GPU: the original loop, the fixed loop eager and the fixed loop as one CUDA graph, `steps`
    steps a call, each optimizer built once and living across calls, in paired rounds (noise.compare, device
    passed): (Comparison, ""). Elsewhere: (None, why not)."""
    from .. import graphs, noise

    dev = torch.device(device)
    if dev.type != "cuda" or not graphs.has_graphs():
        return None, graphs.no_graphs_reason() or "CUDA graphs need a CUDA GPU."
    d = dims or shape(dev)
    x, y = (t.to(dev) for t in make_data(n=steps * d["batch"], T=d["T"]))
    torch.manual_seed(0)
    slow, fixed, shipped = (Model(f, d["C"], d["H"], d["E"]).to(dev) for f in (False, True, True))
    so, fo = slow_optimizer(slow), fixed_optimizer(fixed)
    fns = {"original": lambda: slow_train(slow, x, y, steps, d["batch"], opt=so),
           "fixed, eager": lambda: fixed_train(fixed, x, y, steps, d["batch"], opt=fo)}
    pairs = [("original", "fixed, eager")]
    if graph:
        g = GraphedTrain(shipped, x, y, d["batch"])
        fns["fixed, one CUDA graph"] = lambda: g(steps)
        pairs += [("fixed, eager", "fixed, one CUDA graph"), ("original", "fixed, one CUDA graph")]
    return noise.compare(fns, pairs=pairs, max_time=max_time, device=dev), ""


def graphed_agreement(device="cuda", steps: int = 8, dims: dict | None = None) -> float | None:
    """Largest gap between the losses of the fixed loop eager and as one CUDA graph, same weights and batches
    (float32), or None without CUDA graphs."""
    from .. import graphs

    dev = torch.device(device)
    if dev.type != "cuda" or not graphs.has_graphs():
        return None
    d = dims or shape(dev)
    x, y = (t.to(dev) for t in make_data(n=steps * d["batch"], T=d["T"]))
    torch.manual_seed(0)
    eager = Model(True, d["C"], d["H"], d["E"]).to(dev)
    graphed = Model(True, d["C"], d["H"], d["E"]).to(dev)
    graphed.load_state_dict(eager.state_dict())
    a, _ = fixed_train(eager, x, y, steps, d["batch"])
    b, _ = GraphedTrain(graphed, x, y, d["batch"])(steps)
    return float((a - b).abs().max())


# === graph_check, on any device ==========================================================================

OPTIMIZERS = {"foreach SGD, lr a Python float": "foreach", "fused SGD, lr a 0-dim device tensor (shipped)": "fused"}


def graph_reports(device="cpu", dims: dict | None = None) -> dict:
    """graph_check on the fixed training step with each optimizer of OPTIMIZERS: what capture would refuse or
    freeze, seen on any device."""
    from ..graph_hazards import graph_check

    d = dims or shape(device)
    x, y = (t.to(device) for t in make_data(n=d["batch"], T=d["T"]))
    out = {}
    for name, how in OPTIMIZERS.items():
        torch.manual_seed(0)
        model = Model(True, d["C"], d["H"], d["E"]).to(device)
        opt = fixed_optimizer(model) if how == "fused" else \
            torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
        out[name] = graph_check(fixed_step(model, opt), x, y)
    return out


def graph_report(device="cpu", dims: dict | None = None):
    """graph_check on the fixed step with the optimizer the fixed loop uses (fused, tensor lr)."""
    return graph_reports(device, dims)[list(OPTIMIZERS)[1]]


_WORDS = {  # what a hazard graph_check prints means for this step, by a piece of what it names
    "lr=": "the learning rate is a Python float: every replay keeps the value captured, so a scheduler's "
           "changes never reach the graph. The shipped step uses fused SGD with the lr a 0-dim device tensor "
           "(a scheduler copy_()s new values into it), which the fused kernel reads at each replay.",
}


def graph_words(report) -> list[str]:
    """One sentence per hazard the report prints, saying what it means for this step (the notebook's prose
    follows what graph_check printed on this device, not a fixed count)."""
    out = []
    for h in report.hazards:
        text = f"{h.kind}: {h.what}"
        why = next((w for key, w in _WORDS.items() if key in text), "see the fix graph_check prints above.")
        out.append(f"{h.kind} ({h.what.split(' — ')[0][:70]}): {why}")
    return out or ["no hazard seen: the step captures as it is (what graph_check cannot see is listed above)."]


# === the model: the step traced as CUDA runs it, against datasheet peaks =================================

@contextlib.contextmanager
def _attention_as_on_cuda():
    """scaled_dot_product_attention as CUDA runs it in float32: the memory-efficient kernel (flash needs fp16 or
    bf16; sdp_utils.cpp), one op forward and one backward, where meta would trace the math path (14 ops)."""
    sdpa = F.scaled_dot_product_attention

    def efficient(q, k, v, *args, **kwargs):
        if q.device.type != "meta" or args or kwargs:
            return sdpa(q, k, v, *args, **kwargs)
        return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, q.requires_grad)[0]

    F.scaled_dot_product_attention = efficient
    try:
        yield
    finally:
        F.scaled_dot_product_attention = sdpa


def _gpu_trace_work(tr, steps: int = 1):
    from .. import roofline

    return roofline.Work(steps * tr.flops, steps * tr.accessed_bytes, steps * len(tr.gpu_ops),
                         steps * tr.tf32_flops, steps * tr.lt_saved_bytes)


def step_work(fixes, dims: dict, steps: int = 2, graph: bool = False):
    """(Work of `steps` steps, kernels) of Model(fixes) trained by the loop its fixes call for, traced on meta as
    CUDA runs it: its optimizer built once and warmed by one step (momentum buffers exist, as in steady state),
    the original's SGD foreach (CUDA's default; meta's would be a for loop), attention's efficient kernel, and
    only ops that launch work on the device counted (trace.OpTrace.gpu_ops: not x[j]'s reads of a CPU index,
    not allocations). The fixed loop's fused SGD is traced as foreach there (3 ops where CUDA launches 1).
    graph: also the op trace of one `fixed_step` (what a CUDA graph of the step holds), as a third value."""
    from ..trace import meta_reads, trace_ops
    from .model import train

    d = dims
    with torch.device("meta"):
        model = Model(fixes, d["C"], d["H"], d["E"])
        opt = fixed_optimizer(model) if "loop" in model.fixed else \
            torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, foreach=True)
    x = torch.empty(steps * d["batch"], d["T"], 8, device="meta")
    y = torch.empty(steps * d["batch"], dtype=torch.long, device="meta")
    with meta_reads(), _attention_as_on_cuda():
        trace_ops(train, model, x[:d["batch"]], y[:d["batch"]], 1, d["batch"], opt=opt)  # the first step: not traced
        tr = trace_ops(train, model, x, y, steps, d["batch"], opt=opt)
        if not graph:
            return _gpu_trace_work(tr), len(tr.gpu_ops)
        one = trace_ops(fixed_step(model, opt, x, y), torch.zeros(d["batch"], dtype=torch.long, device="meta"))
    return _gpu_trace_work(tr), len(tr.gpu_ops), one


def gpu_work(dims: dict | None = None, steps: int = 2) -> dict:
    """{stage: (Work per `steps` steps, kernels)} at the GPU shape for the original, the fixed loop eager and the
    fixed step as one CUDA graph (`step_work`): the graph's kernels are the fixed step's plus the replay's copies
    (REPLAY_EXTRA a step), launched by one replay and REPLAY_EXTRA copies a step."""
    import dataclasses

    d = dims or shape("cuda")
    original = step_work(False, d, steps)
    work, kernels, graph = step_work(True, d, steps, graph=True)
    g = _gpu_trace_work(graph, steps)
    g = dataclasses.replace(g, launches=steps * (1 + REPLAY_EXTRA))
    return {"original": original, "fixed": (work, kernels),
            "fixed, one CUDA graph": (g, steps * (len(graph.gpu_ops) + REPLAY_EXTRA))}


def gpu_model(gpus=None, dims: dict | None = None) -> dict[str, dict[str, float]]:
    """The floor of one training step (seconds) on named GPUs: the roofline (datasheet peaks; host time per eager
    launch roofline.ASSUMED_LAUNCH, the H200 host's 7.3 µs) of each stage's work from `gpu_work`, and its kernels
    at KERNEL_FLOOR each (they run one after another on the device, launched or replayed). Model, not measured:
    lower bounds, which the H200 measured 4-6× above (`h200_errors`)."""
    from .. import roofline

    steps = 2
    if isinstance(gpus, str):
        gpus = [gpus]
    sheets = {g: roofline.datasheet(g) if isinstance(g, str) else None for g in gpus or roofline.MODEL_GPUS}
    unknown = [g for g, pk in sheets.items() if pk is None]
    if unknown:  # before the minute of tracing, not after
        raise ValueError(f"No datasheet for GPU {unknown[0]!r}: choose from {', '.join(roofline.DATASHEET)}.")
    work = gpu_work(dims, steps)
    out = {}
    for g, pk in sheets.items():
        row = {n: max(pk.floor(w), k * KERNEL_FLOOR) / steps for n, (w, k) in work.items()}
        row["launches per step (original, fixed)"] = (work["original"][0].launches / steps,
                                                      work["fixed"][0].launches / steps)
        row["kernels per step (fixed)"] = work["fixed, one CUDA graph"][1] / steps
        out[g] = row
    return out


def h200_errors(model: dict | None = None) -> dict[str, float]:
    """Per stage, and for the original over the graph, what the H200 measured over `gpu_model`'s H200 floor
    (H200_MEASURED): 1.0 would be a floor the step reached; a ratio's error says how far the floors' ratio missed."""
    row = (model or gpu_model(["H200"]))["H200"]
    out = {n: ms * 1e-3 / row[n] for n, ms in H200_MEASURED["step_ms"].items()}
    out["original / graph"] = H200_MEASURED["ratio"] / (row["original"] / row["fixed, one CUDA graph"])
    return out


def gpu_model_figure(model: dict | None = None):
    """The model's floors per GPU, grouped bars (log): labelled model."""
    from .. import plots, roofline

    model = model or gpu_model()
    rows = {f"{g} · model": {k: v for k, v in r.items() if isinstance(v, float) and not k.startswith("kernels")}
            for g, r in model.items()}
    return plots.machines(rows, title="Floor of one training step, roofline model (datasheet peaks, "
                                      f"{roofline.ASSUMED_LAUNCH['H100'] * 1e6:g} µs per eager op, "
                                      f"{KERNEL_FLOOR * 1e6:g} µs per kernel)")
