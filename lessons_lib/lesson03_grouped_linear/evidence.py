"""Lesson 03's evidence: reproduce the thread, the precision model, and the correctness of every strategy."""
from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import claim_table, noise, roofline, timing, trace
from .. import device as _device
from .. import grouped_linear as GL
from ..display import text_table
from ..grading import rel_error
from ..lesson import Variant
from ..trace import trace_ops
from .lessons import (
    LESSON, make_inputs, THREAD_REPORTED, THREAD_REPORTED_NOTE, THREAD_SHAPE, TRAIN_LESSON, train_peak_bytes,
)
from .variants import _BASE, grouped_conv1d, grouped_mm, SlowGroups


# --- reproduce --------------------------------------------------------------------------------------------


def thread_models(params: dict | None = None, device=None, seed: int = 0, **shape) -> dict[str, nn.Module]:
    """The thread's SlowGroups, its grouped Conv1d and GroupedLinear converted from the same
    SlowGroups (so all three compute the same function), on `device`. The shape (`params`, or keywords
    such as groups=100, group_size=100) is checked, and its three copies of the weights must fit, before
    anything is allocated."""
    dev = _device.pick(device)
    p = LESSON.check({**(params or {}), **shape}, dev, torch.float32, memory=False)
    G, K = p["groups"], p["group_size"]
    _device.check_fits(3 * 4 * (G * K * K + G * K), dev, f"three copies of {G} Linears of {K}×{K}")
    torch.manual_seed(seed)
    slow = SlowGroups(G * K, G).to(dev)
    fast = GL.GroupedLinear.from_slow_groups(slow)
    conv = fast.to_conv1d()
    return {"SlowGroups (loop)": slow, "grouped Conv1d": conv, "GroupedLinear(auto)": fast}


def _fwd(model, x):
    with torch.no_grad():
        return model(x)


def _train(model, opt, x, g):
    opt.zero_grad(set_to_none=True)
    model(x).backward(g)
    opt.step()


def reproduce(device=None, params: dict | None = None, min_run_time: float = 0.1, max_time: float = 3.0,
              amp: str | None = None):
    """Forward and full training step (forward, backward, Adam step) of the thread's two modules and
    GroupedLinear, timed with the harness. Returns ({"forward": [...], "training step": [...]}, models).

    amp: "float16" or "bfloat16" runs them under `torch.autocast` (mixed precision, as the replier ran
    fp16 on a 3080 Ti; the parameters and Adam stay float32). On a CPU autocast takes bfloat16 only."""
    dev = _device.pick(device)
    amp_dtype = None if amp is None else _amp_dtype(amp, dev)
    p = LESSON.check(params or LESSON.defaults(dev), dev, torch.float32)
    _device.check_fits(train_peak_bytes(p, torch.float32), dev, "the reproduction")
    models = thread_models(p, dev)
    N, C, L = p["batch"], p["groups"] * p["group_size"], p["length"]
    out = {"forward": [], "training step": []}
    ctx = (lambda: torch.autocast(dev.type, dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext
    # One autocast region per phase: autocast caches its casts of the weights until its region ends, and
    # on older torch (2.9) a cast cached under the forward's no_grad came back without a grad_fn in training.
    with _device.oom_guard(dev, "the reproduction"):
        x, g = torch.randn(N, C, L, device=dev), torch.randn(N, C, L, device=dev)
        with ctx():
            for name, m in models.items():
                out["forward"].append(timing.measure(_fwd, m, x, label=_label(name, dev, amp_dtype),
                                                     min_run_time=min_run_time, max_time=max_time, device=dev))
        with ctx():
            for name, m in models.items():
                opt = torch.optim.Adam(m.parameters(), lr=1e-6)
                out["training step"].append(timing.measure(_train, m, opt, x, g, label=_label(name, dev, amp_dtype),
                                                           min_run_time=min_run_time, max_time=max_time, device=dev))
    return out, models


def _label(name: str, dev: torch.device, amp_dtype) -> str:
    """A module's timing label, with " (TF32)" where its float32 work runs in TF32 on this GPU (`tf32_note`)."""
    tf32 = amp_dtype is None and _tf32_here(dev) and trace.tf32_enabled("conv" if "Conv1d" in name else "matmul")
    return f"{name} (TF32)" if tf32 else name


def _tf32_here(dev: torch.device) -> bool:
    return dev.type == "cuda" and torch.cuda.get_device_capability(dev) >= (8, 0)


def tf32_note(device=None, dtype=torch.float32) -> str:
    """Which of this lesson's timings on `device` are TF32, in one sentence; "" where none can be (a CPU, a
    GPU without TF32 tensor cores, a dtype other than float32). cuDNN runs float32 convolutions in TF32 by
    default, cuBLAS runs float32 GEMMs in full float32 by default: then the grouped Conv1d (and GroupedLinear
    where it picks 'conv') is timed in TF32 against GEMMs in float32 (`roofline.tf32_settings()`)."""
    dev = _device.pick(device)
    if dtype != torch.float32 or not _tf32_here(dev):
        return ""
    conv, gemm = trace.tf32_enabled("conv"), trace.tf32_enabled("matmul")
    if conv and gemm:
        return "TF32 on this GPU: every float32 timing here is TF32 (cuDNN's default, and TF32 turned on for matmuls)."
    if conv:
        return ("TF32 on this GPU: the grouped Conv1d's float32 timings (GroupedLinear's too where it picks 'conv') "
                "are TF32 timings: cuDNN runs float32 convolutions in TF32 by default "
                "(torch.backends.cudnn.conv.fp32_precision = 'tf32'), while the GEMM variants run in full float32.")
    if gemm:
        return ("TF32 on this GPU: the GEMM variants' float32 timings are TF32 (turned on for matmuls); the grouped "
                "Conv1d's are full float32 (cuDNN's TF32 turned off).")
    return ""


def _amp_dtype(amp: str, dev: torch.device) -> torch.dtype:
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(amp)
    if dt is None:
        raise ValueError(f"amp={amp!r}: choose 'float16' or 'bfloat16' (or leave it out for float32).")
    if dev.type == "cpu" and dt is torch.float16:
        raise ValueError("CPU autocast runs these layers in bfloat16: pass amp='bfloat16' on a CPU.")
    return dt


# The comparisons the reproduction's sentences make: (name in the sentence, numerator row, denominator row).
_REPRODUCED = (("Conv1d / loop", "grouped Conv1d", "SlowGroups (loop)"),
               ("GroupedLinear(auto) / loop", "GroupedLinear(auto)", "SlowGroups (loop)"),
               ("GroupedLinear(auto) / Conv1d", "GroupedLinear(auto)", "grouped Conv1d"))


def reproduce_ratios(ts: list) -> list[noise.Ratio]:
    """Time over time of the three comparisons, one `Ratio` each through the noise rule (`noise.from_timings`:
    the two medians, their spreads added), named by the table's rows: `reproduce_table` prints them and
    `reproduce_summary` quotes them, so the two cannot disagree."""
    by = {tm.label.removesuffix(" (TF32)"): tm for tm in ts}
    return [dataclasses.replace(noise.from_timings(by[a], by[b]), num=by[a].label, den=by[b].label)
            for _name, a, b in _REPRODUCED]


def reproduce_table(t: dict) -> str:
    """Each kind's timings with the ratios its sentences quote (`claim_table`)."""
    return "\n\n".join(f"{kind}:\n" + claim_table.table(ts, reproduce_ratios(ts), how="ratio of the medians")
                        for kind, ts in t.items())


def reproduce_summary(t: dict, device=None) -> str:
    """What the reproduction shows here, in words that follow the numbers, through the noise rule: a
    ratio whose two timings spread too much is "not decided on this run" instead of a verdict. With the
    `device` it ran on, a GPU's TF32 note follows (`tf32_note`)."""
    lines = []
    for kind, ts in t.items():
        said = [f"{name}: " + claim_table.say(r, "{x}", tie="{x} (the same within 5%)")
                for (name, _a, _b), r in zip(_REPRODUCED, reproduce_ratios(ts))]
        lines.append(f"{kind}, time over time: " + "; ".join(said) + ".")
    conv_fwd = next((tm for tm in t.get("forward", []) if tm.label.startswith("grouped Conv1d")), None)
    conv_train = next((tm for tm in t.get("training step", []) if tm.label.startswith("grouped Conv1d")), None)
    if conv_fwd and conv_train and conv_fwd.median > conv_train.median:
        lines.append("⚠ grouped Conv1d's forward measured slower than its whole training step, which includes "
                     "that forward: suspect (a slow moment, or a backend choice that differs between the two); "
                     "nothing here is concluded from it.")
    if device is not None and any(tm.label.endswith(" (TF32)") for ts in t.values() for tm in ts):
        lines.append(tf32_note(device))
    return "\n".join(lines)


def reported_table() -> str:
    rows = [("variant (as reported in the thread)", "seconds")]
    rows += [(k, f"{v:.3f}") for k, v in THREAD_REPORTED.items()]
    ratio = THREAD_REPORTED["grouped Conv1d"] / THREAD_REPORTED["batched matmul (reply's MultichannelLinear)"]
    return text_table(rows, numbers=True) + f"\nratio {ratio:.2f}×; {THREAD_REPORTED_NOTE}"


def precision_model(params: dict | None = None, gpus=roofline.MODEL_GPUS, training: bool = True,
                    variants=("loop (SlowGroups)", "grouped Conv1d", "matmul, channels first", "bmm, rows first")) -> str:
    """Roofline floors (model, from datasheet peaks; not measurements) of a training step at the thread's
    shape in float32, float16 and bfloat16, per GPU: the mixed-precision side of the replier's fp16 run.
    The work is traced once on meta in float32; in fp16/bf16 the same ops move 2-byte elements (half the
    bytes, the same FLOPs and launches). A GPU without bf16 hardware (T4) says so. float32 is PyTorch's default:
    GEMMs in full float32, the grouped Conv1d's convolutions in TF32 where the GPU has it (cuDNN's default; the
    trace marks them). The grouped Conv1d's floor assumes its kernels run at that peak, which the thread
    suggests they do not."""
    p = {**THREAD_SHAPE, **(params or {})}
    lesson = TRAIN_LESSON if training else LESSON
    lesson = dataclasses.replace(lesson, variants=[lesson.variant(v) for v in variants])  # trace only these
    dtypes = (torch.float32, torch.float16, torch.bfloat16)
    w32 = lesson.work(p, torch.float32)
    half = {v: dataclasses.replace(w, bytes=w.bytes // 2, lt_bias_bytes=w.lt_bias_bytes // 2) for v, w in w32.items()}
    work = {torch.float32: w32, torch.float16: half, torch.bfloat16: half}
    rows = [("GPU (model)", "variant", *(str(dt).replace("torch.", "") for dt in dtypes))]
    for gpu in gpus:
        for v in variants:
            cells = []
            for dt in dtypes:
                pk = roofline.datasheet(gpu, dt, tf32=False)
                cells.append("no hardware" if pk is None else timing.fmt_time(pk.floor(work[dt][v])))
            rows.append((gpu, v, *cells))
    shape = ", ".join(f"{k} {v}" for k, v in p.items())
    return (text_table(rows) + f"\n{'training step' if training else 'forward'} at {shape}; floors from datasheet "
            "peaks (float32: GEMMs without TF32, convolutions in TF32 where the GPU has it, PyTorch's defaults; "
            f"fp16/bf16 tensor cores) and {roofline.ASSUMED_LAUNCH['H100'] * 1e6:g} µs of host time per op (measured "
            "on an H200's host): a model, not a measurement.")


# --- the GPU step model lives in step_model.py (re-exported here for the notebook and the tests) ----------
from .step_model import (  # noqa: E402,F401
    GEMM_EFFICIENCY, H200_MEASURED, MEMORY_EFFICIENCY, STEP_VARIANTS, h200_errors, h200_measured, predict, step_model,
    step_model_table,
)


# --- fix: correctness of every strategy -------------------------------------------------------------------


CHECK_SHAPE = {"batch": 2, "groups": 8, "group_size": 16, "length": 16}  # mid-sized: quick in float64 on a busy CPU


def check_all(device="cpu", seed: int = 0, shapes: list[dict] | None = None) -> str:
    """Every variant, forward and training step, against float64 at `shapes` (default: the device's
    default shape and the odd ones)."""
    fwd = LESSON.correctness_report(LESSON.check_correct(shapes, device=device, seed=seed))
    train = TRAIN_LESSON.correctness_report(TRAIN_LESSON.check_correct(shapes, device=device, seed=seed))
    return f"forward: {fwd}\ntraining step (output, dx, dW, db): {train}"


def conv_tf32_check(device=None) -> str:
    """The grouped Conv1d against float64 at CHECK_SHAPE with cuDNN's TF32 on and then off, set through
    `torch.backends.cudnn.conv.fp32_precision` (torch 2.9+; the old `torch.backends.cudnn.allow_tf32` before it)
    and restored after. On a GPU with TF32 (compute capability 8.0+) TF32 keeps a 10-bit mantissa, about three
    decimal digits; on a CPU or an older GPU both settings run full float32."""
    dev = _device.pick(device)
    torch.manual_seed(0)
    x, w, b = make_inputs(CHECK_SHAPE, dev, torch.float32)
    ref = grouped_conv1d(x.double(), w.double(), b.double())
    conv = getattr(torch.backends.cudnn, "conv", None)
    new_api = isinstance(getattr(conv, "fp32_precision", None), str)
    owner, attr = (conv, "fp32_precision") if new_api else (torch.backends.cudnn, "allow_tf32")
    name = "torch.backends.cudnn.conv.fp32_precision" if new_api else "torch.backends.cudnn.allow_tf32"
    before, lines = getattr(owner, attr), []
    try:
        for on in (True, False):
            setattr(owner, attr, ("tf32" if on else "ieee") if new_api else on)
            with torch.no_grad():
                err = rel_error(grouped_conv1d(x, w, b), ref)
            tol = LESSON.tolerance(CHECK_SHAPE, torch.float32, dev, tf32=on)
            lines.append(f"{name} = {getattr(owner, attr)!r}: grouped Conv1d on {dev.type}, relative error {err:.1e} "
                         f"against float64 (the check's tolerance: {tol:.1e})")
    finally:
        setattr(owner, attr, before)
    return "\n".join(lines)


GROUPED_MM_SHAPES = [{"batch": 2, "groups": 3, "group_size": 8, "length": 5}, {"batch": 1, "groups": 5, "group_size": 16, "length": 3}]


def grouped_mm_report(device="cpu", dtype=torch.float32) -> str:
    """Where grouped_mm runs here, and if it does, its forward and training step against float64
    at shapes its kernels accept (row strides in multiples of 16 bytes)."""
    dev = _device.pick(device)
    lines = []
    for training in (False, True):
        why = GL.grouped_mm_problem(dev, dtype, 8, 8, training=training)
        lines.append(f"grouped_mm {'training step' if training else 'forward'} on {dev.type}, "
                     f"{str(dtype).replace('torch.', '')}: " + ("runs" if why is None else f"not available: {why}"))
    odd = GL.grouped_mm_problem(dev, dtype, 7, 7)
    lines.append(f"group size 7: {odd or 'runs'}")
    if all(GL.grouped_mm_problem(dev, dtype, 8, 8, training=t) is None for t in (False, True)):
        for lesson in (LESSON, TRAIN_LESSON):
            check = dataclasses.replace(lesson, variants=[lesson.variant("loop (SlowGroups)"),
                                                          Variant("grouped_mm", grouped_mm)])
            rows = check.check_correct(GROUPED_MM_SHAPES, dev, dtype, seed=0)
            lines.append(("forward: " if lesson is LESSON else "training step: ") + check.correctness_report(rows))
    try:
        F.grouped_mm  # noqa: B018
        bare = torch.zeros(2, 3, 8, requires_grad=True)
        F.grouped_mm(bare, torch.zeros(2, 8, 8)).sum().backward()
        lines.append("bare F.grouped_mm(...).sum().backward(): works here")
    except AttributeError:
        pass
    except Exception as err:  # the known stride-0 gradient problem: GroupedLinear works around it
        lines.append(f"bare F.grouped_mm(...).sum().backward() fails here ({type(err).__name__}: "
                     f"{str(err).splitlines()[0][:90]}); GroupedLinear makes the gradient dense first")
    return "\n".join(lines)


def grouped_mm_trace(params: dict | None = None) -> str:
    """grouped_mm's ops on small CPU tensors (its meta kernel only knows bf16 on a GPU)."""
    p = {**GROUPED_MM_SHAPES[0], **(params or {})}
    if GL.grouped_mm_problem("cpu", torch.float32, p["group_size"], p["group_size"]):
        return GL.grouped_mm_problem("cpu", torch.float32, p["group_size"], p["group_size"])
    return trace_ops(grouped_mm, *make_inputs(p, torch.device("cpu"), torch.float32)).summary()


def stack_module_state_pitfall() -> str:
    """stack_module_state makes new leaves: an optimizer built on the original Linears never sees them."""
    linears = [nn.Linear(3, 2) for _ in range(4)]
    params, _buffers = torch.func.stack_module_state(linears)
    opt = torch.optim.SGD([p for m in linears for p in m.parameters()], lr=0.1)
    before = params["weight"].detach().clone()
    y = torch.func.vmap(lambda p, x: torch.func.functional_call(_BASE, p, (x,)), in_dims=(0, None))(
        params, torch.randn(5, 3))
    y.sum().backward()
    opt.step()
    stacked_moved = not torch.equal(before, params["weight"])
    orig_grad = all(m.weight.grad is None for m in linears)
    return (f"stacked weight is a new leaf: {params['weight'].is_leaf}; it got a gradient: "
            f"{params['weight'].grad is not None}; the original Linears got none: {orig_grad}; "
            f"an SGD step on the original Linears changed the stacked weight: {stacked_moved}")
