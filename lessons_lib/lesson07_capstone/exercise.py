"""The exercise: the reader fixes the pitfalls in their own order, writing one fix themselves; `check_exercise`
says which remain.

The reader passes a model (a `Model`, with the fixes they chose and their own q, k, v projection,
`Model(fixed={...}, qkv=my_qkv)`) and a training loop (`slow_train` edited, say). The checker first trains it for
a few steps beside the original with the same weights (copied before the reader's code runs): the losses, the
outputs and every parameter's update must match, and x and y must come back as they went in. Then it asks
`lessons_lib.diagnose` (one run of two steps on meta copies, as a GPU would run them: the course's detectors, one
source of truth) which pitfalls remain, one line each, with the reader's line of code where there is one; and it
checks the reader's q, k, v projection on its own: the original's numbers, in one GEMM. Never a clock; on a real
GPU it also times the step (grading.speed_check: paired rounds). Anything the reader's code does (raise, hang,
return garbage) becomes a verdict line.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from .. import device as _device
from ..device import fmt_bytes
from ..display import count
from ..grading import Verdict, call_reader, rel_error
from ..trace import trace_ops
from .model import Model, copy_weights, make_data, qkv_one_gemm, shape, slow_train

STEPS = 2  # steps diagnose watches
CHECK_STEPS = 3  # steps trained beside the original
RTOL = 1e-4  # float32 against float32, same weights and data: rounding only
# Each parameter's update over CHECK_STEPS against the original's, relative to the original's: float32 cancellation
# leaves at most 2.6e-4 for a correct answer (every fix, C=64 and C=256, batch 2 and 8; this CPU), a frozen
# parameter leaves 1.0. The outputs alone could not tell: LayerNorm frozen moves them by 1.3e-5 in 3 steps.
UPDATE_RTOL = 1e-2
WATCH_BATCH = 8  # rows a step in the diagnosed run: diagnose's row-by-row gather needs 8 (detect_launches.MIN_ROWS)


def qkv_starter(h, w, H):
    """The exercise's starting point for `my_qkv`: the q, k, v projections as the forum wrote them (lesson 01's
    broadcast matmul), on the per-head weights cut from nn.Linear(C, 3C)'s (3C, C) weight."""
    B, T, C = h.shape
    wq, wk, wv = w.view(3, H, C // H, C).transpose(-1, -2)   # 3 x (H, C, D): per-head weights
    hh = h.unsqueeze(1)                                        # (B, 1, T, C)
    return hh @ wq, hh @ wk, hh @ wv                           # 3 x (B, H, T, D), each a broadcast matmul


def exercise_starter() -> tuple[Model, callable]:
    """The original model (CPU shape) and its training loop: what the reader starts from."""
    torch.manual_seed(0)
    return Model(False), slow_train


def _whole(name: str, v, least: int = 1) -> str:
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        return f"{name}={v!r}: pass a whole number of at least {least} (the checker's default is fine)"
    return ""


def check_exercise(model, train, batch: int = 8, T: int = 6, speed: bool = True) -> Verdict:
    """Grade the reader's (model, train): it still learns the same numbers, and which pitfalls remain.
    speed=False leaves out the GPU's timed line (a notebook checking several attempts in a row)."""
    v = Verdict("Exercise 07 (the capstone)")
    bad = _whole("batch", batch) or _whole("T", T)
    if bad:
        v.check("the checker's own arguments", False, bad)
        return v
    if not isinstance(model, Model):
        v.check("the model is a lesson Model (L.Model(fixed=..., qkv=my_qkv), or your edit of one)", False,
                f"got {type(model).__name__}")
        return v
    if not callable(train):
        v.check("train is a function like slow_train(model, x, y, steps, batch, lr)", False,
                f"got {type(train).__name__}")
        return v
    d = model.dims()
    start = copy.deepcopy(model)  # the weights before the reader's code runs
    # the part the reader wrote comes first: a wrong my_qkv also changes the losses and every update downstream,
    # and a first line naming another parameter ("block.experts.15.weight: update off") sent them to the experts
    qkv_ok = _qkv_line(v, model.block.qkv_fn, d)
    if not _trains_as_the_original(v, model, train, start, d, batch, T, qkv_ok):
        return v
    report, problem = call_reader(lambda: _diagnose(copy.deepcopy(start), train, max(batch, WATCH_BATCH), T))
    if problem:
        v.check("can be traced (lessons_lib.diagnose: op trace, ledger, sync detector)", False, problem)
        return v
    for name, ok, seen in _pitfalls(report):
        v.check(name, ok, seen)
    if not speed:
        return v
    if _device.has_cuda() and not getattr(torch.cuda, "_course_simulated", None):
        v.on_gpu(*_gpu_speedup(start, train))
    else:
        v.on_gpu(SPEED_LINE, None)
    return v


def _trains_as_the_original(v: Verdict, model, train, start, d, batch, T, qkv_ok: bool = True) -> bool:
    """Three steps beside the original: losses, outputs, each parameter's update, and the inputs left alone.
    qkv_ok=False: the reader's q, k, v (checked above) differ from the original's, so a difference here says so."""
    after_qkv = "" if qkv_ok else "; your q, k, v above differ from the original's: fix them first"
    x, y = make_data(n=4 * batch, T=T, K=d["K"])
    xa, ya = x.clone(), y.clone()
    ref = copy_weights(start, Model(False, d["C"], d["H"], d["E"], d["K"]))
    before = [p.detach().clone() for p in ref.parameters()]
    out, problem = call_reader(lambda: train(model, xa, ya, steps=CHECK_STEPS, batch=batch))
    if problem is None and not (isinstance(out, tuple) and len(out) == 2):
        problem = f"train returned {type(out).__name__}; return (losses, outputs) as slow_train does"
    if problem:
        v.check(f"trains for {CHECK_STEPS} steps", False, problem + after_qkv)
        return False
    losses, outs = out
    r_losses, r_outs = slow_train(ref, x, y, steps=CHECK_STEPS, batch=batch)
    try:
        err = rel_error([_as_float64(losses), outs],
                        [torch.tensor(r_losses, dtype=torch.float64), r_outs])
    except Exception as e:  # a loss list of strings, or of tensors with their graphs
        err, problem = float("inf"), f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    v.check(f"the same losses and outputs as the original over {CHECK_STEPS} steps (float32, same weights)",
            err <= RTOL, problem or (f"worst relative error {err:.1e}{after_qkv}" if err > RTOL else ""))
    name, e_upd = _worst_update(model, ref, before, d)
    v.check(f"every parameter trains as in the original (its update over {CHECK_STEPS} steps)", e_upd <= UPDATE_RTOL,
            (f"{name}: update off by {e_upd:.1e} of the original's{after_qkv}" if not qkv_ok else
             f"{name}: update off by {e_upd:.1e} of the original's (frozen, or trained differently?)")
            if e_upd > UPDATE_RTOL else "")
    changed = [n for n, a, b in (("x", xa, x), ("y", ya, y)) if not torch.equal(a, b)]
    v.check("leaves its inputs x and y as it found them", not changed,
            f"{' and '.join(changed)} changed in place after the call: the caller's data" if changed else "")
    return True


def _as_float64(losses) -> torch.Tensor:
    """The reader's losses (a list of floats or of 0-dim tensors, or a tensor) as float64, without their graphs."""
    if isinstance(losses, torch.Tensor):
        return losses.detach().double()
    return torch.tensor([float(v.detach()) if isinstance(v, torch.Tensor) else float(v) for v in losses],
                        dtype=torch.float64)


def _worst_update(model, ref, before, d) -> tuple[str, float]:
    """The parameter (in the original's layout) whose update differs most from the original's, and by how much."""
    try:
        back = copy_weights(model, Model(False, d["C"], d["H"], d["E"], d["K"]))
    except Exception as e:  # the reader changed the model's shape or its parameters' layout
        return f"the model's parameters ({type(e).__name__})", float("inf")
    worst = ("", 0.0)
    for (name, mine), theirs, b0 in zip(back.named_parameters(), ref.parameters(), before):
        e = rel_error((mine - b0).detach(), (theirs - b0).detach())
        if e > worst[1]:
            worst = (name, e)
    return worst


def _qkv_line(v: Verdict, fn, d) -> bool:
    """The fix the reader writes: q, k, v of every head from one GEMM, the original's numbers (float64, odd
    shapes, forward and both gradients), and no broadcast. Returns whether its numbers are the original's (a
    reader's q, k, v not written yet leaves the original's in the model: True)."""
    name = "your q, k, v projection: the original's numbers, in one GEMM (lesson 01)"
    if fn is None or fn is qkv_one_gemm:
        v.check(name, False, "write my_qkv yourself and pass it: L.Model(fixed={...}, qkv=my_qkv)")
        return True
    torch.manual_seed(0)
    B, T, H, D = 3, 5, 3, 8
    h = torch.randn(B, T, H * D, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3 * H * D, H * D, dtype=torch.float64, requires_grad=True)
    out, problem = call_reader(lambda: tuple(fn(h, w, H)))
    if problem is None and (len(out) != 3 or not all(isinstance(t, torch.Tensor) for t in out)):
        problem = "return three tensors q, k, v, each (B, H, T, D)"
    if problem:
        v.check(name, False, problem)
        return False
    ref = qkv_one_gemm(h, w, H)
    if any(t.shape != r.shape for t, r in zip(out, ref)):
        v.check(name, False, _qkv_miss(out, ref, float("inf")))
        return False
    g = [torch.randn_like(r) for r in ref]
    try:
        grads = torch.autograd.grad(out, (h, w), g, allow_unused=True)
        err = rel_error([*out, *grads], [*ref, *torch.autograd.grad(ref, (h, w), g)])
    except Exception as e:
        err, problem = float("inf"), f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    gemms = len(trace_ops(fn, h.detach(), w.detach(), H).gemms)
    ok = err <= 1e-10 and gemms == 1
    one_gemm = f"{count(gemms, 'GEMM')}: one F.linear with the (3C, C) weight gives q, k and v at once"
    v.check(name, ok, problem or (_qkv_miss(out, ref, err) if err > 1e-10 else one_gemm if gemms != 1 else ""))
    return err <= 1e-10


def _qkv_miss(out, ref, err: float) -> str:
    """Why the reader's q, k, v are not the original's: their shapes, or, at the right shapes, the usual slip (a
    reshape where the axes must move: the student's first attempt)."""
    got, want = [tuple(t.shape) for t in out], tuple(ref[0].shape)
    if any(g != want for g in got):
        return f"q, k, v have shapes {', '.join(map(str, got))}; each should be (B, H, T, D) = {want}"
    return (f"right shapes, other numbers (relative error {err:.1e} against qkv_one_gemm, float64): F.linear's "
            "(B, T, 3C) output views as (B, T, 3, H, D) and q, k, v need H before T; move the axes (permute or "
            "transpose): a reshape to (B, 3, H, T, D) regroups the numbers instead")


def _diagnose(model, train, batch, T):
    from .. import diagnose

    x, y = make_data(n=STEPS * batch, T=T, K=model.dims()["K"])
    return diagnose(train, model, x, y, STEPS, batch)


def _at(found, n_steps=STEPS) -> str:
    """The findings' lines: "at `line`" (with the count a step where it is one)."""
    parts = []
    for f in found:
        n = f.numbers.get("per_step")
        parts.append((f"{n:g} at: " if n is not None else "at: ") + f.where.text)
    return "; ".join(parts)


# (checker line, the diagnose kinds it reads): the starter's pitfalls, then GUARDS, wrong answers the starter does
# not have ("no ..."). The starter's SGD is not one: a for loop over the parameters is its default on a CPU only,
# foreach on CUDA, so diagnose (pricing the step as CUDA runs it) finds nothing there; an update written by hand
# (an op per parameter), or torch.optim with foreach=False, it does find.
LINES = (
    ("broadcast matmul (lesson 01)", ("broadcast matmul", "expanded copy kept for backward")),
    ("loop of small Linears (lesson 03)", ("GEMMs in a Python loop",)),
    ("hand-written elementwise chains (lesson 04)", ("elementwise chain",)),
    ("attention matrix kept for backward (lesson 02)", ("attention matrix kept for backward",)),
    ("host syncs in the loop on a GPU (lesson 06)", ("host sync",)),
    ("cat in the loop (lesson 06)", ("cat in a loop",)),
    ("batch stacked sample by sample (lesson 06)", ("row-by-row gather",)),
    ("no optimizer looping over the parameters on CUDA (lesson 04: an update by hand, or foreach=False)",
     ("for-loop optimizer",)),
    ("no graph kept alive across steps (lessons 02 and 07: log loss.detach() or loss.item())", ("graph kept alive",)),
)
GUARDS = 2  # the last LINES: passed by the starter, failed by a wrong answer


def _gist(f) -> str:
    """A finding's evidence in a clause: what the loop keeps alive, in numbers; else the evidence's first clause."""
    if f.kind == "graph kept alive":
        n = f.numbers
        return (f"{count(n['tensors'], 'tensor')} alive after the call with {count(n['nodes'], 'graph node')} "
                f"from {count(n['steps'], 'step')}, {fmt_bytes(n['saved_bytes'])} still saved for "
                "backward: one graph more every step")
    text = f.evidence.split("; ")[0]
    return text.split(": ")[0] if len(text) > 120 else text


def _pitfalls(report) -> list[tuple[str, bool, str]]:
    """(pitfall, fixed?, what diagnose saw, at the reader's lines), one per line of LINES."""
    out = []
    for name, kinds in LINES:
        found = [f for f in report.findings if f.kind in kinds]
        if not found:
            out.append((name, True, ""))
            continue
        if kinds == ("host sync",):
            n = sum(f.numbers.get("per_step", 0) for f in found)
            seen = f"{count(n, 'host sync')} a step, {_at(found)}"
        else:
            seen = f"{_gist(found[0])} — at: {found[0].where.text}" + \
                (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
        out.append((name, False, seen))
    return out


SPEED_BAR = 1.3  # the reader's step against the original's: decided and at least this much faster
SPEED_LINE = f"the training step at least {SPEED_BAR:g}× faster than the original (measured)"


# On a GPU the checker also times four training steps of the reader's loop against the original's, at the GPU's
# shape (a small CPU shape on an H200 measured the host alone).
def _gpu_speedup(start: Model, train):
    from ..grading import speed_check

    d = start.dims()
    dev = torch.device("cuda")
    g = shape(dev)
    x, y = (t.to(dev) for t in make_data(n=4 * g["batch"], T=g["T"], K=d["K"]))
    mine = copy.deepcopy(start).to(dev)
    orig = copy_weights(start, Model(False, d["C"], d["H"], d["E"], d["K"])).to(dev)
    return speed_check(SPEED_LINE, lambda: slow_train(orig, x, y, steps=4, batch=g["batch"]),
                       lambda: train(mine, x, y, steps=4, batch=g["batch"]), SPEED_BAR, dev, max_time=10)
