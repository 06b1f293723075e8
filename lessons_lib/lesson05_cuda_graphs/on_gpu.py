"""Lesson 05 on a GPU: capture by hand (and the kept-reference bug), the GPU lesson (a captured graph,
reduce-overhead), eager against graphed timed with the harness, the replay checked against float64,
seed 003's make_graphed_callables experiment, and where reduce-overhead applies. On a CPU each says
why it cannot run, in a sentence."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .. import graphs, grading, noise
from .. import device as _device
from ..lesson import Lesson, Variant
from ..timing import fmt_time
from .evidence import ModelStep, _preset_for, gpu_model, model_step
from .lessons import LESSON, MODEL_BATCH, MODEL_LAYERS, _shape, make_inputs
from .variants import eager_step, pseudo_linear


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
