"""Fewer ops by hand (launches, new memory, bytes of each eager rewrite), many small tensors (foreach
SGD), and every fix checked against float64."""
from __future__ import annotations

import torch

from .. import claim_table, grading, noise, timing
from .. import device as _device
from ..display import text_table
from .lessons import FORWARD_FIXES, TRAIN_LESSON, _bytes, _module_ops


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


def optimizer_timings(device=None, n_tensors: int = 64, size: int = 1000, min_run_time: float = 0.02,
                      max_time: float = 4.0) -> noise.Comparison:
    """One SGD step over `n_tensors` tensors, for loop against foreach, in the noise rule's paired rounds
    (`.timings` holds the last round's Timing of each; on the H200 one timing a side spread 77%)."""
    dev = timing.timing_device(device)
    for name, value in (("n_tensors", n_tensors), ("size", size)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 31:
            raise ValueError(f"{name} must be a whole number from 1 to {1 << 31:,}, got {value!r}.")
    # each tensor and its gradient, float32, checked before the first is allocated
    _device.check_fits(2 * 4 * n_tensors * size, dev, f"{n_tensors:,} tensors of {size:,} elements and their gradients")
    params = [torch.zeros(size, device=dev, requires_grad=True) for _ in range(n_tensors)]
    for p in params:
        p.grad = torch.ones(size, device=dev)
    steps = {f"SGD step, foreach={foreach}": torch.optim.SGD(params, lr=1e-6, foreach=foreach).step
             for foreach in (False, True)}
    return noise.compare(steps, min_run_time=min_run_time, max_time=max_time, device=dev, pairs=OPTIMIZER_PAIRS)


OPTIMIZER_PAIRS = [("SGD step, foreach=False", "SGD step, foreach=True")]  # what the sentence compares


def optimizer_table(cmp: noise.Comparison) -> str:
    """Both steps over the paired rounds, with the ratio `optimizer_summary` quotes (`claim_table`)."""
    return claim_table.of(cmp, OPTIMIZER_PAIRS)


def optimizer_summary(cmp: noise.Comparison) -> str:
    """for-loop SGD step over foreach, through the noise rule (the median of the paired rounds' ratios): the
    number `optimizer_table` prints."""
    return "foreach against the for loop: " + claim_table.say(
        cmp.ratio(*OPTIMIZER_PAIRS[0]), "the loop takes {x} foreach's time", tie="no measurable difference") + "."
