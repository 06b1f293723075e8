"""Lesson 04: kernel launch overhead, fusion and the three regimes (forum seed 003, PseudoLinear).

A `PseudoLinear` layer computes `x * w + b`: N times fewer FLOPs than `nn.Linear` at width N,
yet in the thread it is no faster at width 160. Every op costs a fixed overhead (dispatch, and
on a GPU a kernel launch) before it does any work, and an elementwise op is limited by the
bytes it moves, not by its FLOPs. Which bound wins depends on the shape: overhead at small
shapes, memory for elementwise ops at large ones, compute for big GEMMs.

So that every variant computes the *same* function, `Linear` here multiplies by the diagonal
matrix `W = diag(w)`: it gives PseudoLinear's output exactly and pays a full GEMM for it, which
is the thread's comparison. Shapes: x (batch, width), W (layers, width, width), w and b
(layers, width).
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import compiling, grading, noise, plots, results, roofline, timing
from . import device as _device
from .display import text_table
from .grading import Verdict
from .lesson import Lesson, Param, Variant
from .timing import fmt_time
from .trace import on_meta, trace_ops
from .widgets import Explorer

LESSON_KEY = "04_launch_overhead"  # also the key of the thread's reported figures in lessons_lib/reference
THREAD_SHAPE = {"width": 160, "batch": 32768, "layers": 4}  # width: the question; batch: the fixing reply; depth ours

def _measure(fn, *args, label: str, min_run_time: float, max_time: float = 1.0) -> timing.Timing:
    """timing.measure with an upper bound on the whole measurement (a demo never runs away)."""
    return timing.measure(fn, *args, label=label, min_run_time=min_run_time, max_time=max_time)


# --- the variants: fn(x, W, w, b) -> out, one layer after another ---------------------------------


def linear(x, W, w, b):
    """nn.Linear per layer: one GEMM with the bias (addmm), 2·batch·width² FLOPs each."""
    for l in range(W.shape[0]):
        x = F.linear(x, W[l], b[l])
    return x


def pseudo_linear(x, W, w, b):
    """The thread's PseudoLinear, fixed: two elementwise ops per layer (mul, then add)."""
    for l in range(w.shape[0]):
        x = x * w[l] + b[l]
    return x


def addcmul(x, W, w, b):
    """The same maths in one op per layer: torch.addcmul(b, x, w) = b + x * w."""
    for l in range(w.shape[0]):
        x = torch.addcmul(b[l], x, w[l])
    return x


def linear_tf32(x, W, w, b):
    """Linear with TF32 allowed for its matmuls (torch.backends.cuda.matmul.allow_tf32, off by default
    since torch 1.12): on an Ampere or newer GPU the GEMM runs on TF32 tensor cores (inputs rounded to
    a 10-bit mantissa); on a CPU or an older GPU it is Linear."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return linear(x, W, w, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def mul_add_inplace(x, W, w, b):
    """Two ops per layer, one new tensor: the add writes into the product (autograd allows it,
    because mul's backward needs x and w, not its own output)."""
    for l in range(w.shape[0]):
        x = (x * w[l]).add_(b[l])
    return x


# --- inputs, a training step, memory ---------------------------------------------------------------


def make_inputs(p: dict, device, dtype):
    """x ~ N(0, 1); w in [0.5, 1.5) so a deep stack neither explodes nor vanishes; W = diag(w)."""
    B, N, L = p["batch"], p["width"], p["layers"]
    x = torch.randn(B, N, device=device, dtype=dtype)
    w = 0.5 + torch.rand(L, N, device=device, dtype=dtype)
    b = 0.1 * torch.randn(L, N, device=device, dtype=dtype)
    W = torch.diag_embed(w)
    return x, W, w, b


def make_train_inputs(p: dict, device, dtype):
    """The same, every parameter and x requiring grad, and an upstream gradient g."""
    x, W, w, b = (t.requires_grad_() for t in make_inputs(p, device, dtype))
    g = torch.randn(p["batch"], p["width"], device=device, dtype=dtype)
    return x, W, w, b, g


def train_step(fn, x, W, w, b, g):
    """Forward and backward from g. Returns the output and the gradients of x, the weight and b.

    The weight's gradient is the diagonal of dW for Linear (dW = g^T x restricted to diag(w)) and
    dw for the others, so all variants are compared on the same numbers. `autograd.grad` returns
    gradients instead of accumulating them, so repeated timed steps add nothing.
    """
    out = fn(x, W, w, b)
    gx, gW, gw, gb = torch.autograd.grad(out, (x, W, w, b), g, allow_unused=True)
    weight = gW.diagonal(dim1=-2, dim2=-1) if gW is not None else gw
    return out, gx, weight, gb


def peak_bytes(p: dict, dtype) -> int:
    """Forward peak, inputs included: x, a few activations, W (width² per layer) and the vectors."""
    e = torch.empty(0, dtype=dtype).element_size()
    B, N, L = p["batch"], p["width"], p["layers"]
    return e * (4 * B * N + L * N * N + 2 * L * N)


def train_peak_bytes(p: dict, dtype) -> int:
    """Training-step peak: every layer's activations saved (two per layer), W and dW, the gradients."""
    e = torch.empty(0, dtype=dtype).element_size()
    B, N, L = p["batch"], p["width"], p["layers"]
    return e * ((2 * L + 6) * B * N + 2 * L * N * N + 6 * L * N)


# --- compile as a variant (Variant.prepare: compiled outside the clock, its cost reported) ---------


def _prepare_compiled(fn, *inputs):
    """Compile `fn` for these inputs (forward, or forward + backward when g is passed) and make the
    first, cold call here, outside the clock. Refuses with a sentence when it cannot compile."""
    step = train_step if len(inputs) == 5 else None
    compiling.reset()  # a fresh compile per shape, not Dynamo's recompile limit
    c = compiling.compile_cold(fn, *inputs, step=step)
    if not c.ok:
        raise ValueError(c.problem)
    c.fn._lesson04_cold_s = c.cold_s
    return c.fn


def _fused_work(x, W, w, b) -> roofline.Work:
    """PseudoLinear's forward as one fused kernel: read x, w and b once, write the output once."""
    moved = (2 * x.numel() + w.numel() + b.numel()) * x.element_size()
    return roofline.Work(flops=0, bytes=moved, launches=1)


def compiled_work(params: dict, dtype=torch.float32) -> dict[str, roofline.Work]:
    """The explorer's work for the compiled forward: one fused kernel (the op trace of its `fn` sees
    eager PseudoLinear's ops). Traced on meta: nothing allocated."""
    return {"compiled": _fused_work(*on_meta(*make_inputs(params, torch.device("meta"), dtype)))}


PARAMS = [
    Param("width", "width (features)", cpu=160, gpu=160, lo=1, hi=32768),
    Param("batch", "batch (rows)", cpu=256, gpu=32768, lo=1, hi=1 << 20),
    Param("layers", "layers", cpu=4, gpu=4, lo=1, hi=64),
]
ODD_SHAPES = [
    {"width": 33, "batch": 5, "layers": 3},
    {"width": 1, "batch": 1, "layers": 1},
    {"width": 7, "batch": 17, "layers": 2},
]
EAGER_VARIANTS = [
    Variant("Linear", linear, "F.linear per layer (nn.Linear), W = diag(w)"),
    Variant("PseudoLinear", pseudo_linear, "x * w + b: two ops per layer"),
    Variant("addcmul", addcmul, "one op per layer"),
]


LESSON = Lesson(
    key=LESSON_KEY,
    title="Linear vs PseudoLinear: overhead, memory, compute",
    params=PARAMS,
    variants=EAGER_VARIANTS,
    make_inputs=make_inputs,
    peak_bytes=peak_bytes,
    reduction=lambda p: p["layers"],  # elementwise: rounding grows with depth, not width
    baseline="PseudoLinear",
    compare=("Linear", "PseudoLinear"),
    odd_shapes=ODD_SHAPES,
)

MUL_ADD_INPLACE = Variant("mul + add_", mul_add_inplace, "in place where autograd allows")
# Every eager rewrite, forward only: what the float64 check and the by-hand table cover (the explorer and
# the recorded results keep to LESSON's three).
FORWARD_FIXES = dataclasses.replace(LESSON, variants=[*EAGER_VARIANTS, MUL_ADD_INPLACE])
TRAIN_LESSON = dataclasses.replace(
    LESSON, key="04_launch_overhead_train", title="Linear vs PseudoLinear, training step",
    make_inputs=make_train_inputs, peak_bytes=train_peak_bytes, step=train_step,
    # dW sums over the batch
    reduction=lambda p: max(p["layers"], p["batch"]),
    variants=[*EAGER_VARIANTS, MUL_ADD_INPLACE])


def with_compiled(lesson: Lesson) -> Lesson:
    """The lesson plus a torch.compile'd PseudoLinear (compiled outside the clock, via prepare)."""
    v = Variant("compiled", pseudo_linear, "torch.compile(PseudoLinear): one fused kernel",
                prepare=_prepare_compiled)
    return dataclasses.replace(lesson, variants=[*lesson.variants, v])


def with_tf32(lesson: Lesson) -> Lesson:
    """The lesson plus Linear with TF32 allowed (its floor uses the TF32 peak where the GPU has one).
    Not in the float64 checks: TF32 rounds inputs to 10 mantissa bits, outside float32's tolerance."""
    v = Variant("Linear (TF32)", linear_tf32, "F.linear with torch.backends.cuda.matmul.allow_tf32 = True")
    return dataclasses.replace(lesson, variants=[*lesson.variants, v])


def has_tf32(device) -> bool:
    """A CUDA GPU with TF32 tensor cores (compute capability 8.0 or newer)."""
    dev = torch.device(device)
    return dev.type == "cuda" and _device.has_cuda() and torch.cuda.get_device_capability(dev) >= (8, 0)


def explorer(device=None, compiled: bool | None = None, training: bool = False,
             tf32: bool | None = None) -> Explorer:
    """The toolkit's explorer on this lesson: after a Run it names each variant's regime and prints
    its three roofline bounds; after a Sweep, where each variant's regime changes.

    compiled: add a torch.compile'd variant (default: on a GPU only; a compile on a CPU takes
        seconds per shape, the first one much longer, and the run's estimate does not include it).
        Its forward counts as one fused kernel in the floors and regimes.
    tf32: add "Linear (TF32)", Linear with TF32 allowed for its matmuls (default: on a GPU with TF32
        tensor cores, compute capability 8.0+; PyTorch's own default for matmuls is off). Its compute
        floor uses the TF32 peak; on a CPU it is Linear again.
    """
    dev = _device.pick(device)
    lesson = TRAIN_LESSON if training else LESSON
    if compiled is None:
        compiled = dev.type == "cuda" and compiling.problem(dev) is None
    if tf32 is None:
        tf32 = has_tf32(dev)
    if tf32:
        lesson = with_tf32(lesson)
    if compiled:
        lesson = with_compiled(lesson)
    return Explorer(lesson, dev, work_of=compiled_work if compiled and not training else None)


# --- the thread's benchmark, reconstructed from the reply that lists its three mistakes -------------


class PostedPseudoLinear(nn.Module):
    """PseudoLinear as the reply quotes it, with the stray `+ x`."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x):
        return x * self.weight + self.bias + x  # mistake 2: `+ x`, an extra pass over memory


def posted_model(kind: str, width: int, layers: int, device=None) -> nn.Module:
    """`layers` × (layer, ReLU): mistake 3, a ReLU in both arms adds the same cost to each."""
    make = {"Linear": lambda: nn.Linear(width, width), "PseudoLinear": lambda: PostedPseudoLinear(width)}[kind]
    return nn.Sequential(*[m for _ in range(layers) for m in (make(), nn.ReLU())]).to(device)


def posted_step(model: nn.Module, batch: int, width: int):
    """One timed iteration as described: mistake 1, the random input is made inside the timing."""
    x = torch.randn(batch, width, device=next(model.parameters()).device)
    model(x).sum().backward()


def fixed_model(kind: str, width: int, layers: int, device=None) -> nn.Module:
    """No `+ x`, no ReLU: only the layers being compared."""
    class Pseudo(PostedPseudoLinear):
        def forward(self, x):
            return x * self.weight + self.bias

    make = {"Linear": lambda: nn.Linear(width, width), "PseudoLinear": lambda: Pseudo(width)}[kind]
    return nn.Sequential(*[make() for _ in range(layers)]).to(device)


def fixed_step(model: nn.Module, x, g):
    """The input made once, outside the timing; forward and backward from a fixed gradient."""
    model(x).backward(g)


def _module_ops(fn, *args) -> list[str]:
    return [op.name for op in trace_ops(fn, *args).compute_ops if not op.name.startswith("_record_function")]


def mistakes_table(width: int = 160, batch: int = 256, layers: int = 4) -> str:
    """Ops that launch work in one training iteration, posted vs fixed (traced on meta: nothing runs)."""
    rows = [("benchmark", "model", "ops", "random", "relu + its backward", "add", "mul")]
    for label, build, step in (("posted", posted_model, "posted"), ("fixed", fixed_model, "fixed")):
        for kind in ("Linear", "PseudoLinear"):
            model = build(kind, width, layers, "meta")
            if step == "posted":
                ops = _module_ops(posted_step, model, batch, width)
            else:
                x = torch.empty(batch, width, device="meta")
                ops = _module_ops(fixed_step, model, x, torch.empty(batch, width, device="meta"))
            rows.append((label, kind, str(len(ops)), str(sum(o in ("randn", "normal_", "rand", "uniform_") for o in ops)),
                         str(sum(o.startswith("relu") or o.startswith("threshold") for o in ops)),
                         str(ops.count("add")), str(ops.count("mul"))))
    return text_table(rows, numbers=True)


REPRODUCE_PAIRS = [("posted Linear", "posted PseudoLinear"), ("fixed Linear", "fixed PseudoLinear")]


def reproduce(device=None, width: int | None = None, batch: int | None = None, layers: int = 4,
              min_run_time: float = 0.02, max_time: float = 6.0) -> noise.Comparison:
    """The posted benchmark and the fixed one, both timed with the course harness (training steps),
    in paired alternating rounds (the noise rule): `.timings` holds the last round's, and the ratios
    Linear / PseudoLinear are medians of per-round ratios."""
    dev = _device.pick(device)
    p = LESSON.check({"width": width or LESSON.param("width").default(dev),
                      "batch": batch or LESSON.param("batch").default(dev), "layers": layers}, dev, torch.float32)
    _device.check_fits(train_peak_bytes(p, torch.float32), dev, "the benchmark")
    W, B, L = p["width"], p["batch"], p["layers"]
    torch.manual_seed(0)
    with _device.oom_guard(dev, "the benchmark"):
        fns = {}
        for kind in ("Linear", "PseudoLinear"):
            fns[f"posted {kind}"] = (lambda m: lambda: posted_step(m, B, W))(posted_model(kind, W, L, dev))
        x, g = torch.randn(B, W, device=dev), torch.randn(B, W, device=dev)
        for kind in ("Linear", "PseudoLinear"):
            fns[f"fixed {kind}"] = (lambda m: lambda: fixed_step(m, x, g))(fixed_model(kind, W, L, dev))
        return noise.compare(fns, pairs=REPRODUCE_PAIRS, min_run_time=min_run_time, max_time=max_time)


# --- what the thread reported: read from the recorded file, never copied into code -------------------


@dataclasses.dataclass
class ThreadReport:
    """The thread's own figures, from lessons_lib/reference (kind "reported"; the GPUs are not named)."""

    label: str  # the recorded file's label: hardware as the thread gives it, kind and source
    runs: list[dict]  # the poster's tqdm totals: {"width", "iterations", "linear_s", "pseudo_linear_s"}
    runs_note: str
    tables: dict[str, dict[int, float]]  # {table: {width: PseudoLinear speed-up over Linear}}
    tables_note: str


def thread_report() -> ThreadReport | None:
    """The seed thread's figures from the recorded reported file, or None if it is missing."""
    for rec in results.for_lesson(LESSON_KEY, kinds="reported"):
        data = rec.lessons[LESSON_KEY]
        posted, speedups = data.get("posted_runs") or {}, data.get("speedups") or {}
        tables = {name: dict(zip(t["values"], t["speedup"])) for name, t in (speedups.get("tables") or {}).items()}
        # the file keeps its tables by name (sorted); shown in the thread's order: the longest table (the
        # first reply's), then the other GPU, then that GPU with CUDA graphs
        tables = dict(sorted(tables.items(), key=lambda kv: ("graph" in kv[0].lower(), -len(kv[1]))))
        if posted or tables:
            return ThreadReport(rec.label(), list(posted.get("runs", [])), posted.get("note", ""), tables,
                                speedups.get("note", ""))
    return None


_NO_REPORT = "The thread's reported figures are not in lessons_lib/reference here (reported-seed003-*.json)."


def thread_runs_table() -> str:
    """The poster's totals as reported: Linear and PseudoLinear seconds, and their ratio."""
    rep = thread_report()
    if rep is None or not rep.runs:
        return _NO_REPORT
    rows = [("width", "iterations", "Linear (s)", "PseudoLinear (s)", "speed-up")]
    for r in rep.runs:
        rows.append((str(r["width"]), str(r["iterations"]), f"{r['linear_s']:.1f}", f"{r['pseudo_linear_s']:.1f}",
                     f"{r['linear_s'] / r['pseudo_linear_s']:.2f}×"))
    return f"{rep.label}\n" + text_table(rows, numbers=True) + f"\n({rep.runs_note})"


def reproduce_table(cmp: noise.Comparison) -> str:
    """Each benchmark's median over the paired rounds (the harness's IQR from the last round)."""
    rows = [("benchmark", "median over rounds", "± IQR/2 (last round)")]
    rows += [(n, fmt_time(cmp.median(n)), fmt_time(cmp.timings[n].iqr / 2)) for n in cmp.names]
    return text_table(rows, numbers=True) + f"\n({len(cmp.rounds[cmp.names[0]])} paired rounds, alternating order)"


def reproduce_summary(cmp: noise.Comparison) -> str:
    """What the reproduction shows on this machine, each sentence decided by the noise rule."""
    posted, fixed = (cmp.ratio(a, b) for a, b in REPRODUCE_PAIRS)
    lines = [f"posted benchmark: " + posted.say("PseudoLinear is {r:.2f}× as fast as Linear "
                                                "(rounds {low:.2f}–{high:.2f}×)"),
             f"fixed benchmark:  " + fixed.say("PseudoLinear is {r:.2f}× as fast as Linear "
                                               "(rounds {low:.2f}–{high:.2f}×)")]
    # fixed ratio over posted ratio, round by round: > 1 when removing the mistakes widened the gap
    change = noise.Ratio([f / p for f, p in zip(fixed.values, posted.values)])
    if not (posted.decided and fixed.decided and change.decided):
        lines.append("Whether removing the mistakes changed the ratio: "
                     + (change if not change.decided else posted if not posted.decided else fixed).not_decided())
    elif change.low > 1.1:
        lines.append("Removing the mistakes widened the gap: the random input and the ReLUs cost both arms the "
                     "same, and `+ x` cost PseudoLinear an extra pass over memory.")
    elif change.high < 1 / 1.1:
        lines.append("Removing the mistakes narrowed the gap here.")
    elif change.low >= 1 / 1.1 and change.high <= 1.1:
        lines.append("Removing the mistakes changed the ratio by less than 10% here.")
    else:
        lines.append("Whether removing the mistakes changed the ratio: " + change.not_decided())
    return "\n".join(lines)


# --- per-op overhead, measured here ---------------------------------------------------------------


def overhead_timings(device=None, min_run_time: float = 0.1) -> list[timing.Timing]:
    """What one tiny op costs here, where the work is nothing and only the overhead remains."""
    return [_measure(fn, *args, label=label, min_run_time=min_run_time)
            for label, fn, args in overhead_cases(_device.pick(device))]


def overhead_cases(dev) -> list[tuple[str, object, tuple]]:
    """(label, fn, args) of `overhead_timings`: tiny ops, and F.linear against the module call on the
    same parameters."""
    one = torch.zeros(1, device=dev)
    row = torch.zeros(1, 1, device=dev)
    lin = nn.Linear(1, 1).to(dev)

    def add_no_grad(a):
        with torch.no_grad():
            return a + a

    def forward_backward(m, x):
        m(x).sum().backward()

    xg = torch.zeros(1, 1, device=dev, requires_grad=True)
    # F.linear gets the module's own parameters (requiring grad, so autograd records both calls alike):
    # the difference between the two is the module call alone.
    cases = [
        ("1-element add", torch.add, (one, one)),
        ("1-element add under no_grad()", add_no_grad, (one,)),
        ("F.linear, 1×1 (the module's parameters)", F.linear, (row, lin.weight, lin.bias)),
        ("nn.Linear(1, 1) module call", lin, (row,)),
        ("nn.Linear(1, 1) forward + backward", forward_backward, (lin, xg)),
    ]
    return cases


def overhead_summary(ts: list[timing.Timing]) -> str:
    """The overhead facts, as measured by `overhead_timings` (in its order); each comparison goes
    through the noise rule (undecided when the two timings' spreads overlap too much)."""
    add, add_ng, lin_fn, lin_mod, fwd_bwd = ts
    ng = noise.from_timings(add_ng, add)
    mod = noise.from_timings(lin_mod, lin_fn)
    return (f"A 1-element add costs {fmt_time(add.median)}: that is the per-op overhead, with no work to do.\n"
            "Wrapping it in `with torch.no_grad():`: " + ng.say(
                "{r:.2f}× the add alone (entering and leaving the context is not free)",
                tie="about the same as the add alone") + ".\n"
            "nn.Linear as a module, against F.linear on the same parameters (both requiring grad): " + mod.say(
                "{r:.1f}× (the module call's Python machinery)", tie="no measurable difference") + ".\n"
            f"A tiny forward + backward costs {fmt_time(fwd_bwd.median)}, about {fwd_bwd.median / add.median:.0f} "
            "adds' worth (a count of ops, not a comparison).")


def peaks(device=None, dtype=torch.float32) -> roofline.Peaks:
    """The device's measured peaks; their launch cost is the measured per-op overhead, on a CPU too."""
    return roofline.measure_peaks(_device.pick(device), dtype)


def regime_terms(work: roofline.Work, peaks_: roofline.Peaks) -> dict[str, float]:
    """The three lower bounds, in seconds; the largest is the floor, named by `peaks_.regime(work)`."""
    return peaks_.terms(work)


def _bytes(t) -> int:
    """Bytes the ops of a trace read and write (as dispatched)."""
    return t.accessed_bytes


def regime_table(params: dict, device=None, dtype=torch.float32, run=None, training: bool = False) -> str:
    """Per variant: launches, FLOPs, bytes, the three bounds, the regime, and (with a run) time / floor."""
    lesson = TRAIN_LESSON if training else LESSON
    pk = peaks(device, dtype)
    rows = [("variant", "launches", "MFLOP", "MiB moved", "compute", "memory", "overhead", "regime",
             *(("measured", "× floor") if run else ()))]
    below = False
    for name, w in lesson.work(params, dtype).items():
        t = regime_terms(w, pk)
        row = [name, str(w.launches), f"{w.flops / 1e6:.1f}", f"{w.bytes / 2**20:.2f}",
               *(fmt_time(v) for v in t.values()), pk.regime(w)]
        if run:
            med = run.timings[name].median if name in run.timings else float("nan")
            row += [fmt_time(med), f"{med / pk.floor(w):.1f}"]
            below = below or med < pk.floor(w)
        rows.append(tuple(row))
    note = ("\nA ratio below 1 is a point faster than its floor: the floor's bandwidth is measured on buffers "
            "larger than the cache, and data that stays in cache moves faster; or a peak came out low on a busy "
            "machine. The floor is the model's bound, not a law." if below else "")
    return text_table(rows, numbers=True) + note


def regimes(params: dict, device=None, dtype=torch.float32, training: bool = False) -> dict[str, str]:
    """{variant: "compute" | "memory" | "overhead"} at `params` on this device (toolkit classifier)."""
    lesson = TRAIN_LESSON if training else LESSON
    pk = peaks(device, dtype)
    return {n: pk.regime(w) for n, w in lesson.work(params, dtype).items()}


# --- figures ---------------------------------------------------------------------------------------


def sweep_summary(sweep, peaks_: roofline.Peaks) -> str:
    """Linear's time over PseudoLinear's at each width, what the roofline predicts for that ratio, and
    how the measurements sit on their floors."""
    meds = sweep.medians()
    lines = ["width  measured Linear / PseudoLinear  roofline predicts  regimes (Linear, PseudoLinear)"]
    undecided = []
    for v, run in zip(sweep.values, sweep.runs):
        lin, pseudo = run.work["Linear"], run.work["PseudoLinear"]
        r = noise.from_timings(run.timings["Linear"], run.timings["PseudoLinear"])
        undecided += [] if r.decided else [r]
        shown = f"{r.median:.2f}×" if r.decided else f"({r.median:.2f}×, undecided)"
        lines.append(f"{v:5}  {shown:>31}  {peaks_.floor(lin) / peaks_.floor(pseudo):16.2f}×  "
                     f"{peaks_.regime(lin)}, {peaks_.regime(pseudo)}")
    if undecided:
        worst = max(undecided, key=lambda r: r.spread)
        lines.append(f"{len(undecided)} measured ratio(s) marked undecided: {worst.not_decided()}.")
    lines.append(f"This device does {peaks_.flops / peaks_.bandwidth:.1f} FLOPs in the time it moves one byte; "
                 "the more it does, the wider Linear can be before its FLOPs cost more than PseudoLinear's bytes.")
    below = [(n, v) for n in meds for v, run, m in zip(sweep.values, sweep.runs, meds[n])
             if m < peaks_.floor(run.work[n])]
    if below:
        lines.append(f"{len(below)} point(s) ran below their floor: the bandwidth in the floor is measured on "
                     "buffers larger than the cache (data that stays in cache moves faster), or a peak came out "
                     "low on a busy machine.")
    k = linear_exponent(sweep, peaks_)
    if k is not None:
        est, lo, hi = k
        lines.append(f"Linear's time over its compute-bound widths {lo}–{hi} grows as " + est.say(
            "width^{v:.2f} (from {low:.2f} to {high:.2f} within the end points' spreads)") +
            " (the schoolbook count: width^2; a Strassen-like GEMM at most width^1.81).")
        if est.decided:
            lines.append("An exponent near 2 is the schoolbook algorithm at a steady FLOP rate." if est.low >= 1.9
                         else "Below 2: not evidence of fewer multiplications by itself, since a GEMM's FLOP rate "
                         "rises with its size; the achieved-rate check above is the test.")
    return "\n".join(lines)


def linear_exponent(sweep, peaks_: roofline.Peaks) -> tuple[noise.Estimate, int, int] | None:
    """(k, first, last): Linear's time ~ width^k between its first and last compute-bound widths of
    a width sweep (the classifier decides which points), or None with fewer than two such points.
    k is a noise.Estimate: the exponent from the end points' medians, and from their IQR edges (the
    steepest and the flattest the two timings allow); decided when those lie within ±0.1."""
    if sweep.param != "width" or "Linear" not in sweep.runs[0].timings:
        return None
    pts = [(v, r.timings["Linear"]) for v, r in zip(sweep.values, sweep.runs)
           if peaks_.regime(r.work["Linear"]) == "compute"]
    if len(pts) < 2 or pts[-1][0] == pts[0][0]:
        return None
    (w0, t0), (w1, t1) = pts[0], pts[-1]
    span = math.log(w1 / w0)

    def k(a, b):
        return math.log(max(b, 1e-12) / max(a, 1e-12)) / span

    vals = [k(t0.median + t0.iqr / 2, t1.median - t1.iqr / 2), k(t0.median, t1.median),
            k(t0.median - t0.iqr / 2, t1.median + t1.iqr / 2)]
    return noise.Estimate(vals, abs_tol=0.1), w0, w1


def reported_figure():
    """The thread's reported speed-ups against width (reported figures, GPUs not named)."""
    import matplotlib.pyplot as plt

    rep = thread_report()
    fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
    for label, table in (rep.tables if rep else {}).items():
        ax.plot(list(table), list(table.values()), marker="o", ms=3, label=label)
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_yscale("log")
    ax.set_xlabel("width (features)")
    ax.set_ylabel("PseudoLinear speed-up over Linear (×, log)")
    ax.set_title(f"{rep.label if rep else _NO_REPORT}\nreported in the thread, not measured by this course",
                 fontsize=9)
    if rep:
        ax.legend(fontsize=7)
    return fig


def reported_table() -> str:
    """The thread's speed-up tables side by side, under the file's label (reported, GPUs not named)."""
    rep = thread_report()
    if rep is None or not rep.tables:
        return _NO_REPORT
    widths = sorted({w for t in rep.tables.values() for w in t})
    rows = [("width", *rep.tables)]
    rows += [(str(w), *(f"{t[w]:.2f}×" if w in t else "-" for t in rep.tables.values())) for w in widths]
    return f"{rep.label}\n" + text_table(rows, numbers=True) + f"\n({rep.tables_note})"


def gpu_launch_latency(device="cuda", n: int = 200) -> dict[str, float] | None:
    """On a GPU: the host's cost of issuing a tiny op (harness, back to back) and the GPU time one
    tiny op spans between CUDA events. None without a GPU."""
    dev = torch.device(device)
    if dev.type != "cuda" or not _device.has_cuda():
        return None
    one = torch.zeros(1, device=dev)
    issue = timing.measure(torch.add, one, one, label="issue", min_run_time=0.2).median
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spans = []
    for _ in range(n):
        torch.cuda.synchronize(dev)
        start.record()
        torch.add(one, one)
        end.record()
        end.synchronize()
        spans.append(start.elapsed_time(end) / 1e3)
    spans.sort()
    return {"issue (host, s per op)": issue, "event span of one op (GPU, s)": spans[len(spans) // 2]}


def work_comparison(params: dict = THREAD_SHAPE) -> str:
    """Linear against PseudoLinear at `params`: FLOPs and bytes from their traces, on a CPU (addmm copies
    the bias into its output) and on a CUDA GPU (cuBLASLt's epilogue adds it: no copy), in words that
    follow the numbers."""
    w = LESSON.work(params)
    lin, pseudo = w["Linear"], w["PseudoLinear"]

    def words(cuda):
        ratio = pseudo.bytes_on(cuda) / lin.bytes_on(cuda)
        more = ("more bytes than" if ratio > 1.05 else "fewer bytes than" if ratio < 0.95
                else "about as many bytes as")
        return f"PseudoLinear reads and writes {more} Linear ({ratio:.2f}×)"

    return (f"Linear: {lin.flops / 1e9:.2f} GFLOP; PseudoLinear: {pseudo.flops / 1e9:.2f} GFLOP (the trace counts "
            "matmul FLOPs).\n"
            f"On a CPU, Linear moves {lin.bytes_on(False) / 2**20:.1f} MiB: addmm first copies the bias into its "
            f"output ({lin.lt_bias_bytes / 2**20:.1f} MiB of the total, written and read back), then adds the "
            f"product onto it. PseudoLinear moves {pseudo.bytes / 2**20:.1f} MiB. {words(False)}.\n"
            f"On a CUDA GPU, addmm with a 1-D bias goes to cuBLASLt, whose epilogue adds the bias as it writes the "
            f"output (no copy): Linear moves {lin.bytes_on(True) / 2**20:.1f} MiB, and {words(True)}.\n"
            "Either way Linear does all the FLOPs.")


# --- the Strassen claim: which GEMM ran ------------------------------------------------------------


def gemm_evidence(params: dict = THREAD_SHAPE) -> str:
    """Linear's GEMMs from its trace (on meta): the aten op, its shape and its FLOPs."""
    t = LESSON.traces({**params, "layers": 1})["Linear"]
    lines = []
    for op in t.gemms:
        b, m, n, k = op.gemm
        lines.append(f"{op.name}: ({m} × {k}) @ ({k} × {n}), {op.flops:,} FLOPs = 2·batch·width², "
                     "the schoolbook count")
    return "\n".join(lines) or "no GEMM in the trace"


def gpu_kernels(params: dict, device="cuda") -> dict[str, list[str]] | None:
    """The kernels one forward of each variant launches (profiler), or None without a GPU or
    without a profiler that sees CUDA."""
    from .trace import kernels, profiler_sees_cuda

    dev = torch.device(device)
    if dev.type != "cuda" or not _device.has_cuda() or not profiler_sees_cuda():
        return None

    full = LESSON.check({**params, "layers": 1}, dev, torch.float32)
    inputs = make_inputs(full, dev, torch.float32)
    return {v.name: kernels(v.fn, *inputs) for v in LESSON.variants}


def achieved_rate(run, name: str = "Linear") -> float:
    """FLOP/s a variant achieved in a run, counting the schoolbook FLOPs of its trace."""
    return run.work[name].flops / run.timings[name].median


def rate_summary(run, peaks_: roofline.Peaks) -> str:
    """Linear's achieved FLOP rate (schoolbook count) against the measured peak of a large mm and, on
    a GPU the datasheet knows, against the hardware's peak; what that says about the algorithm."""
    rate = achieved_rate(run)
    t = run.timings["Linear"]
    # the rate within the timing's IQR: fastest and slowest the measurement allows
    est = noise.Estimate([run.work["Linear"].flops / max(t.median + t.iqr / 2, 1e-12), rate,
                          run.work["Linear"].flops / max(t.median - t.iqr / 2, 1e-12)])
    lines = [f"Linear at {_shape(run.params)}: {rate / 1e9:,.0f} GFLOP/s counted as 2·batch·width² FLOPs a layer; "
             f"the measured peak of a large mm is {peaks_.flops / 1e9:,.0f} GFLOP/s ({rate / peaks_.flops:.0%} of it)."]
    sheet = None
    if run.device == "cuda" and _device.has_cuda():
        sheet = roofline.datasheet(_device.describe(torch.device("cuda")).name, torch.float32)
    if sheet:
        lines.append(f"The datasheet peak ({sheet.source.split(';')[0]}) is {sheet.flops / 1e9:,.0f} GFLOP/s: "
                     f"{rate / sheet.flops:.0%} of what the hardware can do with the schoolbook count.")
    top = sheet.flops if sheet else peaks_.flops
    if not est.decided:
        lines.append("Whether Linear runs above the peak: " + est.not_decided())
    elif est.high <= 1.1 * top:
        lines.append("No sign of fewer multiplications: the schoolbook count runs at or below the peak.")
    elif est.low > 1.1 * top:
        lines.append("Above the peak: either the peak measurement came out low (a busy machine; rerun) or the "
                     "library does fewer multiplications here.")
    else:
        lines.append("Within the timing's spread of the peak: no evidence either way; rerun on a quieter machine.")
    return "\n".join(lines)


# --- fewer ops by hand, and many small tensors ----------------------------------------------------


def by_hand_table(params: dict, training: bool = False) -> str:
    """Launches, new memory and bytes moved of the eager rewrites (traced on meta: device-independent)."""
    lesson = TRAIN_LESSON if training else FORWARD_FIXES
    rows = [("variant", "launches", "new memory", "bytes moved")]
    for name, t in lesson.traces(params).items():
        if name == "Linear":
            continue
        rows.append((name, str(len(t.compute_ops)), _device.fmt_bytes(t.alloc_bytes), _device.fmt_bytes(_bytes(t))))
    return text_table(rows, numbers=True)


def inplace_on_a_saved_tensor() -> str:
    """What autograd says when an in-place op overwrites a tensor it saved for backward: the limit on
    'in place'. `y = x * w` saves x (w's gradient needs it); `x.add_(1)` then bumps x's version
    counter, and backward refuses, since the saved x is no longer the x it saw. (A leaf that
    requires grad is refused earlier, by another rule: no in-place op on a leaf at all.)"""
    inp = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    x = inp * 2  # not a leaf: in place is allowed on it...
    y = x * w  # ...but mul saved it, for w's gradient
    x.add_(1)  # allowed now: the check happens at backward
    try:
        y.sum().backward()
    except RuntimeError as err:
        msg = str(err).splitlines()[0]
        return ("y = x * w, then x.add_(1), then backward: RuntimeError, "
                + msg.split(": [")[0] + " (the saved x changed version)")
    return "backward after x.add_(1) was allowed (this torch did not check the saved tensor's version)"


def optimizer_ops(n_tensors: int = 64, size: int = 1000) -> dict[str, list[str]]:
    """Ops one SGD step dispatches over `n_tensors` parameters: a loop (foreach=False) vs foreach."""
    params = [torch.zeros(size, device="meta", requires_grad=True) for _ in range(n_tensors)]
    for p in params:
        p.grad = torch.zeros(size, device="meta")
    out = {}
    for foreach in (False, True):
        opt = torch.optim.SGD(params, lr=0.1, foreach=foreach)
        out["foreach" if foreach else "for loop"] = _module_ops(opt.step)
    return out


def foreach_check(n_tensors: int = 7, steps: int = 3, seed: int = 0) -> str:
    """SGD with momentum and weight decay, for-loop and foreach, against the for loop in float64:
    a few steps over tensors of odd sizes. One line: the worst relative error of each, and a verdict."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [(1,), (33,), (7, 5), (17, 3, 2), (64,), (5, 1), (2, 2, 2)][:n_tensors]
    start = [torch.randn(sz, generator=gen) for sz in sizes]
    grads = [[torch.randn(sz, generator=gen) for sz in sizes] for _ in range(steps)]

    def run(dtype, foreach):
        ps = [p.to(dtype, copy=True).requires_grad_() for p in start]  # the step writes into them
        opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=foreach)
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = g.to(dtype, copy=True)  # the optimizer may write into its gradients
            opt.step()
        return [p.detach() for p in ps]

    ref = run(torch.float64, False)
    errs = {how: grading.rel_error(run(torch.float32, foreach), ref) for how, foreach in
            (("for loop", False), ("foreach", True))}
    tol = 1e-5
    ok = all(e <= tol for e in errs.values())
    return (f"{'✓' if ok else '✗'} SGD ({steps} steps, momentum, weight decay, {len(sizes)} tensors of odd sizes) "
            "against float64: " + ", ".join(f"{how} {'within' if e <= tol else 'outside'} {tol:g}"
                                            for how, e in errs.items()))


def check_fixes(device=None) -> str:
    """Every eager fix against float64 at the default and odd shapes: forward (with `mul + add_`),
    training step (output and gradients), and the foreach optimizer step. Machine-independent text."""
    dev = _device.pick(device)
    fwd = FORWARD_FIXES.correctness_report(FORWARD_FIXES.check_correct(device=dev, seed=0))
    train = TRAIN_LESSON.correctness_report(TRAIN_LESSON.check_correct(device=dev, seed=0))
    return f"forward: {fwd}\ntraining step: {train}\noptimizer: {foreach_check()}"


def optimizer_timings(device=None, n_tensors: int = 64, size: int = 1000, min_run_time: float = 0.1):
    dev = _device.pick(device)
    params = [torch.zeros(size, device=dev, requires_grad=True) for _ in range(n_tensors)]
    for p in params:
        p.grad = torch.ones(size, device=dev)
    out = []
    for foreach in (False, True):
        opt = torch.optim.SGD(params, lr=1e-6, foreach=foreach)
        out.append(_measure(opt.step, label=f"SGD step, foreach={foreach}", min_run_time=min_run_time))
    return out


# --- compile: graphs recorded (no code generation), and one real compile -------------------------


def fused_graphs(params: dict, training: bool = False) -> compiling.Captured:
    """PseudoLinear through Dynamo and AOTAutograd with a recording backend: the graphs Inductor gets."""
    full = LESSON.check(params, torch.device("cpu"), torch.float32)
    inputs = (make_train_inputs if training else make_inputs)(full, torch.device("cpu"), torch.float32)
    return compiling.record_graphs(pseudo_linear, *inputs[:4], aten=True, backward=training)


@dataclasses.dataclass
class CompiledRun:
    """One cold Inductor compile of PseudoLinear's forward, checked and timed against eager."""

    compiled: compiling.Compiled
    params: dict
    correct: str = ""
    eager: timing.Timing | None = None
    fused: timing.Timing | None = None
    small: tuple[timing.Timing, timing.Timing] | None = None  # (eager, compiled) at a small shape
    small_params: dict | None = None
    regimes: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # shape -> (eager, fused)

    def kernel_line(self) -> str:
        if not self.compiled.code:
            return "Inductor's generated code was not captured here."
        k = compiling.kernels(self.compiled.code)
        lib = f" and {len(k['library'])} library call(s)" if k["library"] else ""
        return f"Inductor generated {len(k['generated'])} kernel(s){lib}: {', '.join(k['generated'])}"

    def _pair(self, params: dict, e: timing.Timing, c: timing.Timing) -> str:
        shape = _shape(params)
        reg = self.regimes.get(shape)
        where = (f" (eager PseudoLinear {roofline.REGIME_WORDS[reg[0]]}; one fused kernel would be "
                 f"{roofline.REGIME_WORDS[reg[1]]})" if reg else "")
        r = noise.from_timings(e, c)
        how = r.say("compiled is {r:.2f}× faster", tie="compiled and eager are within 5% of each other")
        if r.faster is not None and r.median < 1:  # eager over compiled below 1: compiled is slower
            how = f"compiled is {1 / r.median:.2f}× slower"
        return (f"at {shape}{where}:\n  eager {fmt_time(e.median)}, compiled {fmt_time(c.median)}: {how}")

    def __str__(self) -> str:
        if not self.compiled.ok:
            return str(self.compiled)
        lines = [str(self.compiled), self.correct]
        if self.eager and self.fused:
            lines.append(self._pair(self.params, self.eager, self.fused))
        if self.small:
            e, c = self.small
            lines.append(self._pair(self.small_params or {}, e, c))
            r = noise.from_timings(e, c)  # eager / compiled
            if r.faster is not None and r.median < 1:
                lines.append("At the small shape the compiled function's own overhead (guards, its wrapper) "
                             "ate the gain.")
            elif r.faster is not None:
                lines.append("At the small shape the fused kernel still won here: its wrapper (guards, a Python "
                             "call) cost less than the ops it saved.")
        return "\n".join(lines)


def compile_and_compare(params: dict, device=None, small: dict | None = None,
                        min_run_time: float = 0.2) -> CompiledRun:
    """Compile PseudoLinear's forward once (dynamic shapes, so the odd and small shapes reuse it),
    report the cold compile, check it against float64 and time the steady state against eager."""
    dev = _device.pick(device)
    full = LESSON.check(params, dev, torch.float32)
    inputs = make_inputs(full, dev, torch.float32)
    c = compiling.compile_cold(pseudo_linear, *inputs, dynamic=True, capture_code=True)
    out = CompiledRun(c, full)
    if not c.ok:
        return out
    try:
        odd = [{"width": 33, "batch": 5, "layers": full["layers"]}, {"width": 7, "batch": 17, "layers": full["layers"]}]
        check = dataclasses.replace(LESSON, variants=[LESSON.variant("PseudoLinear"), Variant("compiled", c.fn)])
        rows = check.check_correct([full, *odd], dev, seed=0)
        out.correct = check.correctness_report(rows)
        out.eager = _measure(pseudo_linear, *inputs, label="eager", min_run_time=min_run_time)
        out.fused = _measure(c.fn, *inputs, label="compiled", min_run_time=min_run_time)
        if small:
            out.small_params = LESSON.check(small, dev, torch.float32)
            s = make_inputs(out.small_params, dev, torch.float32)
            out.small = (_measure(pseudo_linear, *s, label="eager", min_run_time=min_run_time),
                         _measure(c.fn, *s, label="compiled", min_run_time=min_run_time))
    except Exception as err:  # a recompile that fails at another shape: say so, keep the cold time
        c.problem = f"the compiled function failed after compiling ({type(err).__name__}: {err})"
        return out
    pk = peaks(dev)
    for p in (full, out.small_params) if out.small_params else (full,):
        out.regimes[_shape(p)] = (pk.regime(LESSON.work(p)["PseudoLinear"]), pk.regime(compiled_work(p)["compiled"]))
    return out


# --- what fusion's gain is made of: bytes, the allocator, threads --------------------------------


def pseudo_linear_reused(x, W, w, b, t, y):
    """PseudoLinear's eight ops writing into two buffers made once (`out=`): the same ops and bytes
    as eager PseudoLinear, no new allocation per call."""
    for l in range(w.shape[0]):
        torch.mul(x, w[l], out=t)
        torch.add(t, b[l], out=y)
        x = y
    return y


def fusion_bytes(params: dict) -> tuple[int, int]:
    """(eager PseudoLinear's bytes, one fused kernel's bytes) from their traces on meta: the bytes bound
    on what fusion can save is their ratio, about 2·layers (each op reads and writes the activation;
    the fused kernel reads x once and writes once)."""
    eager = LESSON.work(params)["PseudoLinear"].bytes
    return eager, compiled_work(params)["compiled"].bytes


def _minor_faults() -> int:
    try:
        import resource
    except ImportError:  # Windows: no getrusage
        return -1
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def faults_per_call(fn, *args, calls: int = 3) -> float | None:
    """Minor page faults this process takes per call of fn (getrusage; warm calls only). None where
    getrusage is missing. On a GPU the device's caching allocator reuses its blocks: this counts the
    host side only."""
    fn(*args)
    before = _minor_faults()
    if before < 0:
        return None
    for _ in range(calls):
        fn(*args)
    return (_minor_faults() - before) / calls


@dataclasses.dataclass
class FusionCauses:
    """Eager PseudoLinear (new outputs), eager into reused buffers, and the compiled (fused) function,
    timed in paired rounds with this machine's threads and with one thread; page faults per call;
    the bytes bound from the traces."""

    params: dict
    device: str
    bytes_eager: int
    bytes_fused: int
    faults: dict[str, float | None]
    threads: int
    many: noise.Comparison  # with `threads` threads
    one: noise.Comparison | None  # with one thread (CPU only)

    @property
    def bound(self) -> float:
        return self.bytes_eager / self.bytes_fused

    def __str__(self) -> str:
        f = self.faults
        lines = [f"at {_shape(self.params)} on {self.device.upper()}:",
                 f"bytes: eager PseudoLinear moves {_device.fmt_bytes(self.bytes_eager)}, one fused kernel "
                 f"{_device.fmt_bytes(self.bytes_fused)}: fusion can save at most {self.bound:.1f}× of the traffic "
                 "(the bytes bound; traced, the same on every machine)."]
        many = "GPU" if self.device == "cuda" else f"{self.threads} threads" if self.threads > 1 else "1 thread"
        rows = [("variant", many,
                 *(("1 thread",) if self.one else ()), "minor page faults per call")]
        for n in self.many.names:
            rows.append((n, fmt_time(self.many.median(n)), *((fmt_time(self.one.median(n)),) if self.one else ()),
                         "-" if f.get(n) is None else f"{f[n]:,.0f}"))
        lines.append(text_table(rows, numbers=True))
        fresh, reused, fused = self.many.names
        parts = [self.many.ratio(fresh, reused).say("{r:.2f}×", tie="no difference (within 5%)") + f" ({many})"]
        if self.one:
            parts.append(self.one.ratio(fresh, reused).say("{r:.2f}×", tie="no difference (within 5%)") + " (1 thread)")
        lines.append("allocator: eager with new outputs over eager into reused buffers, " + "; ".join(parts) + ".")
        if self.one:
            th = noise.Ratio([a / b for a, b in zip(self.many.rounds[reused], self.one.rounds[reused])])
            lines.append("threads: " + th.say(
                "eager into reused buffers takes {r:.2f}× as long with " + str(self.threads) + " threads as with one "
                f"({2 * self.params['layers']} parallel regions a call, each waiting for every thread).",
                tie=f"eager into reused buffers takes the same time with {self.threads} threads as with one."))
        ref = self.one or self.many
        r = ref.ratio(reused, fused)
        lines.append(f"fusion alone (compiled over eager into reused buffers{', 1 thread' if self.one else ''}): "
                     + r.say("{r:.2f}× faster", tie="no faster (within 5%)")
                     + (f", against the bytes bound of {self.bound:.1f}×." if r.decided else "."))
        return "\n".join(lines)


def fusion_causes(params: dict, device=None, compiled=None, max_time: float = 5.0,
                  min_run_time: float = 0.02) -> FusionCauses:
    """Take fusion's measured gain apart. `compiled`: the compiled PseudoLinear (CompiledRun's
    `compiled.fn`), reused so no second compile happens."""
    dev = _device.pick(device)
    full = LESSON.check(params, dev, torch.float32)
    if compiled is None:
        raise ValueError("Pass the compiled function (compile_and_compare(...).compiled.fn).")
    x, W, w, b = make_inputs(full, dev, torch.float32)
    t, y = torch.empty_like(x), torch.empty_like(x)
    fns = {"eager, new outputs": lambda: pseudo_linear(x, W, w, b),
           "eager, reused out= buffers": lambda: pseudo_linear_reused(x, W, w, b, t, y),
           "compiled (one fused kernel)": lambda: compiled(x, W, w, b)}
    faults = {n: faults_per_call(fn) if dev.type == "cpu" else None for n, fn in fns.items()}
    pairs = [(a, b_) for a, b_ in zip(list(fns), list(fns)[1:])]
    many = noise.compare(fns, pairs=pairs, min_run_time=min_run_time, max_time=max_time)
    one = None
    threads = torch.get_num_threads()
    if dev.type == "cpu" and threads > 1:
        torch.set_num_threads(1)
        try:
            one = noise.compare(fns, pairs=pairs, min_run_time=min_run_time, max_time=max_time)
        finally:
            torch.set_num_threads(threads)
    eager_b, fused_b = fusion_bytes(full)
    return FusionCauses(full, dev.type, eager_b, fused_b, faults, threads, many, one)


# --- this machine beside the GPU models, at one shape ----------------------------------------------


def machines_at(run, gpus=roofline.MODEL_GPUS) -> dict[str, dict[str, float]]:
    """{row label: {variant: seconds}} at the run's own shape: this machine's medians, then each GPU's
    model floor (datasheet peaks, cuBLASLt's bias epilogue, 5 µs per op assumed): lower bounds, not
    medians. Every label names its kind; `machines_figure` puts the one shape in the title."""
    rows = {f"this machine ({run.device.upper()}) · measured median": {n: t.median for n, t in run.timings.items()}}
    work = LESSON.work(run.params)
    for gpu in gpus:
        pk = roofline.datasheet(gpu, torch.float32, tf32=False)
        if pk is not None:
            rows[f"{gpu} · model floor"] = {n: pk.floor(work[n]) for n in run.timings}
        tf = roofline.datasheet(gpu, torch.float32, tf32=True)
        if tf is not None and tf.tf32 and "Linear" in run.timings:
            rows[f"{gpu} · model floor, Linear in TF32"] = {"Linear": tf.floor(work["Linear"])}
    return rows


def legend_outside(fig, width: float = 9.0):
    """Move the first axes' legend to the right of the plot (it never covers data) and widen the figure
    to `width` inches, about JupyterLab's default width at its default resolution."""
    ax = fig.axes[0]
    leg = ax.get_legend()
    if leg is None:
        return fig
    handles = getattr(leg, "legend_handles", None) or getattr(leg, "legendHandles", [])
    ax.legend(handles, [t.get_text() for t in leg.get_texts()], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.set_size_inches(width, fig.get_size_inches()[1])
    return fig


def machines_figure(run):
    """This machine beside the GPU models at the run's shape (named in the title), legend beside the axes."""
    fig = plots.machines(machines_at(run), title=f"All at {_shape(run.params)}, float32: this machine's medians "
                         "and GPU model floors\n(a floor is a lower bound from datasheet peaks, not a median)")
    fig.axes[0].title.set_fontsize(9)
    fig.set_size_inches(9, 3.4)
    return legend_outside(fig)


def recorded_fusion() -> str:
    """Fusion taken apart at the recorded memory-bound shape, from each measured file (not re-measured)."""
    lines = []
    for rec in results.for_lesson(LESSON_KEY, kinds="measured"):
        c = (rec.lessons[LESSON_KEY] or {}).get("compiled") or {}
        if "fusion" not in c:
            continue
        faults = c.get("faults_per_call") or {}
        one = c.get("medians_1_thread") or c.get("medians") or {}
        lines.append(f"{rec.label()}, at {_shape(c['params'])} ({c['rounds']} paired rounds, 1 thread):")
        lines += [f"  {n}: {fmt_time(t)}" + (f", {faults[n]:,.0f} minor page faults a call" if faults.get(n)
                                              is not None else "") for n, t in one.items()]
        f, a = c["fusion"], c["allocator"]
        lines.append(f"  allocator: new outputs over reused buffers {a['median']:.2f}×; fusion alone (compiled over "
                     f"reused buffers) {f['median']:.2f}× against the bytes bound {c['bytes_bound']:.1f}×"
                     + ("" if f["decided"] else " (not decided when recorded)"))
    return "\n".join(lines) or "No measured file here records fusion's causes: run `python -m lessons_lib.record`."


def optimizer_summary(ts: list[timing.Timing]) -> str:
    """for-loop SGD step over foreach, through the noise rule."""
    loop, fe = ts
    return "foreach against the for loop: " + noise.from_timings(loop, fe).say(
        "the loop takes {r:.2f}× foreach's time", tie="no measurable difference") + "."


# --- where the speed-up goes at large width: the asymptote ------------------------------------------

ASYMPTOTE_WIDTHS = [128, 1024, 8192, 32768]


def asymptote_table(gpus=roofline.MODEL_GPUS, widths=ASYMPTOTE_WIDTHS, batch: int = 32768) -> str:
    """The model's Linear / PseudoLinear ratio of floors at large widths, beside its asymptote
    slope·width, for each GPU in fp32 and with TF32 (datasheet peaks: model, not measurement)."""
    rows = [("GPU (model)", "math", "slope s", *(f"width {v}: floors (s·width)" for v in widths))]
    for gpu in gpus:
        for tf32 in (False, True):
            pk = roofline.datasheet(gpu, torch.float32, tf32=tf32)
            if pk is None or (tf32 and not pk.tf32):
                continue
            slope = roofline.speedup_asymptote(pk, 4, tf32=tf32)
            cells = []
            for v in widths:
                wk = LESSON.work({"width": v, "batch": batch, "layers": 1})
                cells.append(f"{pk.floor(wk['Linear']) / pk.floor(wk['PseudoLinear']):,.1f}× ({slope * v:,.1f}×)")
            rows.append((gpu, "TF32" if tf32 else "fp32", f"{slope:.5f}", *cells))
    return text_table(rows, numbers=True)


def compiled_training_check(params: dict, device=None) -> str:
    """A compiled training step (forward and backward) against float64 at `params` and an odd shape.

    On a GPU with Inductor. On a CPU (where a notebook affords one cold Inductor compile) with
    Inductor's decompositions and partitioner but no code generation (`default_backend`): that checks
    the captured forward and backward graphs, not the generated code.
    """
    dev = _device.pick(device)
    backend = compiling.default_backend(dev)
    full = TRAIN_LESSON.check(params, dev, torch.float32)
    inputs = make_train_inputs(full, dev, torch.float32)
    c = compiling.compile_cold(pseudo_linear, *inputs[:4], backend=backend, dynamic=True, step=_train_call(inputs))
    if not c.ok:
        return str(c)
    try:
        check = dataclasses.replace(TRAIN_LESSON, variants=[TRAIN_LESSON.variant("PseudoLinear"),
                                                            Variant("compiled", c.fn)])
        odd = {"width": 33, "batch": 5, "layers": full["layers"]}
        report = check.correctness_report(check.check_correct([full, odd], dev, seed=0))
    except Exception as err:  # a failure after compiling: say so
        return f"the compiled training step failed ({type(err).__name__}: {_device_first_line(err)})"
    return f"backend {backend!r}, training step (output, dx, dw, db): {report}"


def _train_call(inputs):
    g = inputs[4]

    def step(compiled, x, W, w, b):
        return train_step(compiled, x, W, w, b, g)

    return step


def batch_summary(sweep, peaks_: roofline.Peaks) -> str:
    """Time per row at the ends of a batch sweep, and the points well above their floor (with their spread)."""
    lines = []
    for name in sweep.runs[0].timings:
        t0, t1 = sweep.runs[0].timings[name], sweep.runs[-1].timings[name]
        first, last = t0.median / sweep.values[0], t1.median / sweep.values[-1]
        per_row = noise.from_timings(t0, t1)  # whole-call ratio; per row it is times the batch ratio
        less = (f"{per_row.median * sweep.values[-1] / sweep.values[0]:.0f}× less" if per_row.decided
                else per_row.not_decided())
        lines.append(f"{name}: {fmt_time(first)} per row at batch {sweep.values[0]}, {fmt_time(last)} at batch "
                     f"{sweep.values[-1]} ({less})")
    high = [(n, r.params["batch"], r.timings[n]) for r in sweep.runs for n in r.timings
            if r.timings[n].median > 2 * peaks_.floor(r.work[n]) and peaks_.regime(r.work[n]) != "overhead"]
    for n, batch, t in high:
        lines.append(f"{n} at batch {batch}: {t.median / peaks_.floor(sweep.runs[sweep.values.index(batch)].work[n]):.1f}× "
                     f"its memory floor (spread {t.spread:.0%} of the median)")
    if high:
        lines.append("Time above a memory floor is work the roofline does not count: allocating the temporaries, "
                     "or other programs on a busy machine (a wide spread says so). Rerun the cell to tell them apart.")
    return "\n".join(lines)


def _shape(p: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in p.items())


# --- recorded results --------------------------------------------------------------------------------

WIDTHS_GPU = [128, 256, 512, 1024, 2048, 4096, 8192]
WIDTHS_CPU = [16, 32, 64, 128, 256, 512]
BATCHES_GPU = [256, 1024, 4096, 16384, 65536, 262144]
BATCHES_CPU = [16, 64, 256, 1024, 4096, 16384, 65536]
REGIME_SHAPES = {  # three shapes where the regimes are not in doubt on most machines
    "cpu": [{"width": 16, "batch": 16, "layers": 4}, {"width": 256, "batch": 65536, "layers": 4},
            {"width": 1024, "batch": 1024, "layers": 1}],
    "cuda": [{"width": 16, "batch": 16, "layers": 4}, {"width": 4096, "batch": 32768, "layers": 4},
             {"width": 8192, "batch": 32768, "layers": 1}],
}
MEMORY_BOUND = {"cpu": {"width": 256, "batch": 65536, "layers": 4}, "cuda": {"width": 4096, "batch": 32768, "layers": 4}}


def record(device, quick: bool = False) -> dict:
    """This lesson's recorded results: per-op overhead, the regime of every variant at three shapes,
    a headline run at the default shape, width and batch sweeps, and (not quick) the compiled bar."""
    dev = torch.device(device)
    t = 0.05 if quick else 0.3
    pk = peaks(dev)
    kind = "cuda" if dev.type == "cuda" else "cpu"
    out = {"overhead": {tm.label: {"median": tm.median, "iqr": tm.iqr}
                        for tm in overhead_timings(dev, min_run_time=t)}}
    shapes = REGIME_SHAPES[kind][:1] if quick else REGIME_SHAPES[kind]
    out["regimes"] = []
    for shape in shapes:
        run = LESSON.run(shape, dev, min_run_time=t)
        out["regimes"].append(results.run_to_dict(run, pk))
    head = LESSON.run(LESSON.defaults(dev), dev, min_run_time=t)
    out["headline"] = results.run_to_dict(head, pk)
    widths = WIDTHS_GPU if kind == "cuda" else WIDTHS_CPU
    batches = BATCHES_GPU if kind == "cuda" else BATCHES_CPU
    if quick:
        widths, batches = widths[:2], batches[:2]
    sw = LESSON.sweep("width", widths, None, dev, min_run_time=t / 2, progress=False)
    sb = LESSON.sweep("batch", batches, {"width": 256}, dev, variants=["PseudoLinear", "addcmul"],
                      min_run_time=t / 2, progress=False)
    out["sweeps"] = {"width": results.sweep_to_dict(sw), "batch": results.sweep_to_dict(sb)}
    if not quick:
        cr = compile_and_compare(MEMORY_BOUND[kind], dev, min_run_time=t)
        if cr.compiled.ok and cr.fused:
            fc = fusion_causes(cr.params, dev, compiled=cr.compiled.fn, max_time=60.0)
            ref = fc.one or fc.many
            names = fc.many.names
            out["compiled"] = {
                "params": cr.params, "cold_s": cr.compiled.cold_s, "eager": cr.eager.median,
                "compiled": cr.fused.median, "speedup": cr.eager.median / cr.fused.median,
                "bytes_eager": fc.bytes_eager, "bytes_fused": fc.bytes_fused, "bytes_bound": fc.bound,
                "threads": fc.threads, "faults_per_call": fc.faults,
                "medians": {n: fc.many.median(n) for n in names},
                "medians_1_thread": {n: fc.one.median(n) for n in names} if fc.one else None,
                "rounds": len(ref.rounds[names[0]]),
                # fusion alone: compiled against eager into reused buffers, one thread where it applies
                "fusion": _ratio_dict(ref.ratio(names[1], names[2])),
                "allocator": _ratio_dict(ref.ratio(names[0], names[1])),
                "threads_ratio": (_ratio_dict(noise.Ratio([a / b for a, b in zip(fc.many.rounds[names[1]],
                                                                                  fc.one.rounds[names[1]])]))
                                  if fc.one else None)}
        else:
            out["compiled"] = {"problem": cr.compiled.problem}
    return out


def _ratio_dict(r: noise.Ratio) -> dict:
    return {"median": r.median, "low": r.low, "high": r.high, "decided": r.decided}


FUSION_MARGIN = 1.25  # on the bytes bound: traced bytes are not DRAM bytes (caches, write-allocate)


def targets(device, section: dict) -> list[dict]:
    """This lesson's bars as measured here. Fusion, for the lesson's reason: the compiled forward
    against eager PseudoLinear writing into reused buffers (no allocator in the ratio; one thread on a
    CPU, so no thread waits either) is faster, and by no more than the bytes bound the traces give
    (2·layers) with a margin, since fusion saves bytes; decided by paired rounds. Beside it, shown
    and not judged: the allocator's share (new outputs over reused buffers, page faults per call).
    The per-op overhead measured, not assumed; every variant's regime recorded at three shapes. On a
    GPU, `gpu` claim tests hold the bars."""
    cpu = torch.device(device).type == "cpu"
    out = []
    c = section.get("compiled") or {}
    if "fusion" in c:
        f, bound = c["fusion"], c["bytes_bound"]
        ok = f["decided"] and f["low"] > 1 and f["high"] <= FUSION_MARGIN * bound
        out.append({"name": f"04 fused / eager PseudoLinear into reused buffers, forward, 1 thread, at "
                            f"{_shape(c['params'])} (bytes bound {bound:.1f}×)",
                    "value": f["median"], "bar": f"> 1 and <= {FUSION_MARGIN:g} × bytes bound, decided (CPU)",
                    "ok": ok if cpu else None})
        a = c["allocator"]
        faults = (c.get("faults_per_call") or {}).get("eager, new outputs")
        out.append({"name": "04 eager PseudoLinear, new outputs / reused buffers (the allocator; "
                            f"{faults:,.0f} minor page faults a call)" if faults is not None else
                            "04 eager PseudoLinear, new outputs / reused buffers (the allocator)",
                    "value": a["median"], "bar": "info (shown, not judged)", "ok": None})
    add = (section.get("overhead") or {}).get("1-element add")
    if add:
        out.append({"name": "04 per-op overhead, a 1-element add (µs, measured)", "value": add["median"] * 1e6,
                    "bar": "> 0", "ok": add["median"] > 0})
    shapes = section.get("regimes") or []
    if shapes:
        named = all(v.get("regime") for r in shapes for v in r["variants"].values())
        out.append({"name": "04 shapes with every variant's regime recorded", "value": len(shapes),
                    "bar": ">= 3", "ok": len(shapes) >= 3 and named})
    return out


# --- exercise ------------------------------------------------------------------------------------
# A scale + bias + activation block, as after a normalisation: y = relu(x * scale + bias), with
# per-feature scale and bias. The starter launches three ops and allocates three tensors. Rewrite
# it to launch at most two ops, allocating one output, with the same values and gradients.


def exercise_starter(x, scale, bias):
    y = x * scale
    y = y + bias
    return torch.relu(y)


def exercise_reference(x, scale, bias):
    return torch.relu(x.double() * scale.double() + bias.double())


EXERCISE_SHAPES = [(64, 32), (5, 33), (1, 1), (17, 7)]  # (rows, features)
EXERCISE_META_SHAPE = (4096, 1024)
EXERCISE_TIME_LIMIT_S = 20.0


def _exercise_inputs(rows: int, features: int, gen, device="cpu"):
    x = torch.randn(rows, features, generator=gen).to(device)
    scale = (0.5 + torch.rand(features, generator=gen)).to(device)
    bias = (0.1 * torch.randn(features, generator=gen)).to(device)
    return x, scale, bias


def _run_reader(fn, v: Verdict) -> float | None:
    """Forward and backward at every shape, against float64; returns the worst relative error,
    or None after adding the failing line to the verdict."""
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for rows, feats in EXERCISE_SHAPES:
        x, scale, bias = _exercise_inputs(rows, feats, gen)
        g = torch.randn(rows, feats, generator=gen)
        # The reference comes from copies made before the reader's code can touch the inputs.
        x64, s64, b64 = (t.detach().clone().double().requires_grad_() for t in (x, scale, bias))
        ref = exercise_reference(x64, s64, b64)
        ref_grads = torch.autograd.grad(ref, (x64, s64, b64), g.double())
        leaves = [t.requires_grad_() for t in (x, scale, bias)]
        out = fn(*leaves)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (rows, feats):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            v.check("returns a tensor of the input's shape", False, f"got {got}, expected {(rows, feats)}")
            return None
        if out.dtype != x.dtype:
            v.check("returns a tensor of the input's dtype", False, f"got {out.dtype}, expected {x.dtype}")
            return None
        if not out.requires_grad:
            v.check("output is part of the autograd graph", False, "no gradient flows back: was .detach() or "
                    "torch.no_grad() used?")
            return None
        grads = torch.autograd.grad(out, leaves, g, allow_unused=True)
        if any(gr is None for gr in grads):
            v.check("gradients reach x, scale and bias", False, "one of them got no gradient")
            return None
        worst = max(worst, grading.rel_error([out, *grads], [ref, *ref_grads]))  # NaN, inf: inf
    return worst


def check_exercise(fn) -> Verdict:
    """Grade the rewrite: values and gradients against float64 at odd shapes (NaN/inf fail), then,
    from its op trace on meta (the same on every machine), at most two ops that launch work, one
    new tensor, and fewer bytes moved than the starter; on a GPU only, a timing."""
    v = Verdict(f"Exercise 04 ({getattr(fn, '__name__', 'your function')})")
    try:
        with grading.time_limit(EXERCISE_TIME_LIMIT_S):
            worst = _run_reader(fn, v)
    except grading.TimeLimit:
        v.check("finishes", False, f"still running after {EXERCISE_TIME_LIMIT_S:.0f} s at tiny shapes")
        return v
    except Exception as err:  # the reader's code: report, don't raise
        v.check("runs forward and backward", False, f"{type(err).__name__}: {_device_first_line(err)}")
        return v
    if worst is None:
        return v
    v.check(f"output and gradients match float64 at {len(EXERCISE_SHAPES)} shapes (odd ones included)",
            worst < 1e-5, f"worst relative error {worst:.1e}" if worst >= 1e-5 else "")

    rows, feats = EXERCISE_META_SHAPE

    def trace_inputs(device):  # meta first (nothing allocated); CPU tensors for code that reads values
        gen = torch.Generator().manual_seed(2)
        if device == "meta":
            return (torch.empty(rows, feats, device="meta"), torch.empty(feats, device="meta"),
                    torch.empty(feats, device="meta"))
        return _exercise_inputs(rows, feats, gen)

    mine, where, problem = grading.analyse_reader(lambda *a: trace_ops(fn, *a), trace_inputs,
                                                  limit=EXERCISE_TIME_LIMIT_S)
    if problem:
        v.check("its op trace can be taken", False, problem)
        return v
    start = trace_ops(exercise_starter, *trace_inputs(where))
    ops = [op.name for op in mine.compute_ops]
    on_cpu = " (traced on CPU tensors: your code reads values, and each read is an op too)" if where == "cpu" else ""
    v.check("launches at most 2 ops (the starter: 3)", len(ops) <= 2, f"{len(ops)}: {', '.join(ops)}{on_cpu}")
    out_bytes = rows * feats * 4
    v.check(f"allocates one output ({_device.fmt_bytes(out_bytes)}) at {rows} × {feats}",
            mine.alloc_bytes <= out_bytes, f"{_device.fmt_bytes(mine.alloc_bytes)} allocated")
    v.check("moves fewer bytes than the starter", _bytes(mine) < _bytes(start),
            f"{_device.fmt_bytes(_bytes(mine))} vs {_device.fmt_bytes(_bytes(start))}")
    if _device.has_cuda():
        gen = torch.Generator().manual_seed(1)
        try:
            with grading.time_limit(EXERCISE_TIME_LIMIT_S):
                xs = _exercise_inputs(16384, 1024, gen, "cuda")
                slow = timing.measure(exercise_starter, *xs, max_time=2.0).median
                fast = timing.measure(fn, *xs, max_time=2.0).median
        except grading.TimeLimit:
            v.on_gpu("at least 1.3× faster than the starter", False,
                     f"still timing after {EXERCISE_TIME_LIMIT_S:.0f} s")
        except Exception as err:  # the reader's code on the GPU: a line, not a traceback
            v.on_gpu("at least 1.3× faster than the starter", False,
                     f"{type(err).__name__}: {_device_first_line(err)}")
        else:
            v.on_gpu("at least 1.3× faster than the starter", slow / fast >= 1.3, f"{slow / fast:.2f}×")
    else:
        v.on_gpu("at least 1.3× faster than the starter", None)
    return v


def _device_first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:200]


__all__ = ["LESSON", "TRAIN_LESSON", "FORWARD_FIXES", "LESSON_KEY", "THREAD_SHAPE", "ThreadReport", "thread_report",
           "linear", "pseudo_linear", "addcmul", "mul_add_inplace", "make_inputs", "make_train_inputs", "train_step",
           "explorer", "compiled_work", "with_compiled", "posted_model", "posted_step", "fixed_model", "fixed_step",
           "mistakes_table", "reproduce", "thread_runs_table", "overhead_timings", "overhead_cases", "peaks",
           "regime_terms",
           "regime_table", "regimes", "gemm_evidence", "work_comparison", "gpu_kernels", "achieved_rate",
           "by_hand_table", "inplace_on_a_saved_tensor", "optimizer_ops", "optimizer_timings", "foreach_check",
           "check_fixes",
           "reported_figure", "reported_table", "gpu_launch_latency", "reproduce_summary", "overhead_summary",
           "sweep_summary", "linear_exponent", "rate_summary", "fused_graphs", "compile_and_compare", "CompiledRun",
           "compiled_training_check", "batch_summary", "record", "targets", "exercise_starter", "check_exercise",
           "REPRODUCE_PAIRS", "reproduce_table", "linear_tf32", "with_tf32", "has_tf32", "pseudo_linear_reused",
           "fusion_bytes", "faults_per_call", "FusionCauses", "fusion_causes", "machines_at", "asymptote_table",
           "machines_figure", "legend_outside", "recorded_fusion", "optimizer_summary",
           "FUSION_MARGIN"]
