"""Lesson 05 on a GPU: capture by hand (and the kept-reference bug), what a failed capture leaves behind,
the GPU lesson (a captured graph, reduce-overhead), eager against graphed timed with the harness (the
replay and the copy of new inputs apart), the replay checked against float64, seed 003's
make_graphed_callables experiment, and where reduce-overhead applies. On a CPU each says why it cannot
run, in a sentence."""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import torch

from .. import claim_table, compile_notice, compiling, graphs, grading, noise
from .. import device as _device
from ..lesson import Lesson, Variant
from ..timing import fmt_time
from .evidence import ModelStep, _preset_for, gpu_model, model_step, step_kernels
from .lessons import LESSON, MODEL_BATCH, MODEL_LAYERS, _shape, make_inputs
from .variants import eager_step, log_item, pseudo_linear


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


def failed_capture_demo(device=None) -> str:
    """A capture of `.item()` with torch.cuda.graph by hand, what it leaves behind, and the course's clean-up.
    The inputs are made and the step warmed up before capturing: made inside, the inputs' copy from pageable host
    memory would fail first, and that failure (torch's own check in Copy.cu, before CUDA sees the copy) ends the
    capture cleanly, leaving nothing behind (so it did on the H200, torch 2.11)."""
    dev = _device.pick(device)
    if dev.type != "cuda" or not graphs.has_graphs():
        return _cpu_note("Showing what a failed capture leaves behind")
    from .catalogue import _xy

    x, w = _xy(dev)
    log_item(x, w)  # warm-up outside the capture (cuBLAS's handle), as PyTorch's notes ask

    def randn_says() -> str:
        try:
            torch.randn(4, device=dev)
            return "works"
        except RuntimeError as err:
            return f"raises: {str(err).splitlines()[0][:160]}"

    def which_stream() -> str:
        return "the one from before" if torch.cuda.current_stream() == stream else "the capture's side stream"

    stream, pool, graph = torch.cuda.current_stream(), torch.cuda.graph_pool_handle(), torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, pool=pool):
            log_item(x, w)
        return "the capture succeeded: nothing to show"
    except RuntimeError as err:
        cause = graphs._root_cause(err)
        lines = [f"torch.cuda.graph raised: {str(err).splitlines()[0][:160]}",
                 f"  (caused by: {str(cause).splitlines()[0][:160]})" if cause is not err else "",
                 "left behind, before any clean-up:",
                 f"  the current stream is {which_stream()}",
                 f"  torch.randn(4, device='cuda') {randn_says()}"]
    done = graphs.recover_from_failed_capture(stream, torch.cuda.graph.default_capture_stream, pool, graph)
    lines += ["graphs.recover_from_failed_capture(...): " + "; ".join(done),
              f"  now the current stream is {which_stream()}, and torch.randn {randn_says()}"]
    return "\n".join(line for line in lines if line)


def _prepare_graph(fn, *inputs):
    """Variant.prepare: capture `fn` on static copies of the inputs (outside the clock); the timed
    callable copies new inputs in and replays (the copies are part of a training loop's cost;
    `graph_parts` times the replay and the copies apart)."""
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
    compile_notice.announce("pseudo_linear", "inductor, mode='reduce-overhead'", inputs[0].device)  # not silent

    def step(x, w, b, g):
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(x, w, b)
        return (out, *torch.autograd.grad(out, (x, w, b), g))

    for _ in range(3):
        step(*inputs)
    return step


# Seconds the explorer counts for a capture before it has seen one here (its warm-up steps and the capture;
# after a run it counts what preparing took): the H200 run (2026-11-26) recorded 0.012 s at the overhead-bound shape.
CAPTURE_BUDGET_S = 1.0


def gpu_lesson(device=None) -> Lesson:
    """The lesson with the GPU variants this torch offers: eager, a hand-captured graph, and
    reduce-overhead (where torch.compile works on this GPU)."""
    dev = _device.pick(device)
    variants = list(LESSON.variants)
    if dev.type == "cuda" and graphs.has_graphs():
        variants.append(Variant("CUDA graph", eager_step, "the whole step captured; new inputs copied into its "
                                "static buffers, then replayed", prepare=_prepare_graph,
                                prepare_budget=CAPTURE_BUDGET_S))
        if graphs.reduce_overhead_problem(dev) is None:
            variants.append(Variant("reduce-overhead", eager_step, "torch.compile(mode='reduce-overhead')",
                                    prepare=_prepare_reduce_overhead, prepare_budget=compiling.COMPILE_BUDGET_S))
    return dataclasses.replace(LESSON, variants=variants)


@dataclass
class GraphParts:
    """One captured step against eager, in paired rounds (noise.compare): the replay alone (the inputs already
    in the static buffers) and the replay after copying new inputs in, with what the copy's bytes predict."""

    params: dict
    comparison: object  # noise.Comparison of "eager", "graph replay", "graph replay + copies in"
    copy_bytes: int  # read and written by copying new inputs into the static buffers
    step_bytes: int  # touched by the step's ops (traced)

    @property
    def replay(self):
        return self.comparison.ratio("eager", "graph replay")

    @property
    def with_copies(self):
        return self.comparison.ratio("eager", "graph replay + copies in")

    @property
    def copies_model(self) -> float:
        """eager ÷ (replay + copies) when the step and the copies are memory-bound alike (model):
        the step's bytes over the step's and the copies' bytes."""
        return self.step_bytes / (self.step_bytes + self.copy_bytes)

    def __str__(self) -> str:
        return "\n".join([
            self.replay.say("measured: eager takes {r:.2f}× the replay alone (inputs already in the static buffers)"),
            self.with_copies.say("measured: eager takes {r:.2f}× the replay after copying new inputs in") +
            f" (the copies move {_device.fmt_bytes(self.copy_bytes)} beside the step's "
            f"{_device.fmt_bytes(self.step_bytes)}: where both are memory-bound, that predicts "
            f"{self.copies_model:.2f}×)"])


def graph_parts(params: dict | None = None, device=None, min_run_time: float = 0.02,
                max_time: float = 8.0) -> GraphParts | str:
    """Eager, the replay alone and the replay with new inputs copied in, at `params`, in paired rounds."""
    dev = _device.pick(device)
    if dev.type != "cuda" or not graphs.has_graphs():
        return _cpu_note("Timing a graph replay")
    p = LESSON.check(params or {}, dev, torch.float32)
    inputs = make_inputs(p, dev, torch.float32)
    cap = graphs.capture(eager_step, *inputs, copy_inputs=False)  # the inputs are the static buffers
    fresh = make_inputs(p, dev, torch.float32)
    # eager gets leaves of its own: the graph's static output keeps the static leaves' AccumulateGrad nodes, made on
    # the capture stream, alive, and eager on them would pay a cross-stream wait per gradient (and warn, once)
    own = make_inputs(p, dev, torch.float32)
    steps = {"eager": lambda: eager_step(*own), "graph replay": cap.replay,
             "graph replay + copies in": lambda: cap.replay(*fresh)}
    cmp = noise.compare(steps, pairs=[("eager", "graph replay"), ("eager", "graph replay + copies in")],
                        min_run_time=min_run_time, max_time=max_time, device=dev)
    copy_bytes = 2 * sum(t.numel() * t.element_size() for t in fresh)
    return GraphParts(p, cmp, copy_bytes, sum(b for *_n, b in step_kernels(p)))


@dataclass
class GpuComparison:
    params: dict
    run: object | None  # lesson.Run on a GPU
    model: ModelStep
    note: str = ""
    parts: GraphParts | None = None

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
                "measured: eager takes {r:.2f}× the graph's time (replay and input copies) here")
            lines.append(f"{said}; the model predicted {self.model.speedup:.2f}× for a {self.model.gpu}.")
        if self.parts is not None:
            lines.append(str(self.parts))
        return "\n".join(lines)


def compare_on_gpu(params: dict | None = None, device=None, gpu: str | None = None,
                   min_run_time: float = 0.2) -> GpuComparison:
    """Eager vs graphed (vs reduce-overhead), timed with the harness on a GPU, then the replay and the input
    copies apart in paired rounds; on a CPU, the model only."""
    dev = _device.pick(device)
    p = LESSON.check(params or {}, dev, torch.float32)
    model = model_step(p, gpu or _preset_for(dev))
    if dev.type != "cuda" or not graphs.has_graphs():
        return GpuComparison(p, None, model, _cpu_note("Timing a graph replay") + "\nBelow: the model's prediction.")
    run = gpu_lesson(dev).run(p, dev, min_run_time=min_run_time)
    return GpuComparison(p, run, gpu_model(p, dev) if gpu is None else model, parts=graph_parts(p, dev, max_time=4.0))


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
    from ..lesson04_launch_overhead import fixed_model

    return fixed_model(kind, width, layers, device)


def seed_model_bytes(p: dict) -> int:
    """float32 bytes of graphed_callables_ratio at `p`: each of the six models (two kinds, eager, graphed and
    whole step captured) holds its weights and their gradients (Linear: width² + width a layer), and a
    graph's static inputs, outputs and private pool keep about four activations a layer."""
    B, N, L = p["batch"], p["width"], p["layers"]
    weights = 3 * 2 * L * (N * N + N) + 3 * 2 * L * 2 * N  # Linear and PseudoLinear, three of each
    return 4 * (2 * weights + 6 * (2 * L + 4) * B * N)


# How far the graphed ratio may stray beyond the interval the mechanism allows (between 1 and the whole-step
# model's ratio): the model leaves out cuBLAS's and nn.Module's host costs and the stream waits, which differ
# between the two kinds.
LEFTOVER_MARGIN = 1.5


def _left_eager(graphed, x) -> int:
    """Gradient accumulations make_graphed_callables leaves eager: the AccumulateGrad nodes its graphed
    function feeds (x and each parameter; torch/cuda/graphs.py, Graphed.backward returns their gradients)."""
    out = graphed(x)
    return sum(type(fn).__name__ == "AccumulateGrad" for fn, _ in out.grad_fn.next_functions if fn is not None)


def graphed_band(p: dict, device="cuda") -> tuple[float, float, float]:
    """(low, high, model): where Linear ÷ PseudoLinear with make_graphed_callables can lie. Both kinds keep the
    same eager remainder (one accumulation per parameter and for x, the autograd engine, the graphed function),
    so when it dominates the ratio tends to 1; when the graphs' device time dominates, to the whole-step
    model's ratio (launch model, this GPU's datasheet); LEFTOVER_MARGIN either side."""
    whole = gpu_model(p, device, "Linear").graphed_s / gpu_model(p, device, "PseudoLinear").graphed_s
    return min(1.0, whole) / LEFTOVER_MARGIN, max(1.0, whole) * LEFTOVER_MARGIN, whole


def graphed_callables_ratio(width: int = 512, batch: int = MODEL_BATCH, layers: int = MODEL_LAYERS,
                            device=None, min_run_time: float = 0.2, max_time: float = 8.0) -> dict | str:
    """Seed 003's experiment on this GPU: Linear's training step over PseudoLinear's, eager, with each model
    wrapped in make_graphed_callables (forward and backward graphed), and with the whole step captured
    (graphs.capture: accumulation into .grad included), in paired rounds (the noise rule: "sentence" states
    a ratio only where the rounds agree). "left_eager": the gradient accumulations make_graphed_callables
    leaves eager, per kind; "warned": what PyTorch warned of, among what the lesson teaches (the AccumulateGrad
    nodes' stream; once a process). A sentence without a GPU."""
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
    with warnings.catch_warnings(record=True) as seen:
        # The autograd engine's device thread makes its first cuBLAS call before it has a current CUDA context;
        # cuBLAS's handle pool then makes the primary context current itself and warns once
        # (aten/src/ATen/cuda/CublasHandlePool.cpp, "a corner case ... seen in multithreaded use-cases"): harmless.
        warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
        out = _seed_experiment(width, batch, layers, dev, min_run_time, max_time)
    taught = [w for w in seen if str(w.message).startswith(ACCUMULATE_GRAD_WARNING)]
    graphs._warn_again([w for w in seen if w not in taught])
    out["warned"] = [str(w.message).split(". ")[0] + "." for w in taught]  # TORCH_WARN_ONCE: the first time only
    return out


# The warning make_graphed_callables' gradients meet (torch/csrc/autograd/input_buffer.cpp, TORCH_WARN_ONCE): the
# graphed function hands each gradient from the current stream to an AccumulateGrad node made during the wrapper's
# warm-up on its side stream (torch/cuda/graphs.py: the warm-up's outputs keep the nodes alive into the capture).
ACCUMULATE_GRAD_WARNING = "The AccumulateGrad node's stream does not match"


def _seed_experiment(width, batch, layers, dev, min_run_time, max_time) -> dict:
    x = torch.randn(batch, width, device=dev)
    g = torch.randn(batch, width, device=dev)
    steps, left = {}, {}
    for kind in ("Linear", "PseudoLinear"):
        xs = [x.clone().requires_grad_() for _ in range(3)]  # an input leaf each: no step accumulates into another's
        eager, graphed, whole = (seed_model(kind, width, layers, dev) for _ in range(3))
        graphed = torch.cuda.make_graphed_callables(graphed, (xs[1],))
        left[kind] = _left_eager(graphed, xs[1])
        captured = graphs.capture(lambda m=whole, x=xs[2]: m(x).backward(g), copy_inputs=False)
        steps[f"{kind} eager"] = lambda m=eager, x=xs[0]: m(x).backward(g)
        steps[f"{kind} graphed"] = lambda m=graphed, x=xs[1]: m(x).backward(g)
        # the graph reads the model's weights and gradients and x at their addresses: keep them alive with it
        steps[f"{kind} whole step captured"] = lambda c=captured, m=whole, x=xs[2]: c.replay()
    how = ("eager", "graphed", "whole step captured")
    pairs = [(f"Linear {h}", f"PseudoLinear {h}") for h in how]
    cmp = noise.compare(steps, pairs=pairs, min_run_time=min_run_time / 4, max_time=max_time, device=dev)
    ratio = {h: cmp.ratio(f"Linear {h}", f"PseudoLinear {h}") for h in how}
    sentence = "; ".join(claim_table.say(r, f"{h}: Linear takes {{x}} PseudoLinear's time") for h, r in ratio.items())
    # "table": each step over the rounds with the ratios the sentence quotes (not the last round's timings)
    return {"timings": cmp.over_rounds(), "table": claim_table.of(cmp, pairs),
            "ratio": {k: r.median for k, r in ratio.items()}, "sentence": sentence,
            "left_eager": left, "params": {"width": width, "batch": batch, "layers": layers}}


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
