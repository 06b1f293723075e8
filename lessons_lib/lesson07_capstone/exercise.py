"""The exercise: the reader fixes the pitfalls in their own order; `check_exercise` says which remain.

The reader passes a model (a `Model`, with the fixes they chose, or their own edit of one) and a training
loop (`slow_train` edited, say). The checker trains it for a few steps beside the original with the same
weights (copied before the reader's code runs), then reads the op trace, the saved-tensor ledger and the
sync detector of two steps (its CUDA view: what would make a GPU's host wait, with x and y on the device and
the loop's own tensors on the host): one line per pitfall, never a clock. On a real GPU it also times the step
(grading.speed_check: paired rounds).
Anything the reader's code does (raise, hang, return garbage) becomes a verdict line.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from .. import device as _device
from ..grading import Verdict, call_reader, rel_error
from ..memory import ledger
from ..syncs import cuda_syncs, syncs
from ..trace import trace_ops
from .model import Model, copy_weights, make_data, slow_train

STEPS = 2  # steps the tools watch
CHECK_STEPS = 3  # steps trained beside the original
RTOL = 1e-4  # float32 against float32, same weights and data: rounding only


def exercise_starter() -> tuple[Model, callable]:
    """The original model (CPU shape) and its training loop: what the reader starts from."""
    torch.manual_seed(0)
    return Model(False), slow_train


def _dims(model: Model) -> dict:
    b = model.block
    return {"C": model.inp.out_features, "H": b.H, "E": b.E, "D": b.D}


def _per_step(found, steps=STEPS) -> float:
    return len(found) / steps


def check_exercise(model, train, batch: int = 8, T: int = 6) -> Verdict:
    """Grade the reader's (model, train): it still learns the same numbers, and which pitfalls remain."""
    v = Verdict("Exercise 07 (the capstone)")
    if not isinstance(model, Model):
        v.check("the model is a lesson Model (L.Model(fixed=...), or your edit of one)", False,
                f"got {type(model).__name__}")
        return v
    if not callable(train):
        v.check("train is a function like slow_train(model, x, y, steps, batch, lr)", False,
                f"got {type(train).__name__}")
        return v
    d = _dims(model)
    x, y = make_data(n=4 * batch, T=T)
    start = copy.deepcopy(model)  # the weights before the reader's code runs
    ref = copy_weights(start, Model(False, d["C"], d["H"], d["E"]))
    out, problem = call_reader(lambda: train(model, x.clone(), y.clone(), steps=CHECK_STEPS, batch=batch))
    if problem is None and not (isinstance(out, tuple) and len(out) == 2):
        problem = f"train returned {type(out).__name__}; return (losses, outputs) as slow_train does"
    if problem:
        v.check(f"trains for {CHECK_STEPS} steps", False, problem)
        return v
    losses, outs = out
    r_losses, r_outs = slow_train(ref, x, y, steps=CHECK_STEPS, batch=batch)
    try:
        err = rel_error([torch.as_tensor(losses, dtype=torch.float64), outs],
                        [torch.tensor(r_losses, dtype=torch.float64), r_outs])
    except Exception as e:  # a loss list of strings, say
        err, problem = float("inf"), f"{type(e).__name__}: {e}"
    v.check(f"the same losses and outputs as the original over {CHECK_STEPS} steps (float32, same weights)",
            err <= RTOL, problem or (f"worst relative error {err:.1e}" if err > RTOL else ""))

    model = copy.deepcopy(start)
    watched, problem = call_reader(lambda: _watch(model, train, x, y, batch))
    if problem:
        v.check("can be traced (op trace, ledger, sync detector)", False, problem)
        return v
    for name, ok, seen in _pitfalls(watched, d, batch, T):
        v.check(name, ok, seen)
    if _device.has_cuda() and not getattr(torch.cuda, "_course_simulated", None):
        v.on_gpu(*_gpu_speedup(start, train))
    else:
        v.on_gpu(SPEED_LINE, None)
    return v


def _watch(model, train, x, y, batch):
    tr = trace_ops(train, model, x, y, steps=STEPS, batch=batch)
    try:  # on meta copies standing in for the GPU: the model is not trained
        sy = cuda_syncs(train, model, x, y, steps=STEPS, batch=batch)
    except Exception:  # a loop that cannot run on meta: every host read counts, as if every tensor were on a GPU
        sy = syncs(train, copy.deepcopy(model), x, y, steps=STEPS, batch=batch)
    xb, yb = x[:batch], y[:batch]
    led = ledger(lambda: F.cross_entropy(model(xb), yb))
    return tr, sy, led


def _pitfalls(watched, d: dict, batch: int, T: int) -> list[tuple[str, bool, str]]:
    """(pitfall, fixed?, what the tools saw), one per pitfall, from the trace, the ledger and the syncs."""
    tr, sy, led = watched
    C, E = d["C"], d["E"]
    # lesson 01: matmul's broadcast copies a weight per batch row: a copy of `batch` × a weight's size
    D = d["D"]
    bcast = [op for op in tr.copies if op.out_shapes and len(op.out_shapes[0]) == 4 and op.out_shapes[0][0] == batch
             and op.out_shapes[0][1] == d["H"] and op.out_shapes[0][2:] in ((C, D), (D, C))]
    # lesson 03: one small Linear per expert: GEMMs whose width is C/E (a GroupedLinear is one batched GEMM)
    w = C // E
    small = [op for op in tr.named("addmm", "mm") if op.gemm[2:] == (w, w) or op.gemm[1:3] == (w, w)]
    # lesson 04: hand-written chains: tanh (the GELU) and sqrt (the norm) as separate ops
    chain = tr.named("tanh", "sqrt", "rsqrt")
    # lesson 02: the (B, H, T, T) attention matrix kept for backward
    kept = [e for e in led.entries if len(e.shape) == 4 and e.shape[-2:] == (T, T)]
    # lesson 06: host syncs on a GPU in the loop; the outputs joined by a cat per step; the batch stacked sample by
    # sample
    n_sync = _per_step(sy.syncs)
    first = max(sy.lines().items(), key=lambda kv: kv[1])[0] if sy.syncs else ""
    cats = [op for op in tr.named("cat") if op.out_shapes and len(op.out_shapes[0]) == 2]  # (rows, K) outputs
    stacks = [op for op in tr.named("stack") if len(op.in_shapes) >= batch]
    # lesson 04: the optimizer's for loop, one update op per parameter (SGD's default on a CPU; on CUDA its default
    # is foreach already: torch/optim/optimizer.py, _default_to_fused_or_foreach)
    updates = tr.named("add_")
    return [
        ("broadcast matmul (lesson 01)", not bcast,
         f"{_per_step(bcast):.0f} copies of a per-head weight, one per batch row, per step" if bcast else ""),
        ("loop of small Linears (lesson 03)", not small, f"{_per_step(small):.0f} small GEMMs per step" if small else ""),
        ("hand-written elementwise chains (lesson 04)", not chain,
         f"{_per_step(chain):.0f} tanh/sqrt ops per step" if chain else ""),
        ("attention matrix kept for backward (lesson 02)", not kept,
         f"{len(kept)} saved tensors of shape {kept[0].shape}" if kept else ""),
        ("host syncs in the loop on a GPU (lesson 06)", n_sync < 1,
         f"{n_sync:.1f} host syncs per step, the most at: {first}" if n_sync >= 1 else ""),
        ("cat in the loop (lesson 06)", len(cats) <= 1, f"{len(cats)} cats of the outputs in {STEPS} steps"
         if len(cats) > 1 else ""),
        ("batch stacked sample by sample (lesson 06)", not stacks,
         f"{_per_step(stacks):.0f} stacks of {batch} samples per step" if stacks else ""),
        ("optimizer loop over parameters (lesson 04; SGD's default on a CPU, not on CUDA)", _per_step(updates) < 8,
         f"{_per_step(updates):.0f} add_ ops per step" if _per_step(updates) >= 8 else ""),
    ]


SPEED_BAR = 1.3  # the reader's step against the original's: decided and at least this much faster
SPEED_LINE = f"the training step at least {SPEED_BAR:g}× faster than the original (measured)"


# On a GPU the checker also times four training steps of the reader's loop against the original's.
def _gpu_speedup(start: Model, train):
    from ..grading import speed_check

    d = _dims(start)
    dev = torch.device("cuda")
    x, y = (t.to(dev) for t in make_data(n=256))
    mine = copy.deepcopy(start).to(dev)
    orig = copy_weights(start, Model(False, d["C"], d["H"], d["E"])).to(dev)
    return speed_check(SPEED_LINE, lambda: slow_train(orig, x, y, steps=4), lambda: train(mine, x, y, steps=4),
                       SPEED_BAR, dev, max_time=15)
