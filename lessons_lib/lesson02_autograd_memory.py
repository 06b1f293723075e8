"""Lesson 02: a gigabyte that autograd keeps for a small matmul (forum seed 004).

A grouped linear layer: x (batch, groups·dim) is cut into `groups` slices of `dim` features
and slice g is multiplied by its own dim × dim weight W[g]. The thread wrote it as
`x.view(B, G, 1, D) @ W`. `matmul` has no derivative of its own for dense tensors, so
autograd records what it decomposes into: W is expanded to (B, G, D, D), copied, and fed to
one `bmm`, and that bmm keeps the copy (B·G·D·D floats, 1 GiB at the thread's shape) for
backward. The fixes run the same maths as one bmm over the G groups, which keeps only x and W.

Every variant maps x (B, G·D) and W (G, D, D) to out (B, G, D), out[b, g] = x[b, g] @ W[g].
"""
from __future__ import annotations

import dataclasses
import time

import torch
from torch.autograd.graph import saved_tensors_hooks
from torch.utils.checkpoint import checkpoint

from . import device as _device
from . import compiling, memory, results, roofline, timing
from .device import fmt_bytes
from .display import text_table
from .grading import Verdict, analyse_reader, call_reader, rel_error
from .lesson import Lesson, Param, Variant, metrics_table
from .widgets import Explorer

THREAD_SHAPE = {"batch": 8192, "groups": 8, "dim": 64}
# What the thread printed with torch.cuda.memory_allocated() after each forward (x requires grad).
POSTED = {"strategy 1": 1107427328, "strategy 2": 34603008}
MiB = 2**20


# --- the variants -----------------------------------------------------------------------------


def broadcast_matmul(x, W):
    """Seed 004 as posted: broadcast every row of x against the G weights. matmul expands W to
    (B, G, D, D) and copies it for one bmm, and that bmm saves the copy for backward."""
    G, D, _ = W.shape
    return (x.view(x.shape[0], G, 1, D) @ W).squeeze(2)


def einsum(x, W):
    """The thread's fix, with W's indices the right way round: one bmm over the G groups."""
    G, D, _ = W.shape
    return torch.einsum("bgi,gio->bgo", x.view(x.shape[0], G, D), W)


def bmm_3d(x, W):
    """The same bmm by hand: groups first, (G, B, D) @ (G, D, D), then back. Only views around it."""
    G, D, _ = W.shape
    return torch.bmm(x.view(x.shape[0], G, D).transpose(0, 1), W).transpose(0, 1)


class GroupedMatmul(torch.autograd.Function):
    """out[b, g] = x[b, g] @ W[g] with a backward written by hand: it saves only x and W."""

    @staticmethod
    def forward(ctx, x, W):
        ctx.save_for_backward(x, W)  # the inputs, which the caller holds anyway: no new memory
        G, D, _ = W.shape
        return torch.bmm(x.view(x.shape[0], G, D).transpose(0, 1), W).transpose(0, 1)

    @staticmethod
    def backward(ctx, grad_out):
        x, W = ctx.saved_tensors
        G, D, _ = W.shape
        g = grad_out.transpose(0, 1)  # (G, B, D)
        dx = dW = None
        if ctx.needs_input_grad[0]:  # dx[b, g] = grad[b, g] @ W[g]ᵀ
            dx = torch.bmm(g, W.transpose(1, 2)).transpose(0, 1).reshape(x.shape)
        if ctx.needs_input_grad[1]:  # dW[g] = x[:, g]ᵀ @ grad[:, g], summed over the batch by the GEMM
            dW = torch.bmm(x.view(x.shape[0], G, D).permute(1, 2, 0), g)
        return dx, dW


def custom_function(x, W):
    """The explicit-backward version: `GroupedMatmul.apply`."""
    return GroupedMatmul.apply(x, W)


def checkpointed(x, W):
    """The posted version under activation checkpointing: keep x and W, redo the forward in backward."""
    return checkpoint(broadcast_matmul, x, W, use_reentrant=False)


def thread_einsum(x, W):
    """The thread's einsum exactly as posted. 'bij,abj->abi' sums over W's *last* index, so it
    computes x @ Wᵀ per group, not x @ W. Not a variant: it answers a different question."""
    G, D, _ = W.shape
    return torch.einsum("bij,abj->abi", W, x.view(x.shape[0], G, D))


def strategy_1(x, W):
    """The thread's strategy 1, its output left as (B, G, 1, D)."""
    G, D, _ = W.shape
    return torch.matmul(x.view(x.shape[0], G, 1, D), W)


def strategy_2(x, W2):
    """The thread's strategy 2: one dense (G·D) × (G·D) weight, x viewed as (B, 1, G·D)."""
    return torch.matmul(x.view(x.shape[0], 1, -1), W2)


# --- one training step, inputs and memory --------------------------------------------------------


def train_step(fn, x, W, g):
    """One step of a variant: forward, then backward from the upstream gradient `g`.

    Returns the output and the gradients of whichever of x and W require grad (what the
    correctness check compares). `autograd.grad` returns them instead of adding them to `.grad`,
    so repeated timed steps do not accumulate anything.
    """
    out = fn(x, W)
    wrt = [t for t in (x, W) if t.requires_grad]
    return (out, *torch.autograd.grad(out, wrt, g))


def make_inputs(p: dict, device, dtype, x_grad: bool = True, w_grad: bool = True):
    """x (B, G·D), W (G, D, D) scaled like nn.Linear's init, and an upstream gradient g (B, G, D)."""
    B, G, D = p["batch"], p["groups"], p["dim"]
    x = torch.randn(B, G * D, device=device, dtype=dtype).requires_grad_(x_grad)
    W = (torch.randn(G, D, D, device=device, dtype=dtype) / D**0.5).requires_grad_(w_grad)
    g = torch.randn(B, G, D, device=device, dtype=dtype)
    return x, W, g


def expanded_copy_bytes(p: dict = THREAD_SHAPE, dtype=torch.float32) -> int:
    """Bytes of W expanded to every row of the batch: B·G·D·D elements (1 GiB at the seed)."""
    return p["batch"] * p["groups"] * p["dim"] ** 2 * dtype.itemsize


def peak_bytes(p: dict, dtype) -> int:
    """The worst variant's step (posted or checkpointed), inputs included: the saved copy and the
    expanded gradient of W alive together, plus a few activation-sized tensors."""
    e = dtype.itemsize
    B, G, D = p["batch"], p["groups"], p["dim"]
    act, w = B * G * D * e, G * D * D * e
    return 2 * expanded_copy_bytes(p, dtype) + 6 * act + 3 * w


def step_memory(fn, x, W, g=None) -> dict[str, float]:
    """A variant's memory in one step, in MiB: new bytes saved for backward (the ledger) and the
    forward and backward peaks (the timeline: measured where it can be, else predicted)."""
    saved = memory.ledger(fn, x, W).total_bytes
    p = memory.timeline(fn, x, W).peaks()

    def best(b: memory.Bytes) -> int:
        return b.measured if b.measured is not None else b.predicted

    return {"saved for backward (MiB)": saved / MiB, "forward peak (MiB)": best(p.forward) / MiB,
            "backward peak (MiB)": best(p.backward) / MiB}


LESSON = Lesson(
    key="02_autograd_memory",
    title="Memory autograd keeps for a grouped matmul",
    params=[
        Param("batch", "batch size", cpu=256, gpu=8192, lo=1, hi=65536),
        Param("groups", "groups", cpu=8, gpu=8, lo=1, hi=64),
        Param("dim", "dims per group", cpu=64, gpu=64, lo=1, hi=512),
    ],
    variants=[
        Variant("broadcast matmul", broadcast_matmul, "seed 004 as posted"),
        Variant("einsum", einsum, "one bmm over the groups"),
        Variant("3-D bmm", bmm_3d, "the same bmm, written by hand"),
        Variant("custom Function", custom_function, "explicit backward, saves only x and W"),
        Variant("checkpointed", checkpointed, "posted version, recomputed in backward"),
    ],
    make_inputs=make_inputs,
    peak_bytes=peak_bytes,
    # the output and dx sum over dim; dW sums over the batch
    reduction=lambda p: max(p["dim"], p["batch"]),
    baseline="broadcast matmul",
    compare=("broadcast matmul", "einsum"),
    odd_shapes=[
        {"batch": 5, "groups": 3, "dim": 7},
        {"batch": 1, "groups": 1, "dim": 1},
        {"batch": 33, "groups": 2, "dim": 17},
    ],
    step=train_step,
    metrics=step_memory,
)


def explorer(device=None) -> Explorer:
    return Explorer(LESSON, device)


# --- reproduce and look inside (on meta: any shape, nothing allocated) ------------------------------


def thread_inputs(params: dict = THREAD_SHAPE, x_grad: bool = True, w_grad: bool = False, device="meta"):
    """x and W at a shape (the thread's by default), on `meta` unless told otherwise."""
    x, W, _g = make_inputs(params, torch.device(device), torch.float32, x_grad, w_grad)
    return x, W


def allocated_after_forward(fn, *inputs) -> int:
    """What `torch.cuda.memory_allocated()` would print after `fn(*inputs)` on an otherwise empty
    GPU: the inputs plus whatever the call allocated that is still alive (the output, and what
    autograd saved). Predicted from the op trace and tensor lifetimes, so `meta` inputs work."""
    held = sum(t.untyped_storage().nbytes() for t in inputs)

    def call_then_look(*args):
        out = fn(*args)
        # One more (empty) op, so that the timeline samples memory after `fn` has returned: a
        # temporary that `fn`'s C++ code holds until it returns is freed by then.
        torch.empty(0, device=args[0].device)
        return out

    return held + memory.timeline(call_then_look, *inputs, backward=False, measure=False).peaks().after_forward.predicted


def reproduce_table(params: dict = THREAD_SHAPE) -> str:
    """The thread's two strategies, with and without x requiring grad, predicted on `meta`."""
    B, G, D = params["batch"], params["groups"], params["dim"]
    rows = [("strategy", "x requires grad", "predicted memory_allocated()", "posted")]
    for name, fn in (("strategy 1", strategy_1), ("strategy 2", strategy_2)):
        for grad in (True, False):
            x = torch.empty(B, G * D, device="meta", requires_grad=grad)
            W = torch.empty(G, D, D, device="meta") if fn is strategy_1 else torch.empty(G * D, G * D, device="meta")
            n = allocated_after_forward(fn, x, W)
            posted = f"{POSTED[name]:,}" if grad and params == THREAD_SHAPE else ""
            rows.append((name, "yes" if grad else "no", f"{n:,} B ({fmt_bytes(n)})", posted))
    return text_table(rows, numbers=True)


def measure_reproduction(device="cuda") -> dict[str, int] | None:
    """The thread's experiment on a CUDA GPU: memory_allocated() after each forward, counted from
    before x and W were made (as in the post). None without CUDA."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    B, G, D = THREAD_SHAPE["batch"], THREAD_SHAPE["groups"], THREAD_SHAPE["dim"]
    torch.bmm(torch.ones(1, 1, 1, device=dev), torch.ones(1, 1, 1, device=dev))  # cuBLAS's one-off workspace
    out = {}
    for name, w_shape in (("strategy 1", (G, D, D)), ("strategy 2", (G * D, G * D))):
        for grad in (True, False):
            _device.free_memory(dev)
            torch.cuda.synchronize(dev)
            base = torch.cuda.memory_allocated(dev)
            x = torch.randn(B, G * D, device=dev, requires_grad=grad)
            W = torch.randn(*w_shape, device=dev)
            y = (strategy_1 if name == "strategy 1" else strategy_2)(x, W)
            torch.cuda.synchronize(dev)
            out[f"{name}, x requires grad: {'yes' if grad else 'no'}"] = torch.cuda.memory_allocated(dev) - base
            del x, W, y
    _device.free_memory(dev)
    return out


def requires_grad_facts(fn=broadcast_matmul, params: dict = THREAD_SHAPE) -> list[dict]:
    """What a variant keeps and allocates, depending on which of x and W require grad (on meta).

    One dict per case: bytes saved for backward (new), held after the forward, the forward and
    backward peaks (beyond the inputs), and the largest allocation of the backward as
    (op, shape, bytes)."""
    facts = []
    for label, xg, wg in (("x only (the thread)", True, False), ("W only", False, True), ("x and W", True, True)):
        x, W = thread_inputs(params, xg, wg)
        led = memory.ledger(fn, x, W)
        tl = memory.timeline(fn, x, W)
        p = tl.peaks()
        back = [op for op, r in zip(tl.trace.ops, tl.rows) if r.phase == "backward" and not op.is_view]
        big = max(back, key=lambda op: op.alloc_bytes, default=None)
        facts.append({"requires grad": label, "saved": led.total_bytes, "after forward": p.after_forward.predicted,
                      "forward peak": p.forward.predicted, "backward peak": p.backward.predicted,
                      "largest backward allocation": (big.name, big.out_shapes[0], big.alloc_bytes) if big else None})
    return facts


def requires_grad_table(fn=broadcast_matmul, params: dict = THREAD_SHAPE) -> str:
    """`requires_grad_facts` as a fixed-width table."""
    rows = [("requires grad", "saved for backward", "held after forward", "forward peak", "backward peak",
             "largest backward allocation")]
    for f in requires_grad_facts(fn, params):
        big = f["largest backward allocation"]
        big_s = f"{big[0]} {'x'.join(map(str, big[1]))} ({fmt_bytes(big[2])})" if big else "-"
        rows.append((f["requires grad"], *(fmt_bytes(f[k]) for k in ("saved", "after forward", "forward peak",
                                                                      "backward peak")), big_s))
    return text_table(rows, numbers=True)


def memory_table(params: dict = THREAD_SHAPE, variants: list | None = None) -> str:
    """Per variant, predicted on `meta` with x and W requiring grad: new bytes saved for backward,
    what the step holds after the forward, and its forward and backward peaks (beyond the inputs)."""
    rows = [("variant", "saved for backward", "held after forward", "forward peak", "backward peak")]
    for v in variants or LESSON.variants:
        x, W = thread_inputs(params, True, True)
        saved = memory.ledger(v.fn, x, W).total_bytes
        p = memory.timeline(v.fn, x, W).peaks()
        rows.append((v.name, fmt_bytes(saved), fmt_bytes(p.after_forward.predicted), fmt_bytes(p.forward.predicted),
                     fmt_bytes(p.backward.predicted)))
    return text_table(rows, numbers=True)


def predicted_peaks(params: dict = THREAD_SHAPE) -> dict[str, memory.Peaks]:
    """Each variant's predicted peaks on `meta` (x and W requiring grad): any shape, no allocation."""
    out = {}
    for v in LESSON.variants:
        x, W = thread_inputs(params, True, True)
        out[v.name] = memory.peaks(v.fn, x, W)
    return out


# --- activation checkpointing, layer after layer -----------------------------------------------------


def stacked(fn, layers: int):
    """`layers` grouped layers in a row (sharing W, which changes nothing about activations)."""

    def deep(x, W):
        h = x
        for _ in range(layers):
            h = fn(h, W).reshape(h.shape)
        return h

    deep.__name__ = f"{getattr(fn, '__name__', 'fn')} x{layers}"
    return deep


def depth_table(params: dict = THREAD_SHAPE, layers: int = 4) -> str:
    """Saved bytes and peaks of `layers` stacked layers per approach, predicted on meta."""
    rows = [(f"{layers} layers of", "saved for backward", "held after forward", "peak of the step")]
    for name, fn in (("broadcast matmul", broadcast_matmul), ("checkpointed", checkpointed), ("einsum", einsum)):
        x, W = thread_inputs(params, True, True)
        deep = stacked(fn, layers)
        saved = memory.ledger(deep, x, W).total_bytes
        p = memory.peaks(deep, x, W)
        rows.append((name, fmt_bytes(saved), fmt_bytes(p.after_forward.predicted), fmt_bytes(p.step.predicted)))
    return text_table(rows, numbers=True)


# --- torch.compile ----------------------------------------------------------------------------------


@dataclasses.dataclass
class CompileReport:
    backend: str
    problem: str | None = None  # why it did not run, in a sentence
    compile_s: float = 0.0
    correct: str = ""
    graph: str = ""  # the compiled step's autograd graph, with what it saved
    saved_new: int = 0  # new bytes saved for backward (not x or W)
    peaks: memory.Measured | None = None
    eager_peaks: memory.Measured | None = None
    time: timing.Timing | None = None
    eager_time: timing.Timing | None = None

    def __str__(self) -> str:
        if self.problem:
            return f"torch.compile was not run: {self.problem}"
        lines = [f"backend {self.backend!r}: first call (tracing and compiling) took {self.compile_s:.1f} s",
                 self.correct,
                 f"new memory saved for backward: {fmt_bytes(self.saved_new)}"]
        if self.backend != "inductor":
            lines.append(f"({self.backend!r} decides what to save as Inductor's partitioner does, so the saved bytes "
                         "are Inductor's; it then runs eager kernels, so its peaks and times would not be, and are "
                         "not shown)")
        if self.peaks is not None and self.peaks.forward is not None:
            lines.append(f"measured peaks, compiled: forward {fmt_bytes(self.peaks.forward)}, backward "
                         f"{fmt_bytes(self.peaks.backward)}; eager: forward {fmt_bytes(self.eager_peaks.forward)}, "
                         f"backward {fmt_bytes(self.eager_peaks.backward)}")
        if self.time is not None:
            lines.append(f"time per step: compiled {timing.fmt_time(self.time.median)}, "
                         f"eager {timing.fmt_time(self.eager_time.median)}")
        return "\n".join(lines)


default_backend = compiling.default_backend  # inductor on a GPU; its partitioner without codegen on a CPU


def _new_saved_bytes(fn, x, W) -> int:
    """New bytes a call saves for backward, from a pack hook alone (no dispatch mode, under which
    a compiled function would run eagerly)."""
    held = {x.untyped_storage()._cdata, W.untyped_storage()._cdata}
    new: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s._cdata not in held:
            new[s._cdata] = s.nbytes()
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        out = fn(x, W)
    del out
    return sum(new.values())


def compile_check(params: dict | None = None, device=None, backend: str | None = None,
                  min_run_time: float = 0.2) -> CompileReport:
    """torch.compile the posted version and look at what it saves, its peaks and its time.

    Never raises for a missing or broken compiler: the report says why instead.
    """
    dev = _device.pick(device)
    backend = backend or default_backend(dev)
    report = CompileReport(backend)
    report.problem = _device.compile_problem()
    if report.problem:
        return report
    full = LESSON.check(params or {}, dev, torch.float32)
    x, W, g = make_inputs(full, dev, torch.float32)
    try:  # only the compile itself: a missing or failing compiler is reported, a bug elsewhere is not hidden
        compiled = torch.compile(broadcast_matmul, backend=backend, dynamic=False)
        t0 = time.perf_counter()
        train_step(compiled, x, W, g)
        _device.synchronize(dev)
        report.compile_s = time.perf_counter() - t0
    except (RuntimeError, OSError, ImportError, NotImplementedError) as err:  # dynamo/inductor errors are RuntimeErrors
        first = (str(err).strip().splitlines() or [""])[0][:200]
        report.problem = f"torch.compile failed here ({type(err).__name__}: {first})"
        return report
    odd = {"batch": 5, "groups": 3, "dim": 7}
    check = dataclasses.replace(LESSON, variants=[LESSON.variant(LESSON.baseline), Variant("torch.compile", compiled)])
    rows = check.check_correct([full, odd], dev, seed=0)
    report.correct = check.correctness_report(rows).replace(
        "match the float64 reference", "match the float64 reference (output, dx and dW)")
    report.saved_new = _new_saved_bytes(compiled, x, W)
    report.graph = memory.graph(compiled(x, W))
    if backend == "inductor":  # a stand-in backend runs eager kernels: its peaks and times are not Inductor's
        report.peaks = memory.measured_peaks(compiled, x, W)
        report.eager_peaks = memory.measured_peaks(broadcast_matmul, x, W)
        report.time = timing.measure(LESSON.call(compiled), x, W, g, label="compiled", min_run_time=min_run_time)
        report.eager_time = timing.measure(LESSON.call(broadcast_matmul), x, W, g, label="eager",
                                           min_run_time=min_run_time)
    return report


# --- recorded results ----------------------------------------------------------------------------------

SWEEP_GPU = [512, 1024, 2048, 4096, 8192, 16384]
SWEEP_CPU = [64, 128, 256, 512, 1024]


def record(device, quick: bool = False) -> dict:
    """This lesson's recorded results: a headline run with memory metrics, a batch sweep, and on a
    GPU the thread's experiment measured with memory_allocated()."""
    dev = torch.device(device)
    t = 0.05 if quick else 0.3
    shape = LESSON.defaults(dev)
    if quick and dev.type != "cuda":
        shape = {**shape, "batch": 128}
    head = LESSON.run(shape, dev, min_run_time=t)
    out = {"headline": results.run_to_dict(head, roofline.measure_peaks(dev))}
    out["headline"]["metrics"] = head.metrics
    values = SWEEP_GPU if dev.type == "cuda" else SWEEP_CPU
    if quick:
        values = values[:2]
    sw = LESSON.sweep("batch", values, shape, dev, min_run_time=t / 2, progress=False)
    out["sweeps"] = {"batch": {**results.sweep_to_dict(sw), "metrics": sw.metric_series()}}
    m = head.metrics
    out["claims"] = {
        "forward peak ratio, broadcast matmul / einsum": m["broadcast matmul"]["forward peak (MiB)"]
        / m["einsum"]["forward peak (MiB)"],
        "saved for backward, broadcast matmul (MiB)": m["broadcast matmul"]["saved for backward (MiB)"],
    }
    repro = measure_reproduction(dev)
    if repro:
        out["reproduce"] = repro
    return out


def targets(device, section: dict) -> list[dict]:
    """This lesson's bars (see record.targets): timings that unit tests must not judge on a busy machine.

    The meta analysis of the thread's full shape (ledger of a 1 GiB saved copy, nothing allocated) takes
    at most 1 s (the median of 5 tries, after torch's one-off meta set-up), on any machine."""
    import statistics

    x, W = thread_inputs()
    memory.ledger(broadcast_matmul, *thread_inputs({"batch": 8, "groups": 2, "dim": 4}))  # one-off set-up
    tries = []
    for _ in range(5):
        t0 = time.perf_counter()
        memory.ledger(broadcast_matmul, x, W)
        tries.append(time.perf_counter() - t0)
    value = statistics.median(tries)
    return [{"name": "02 meta ledger of the thread's full shape (s)", "value": value, "bar": "<= 1 (any machine)",
             "ok": value <= 1.0}]


def recorded_reproductions() -> list[tuple[str, dict]]:
    """(label, the thread's experiment) from every recorded GPU file that has it: measured with the
    course harness, or reported in the thread (the label says which)."""
    return [(rec.label(), rec.lesson(LESSON.key)["reproduce"])
            for rec in results.for_lesson(LESSON.key, gpu_only=True) if "reproduce" in rec.lesson(LESSON.key)]


# --- exercise ----------------------------------------------------------------------------------------
# A grouped layer over a sequence: x (B, T, G·D) and W (G, D, D); return out (B, T, G, D) with
# out[b, t, g] = x[b, t, g] @ W[g]. Autograd must keep no more new memory than one copy of x,
# and backward must not build a gradient for every (b, t) copy of W.


def exercise_starter(x, W):
    """The posted pattern, one dimension more: it copies W for every (b, t) and autograd keeps it."""
    B, T, _ = x.shape
    G, D, _ = W.shape
    return (x.view(B, T, G, 1, D) @ W).squeeze(-2)


def exercise_reference(x, W):
    B, T, _ = x.shape
    G, D, _ = W.shape
    return torch.einsum("btgi,gio->btgo", x.double().view(B, T, G, D), W.double())


EXERCISE_SHAPES = [(2, 3, 4, 8), (3, 5, 3, 7), (1, 1, 1, 1), (4, 16, 8, 16)]  # B, T, G, D
EXERCISE_META_SHAPE = (16, 128, 8, 64)


def check_exercise(fn) -> Verdict:
    """Grade a grouped layer over a sequence: correct (output and both gradients), saves at most one
    activation's worth of new memory, and its backward peak stays within a few activations.

    The reader's code runs on inputs the checker keeps a copy of, inside a time limit; whatever it
    does (raise, hang, return NaN or a wrong shape, write into its inputs) becomes a ✗ line."""
    v = Verdict(f"Exercise 02 ({getattr(fn, '__name__', 'your function')})")
    if not callable(fn):
        v.check("is a function", False, f"got {type(fn).__name__}; pass your function itself, e.g. my_grouped_layer")
        return v
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for B, T, G, D in EXERCISE_SHAPES:
        x = torch.randn(B, T, G * D, generator=gen, requires_grad=True)
        W = (torch.randn(G, D, D, generator=gen) / D**0.5).requires_grad_()
        gout = torch.randn(B, T, G, D, generator=gen)
        x64, W64 = x.detach().double().requires_grad_(), W.detach().double().requires_grad_()
        ref = exercise_reference(x64, W64)  # from the inputs as they are before the reader's code runs
        rdx, rdW = torch.autograd.grad(ref, (x64, W64), gout.double())

        def forward_backward(x, W):
            out = fn(x, W)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, T, G, D):
                raise ValueError(f"returned {tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}, "
                                 f"expected a tensor of shape (B, T, G, D) = {(B, T, G, D)}")
            return (out, *torch.autograd.grad(out, (x, W), gout))

        got, problem = call_reader(forward_backward, x, W)
        if problem:
            v.check(f"runs forward and backward at B, T, G, D = {B}, {T}, {G}, {D}", False,
                    problem.replace("your code raised ValueError: ", "your function "))
            return v
        worst = max(worst, rel_error(got, (ref, rdx, rdW)))
    v.check("output, dx and dW match float64 at 4 shapes (odd ones included)", worst < 1e-4,
            "NaN or inf in a result" if worst == float("inf") else
            (f"worst relative error {worst:.1e}" if worst >= 1e-4 else ""))

    B, T, G, D = EXERCISE_META_SHAPE
    act = B * T * G * D * 4

    def inputs(device):
        return (torch.randn(B, T, G * D, device=device, requires_grad=True),
                torch.randn(G, D, D, device=device, requires_grad=True))

    led, _where, problem = analyse_reader(lambda x, W: memory.ledger(fn, x, W), inputs)
    if problem:
        v.check("can be traced", False, problem)
        return v
    v.check(f"new memory saved for backward at most one copy of x ({fmt_bytes(act)}), at B, T, G, D = "
            f"{B}, {T}, {G}, {D}", led.total_bytes <= act, f"saves {fmt_bytes(led.total_bytes)}")
    p, _where, problem = analyse_reader(lambda x, W: memory.peaks(fn, x, W), inputs)
    if problem:
        v.check("backward can be traced", False, problem)
        return v
    v.check(f"backward peak at most 4 copies of x ({fmt_bytes(4 * act)})", p.backward.predicted <= 4 * act,
            f"predicted {fmt_bytes(p.backward.predicted)}")
    if _device.has_cuda():
        m, _where, problem = analyse_reader(lambda x, W: memory.measured_peaks(fn, x, W),
                                            lambda _dev: inputs("cuda"))
        ok = problem is None and m.backward <= 4 * act
        v.on_gpu("measured backward peak at most 4 copies of x", ok, problem or fmt_bytes(m.backward))
    else:
        v.on_gpu("measured backward peak at most 4 copies of x", None)
    return v


__all__ = ["LESSON", "THREAD_SHAPE", "POSTED", "broadcast_matmul", "einsum", "bmm_3d", "GroupedMatmul",
           "custom_function", "checkpointed", "thread_einsum", "strategy_1", "strategy_2", "train_step",
           "make_inputs", "step_memory", "explorer", "thread_inputs", "allocated_after_forward", "reproduce_table",
           "measure_reproduction", "requires_grad_facts", "requires_grad_table", "memory_table", "predicted_peaks", "stacked",
           "depth_table", "compile_check", "CompileReport", "record", "recorded_reproductions", "exercise_starter",
           "check_exercise", "metrics_table"]
