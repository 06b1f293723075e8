"""The fixes, one at a time: the cumulative stages, each checked against the original in float64.

A stage is the set of FIXES applied so far, in FIXES' order ("original" has none). Each stage's model
gets the original's weights (`copy_weights` converts the layouts), then both train side by side in
float64: the outputs, every parameter's gradient and the parameters after a few SGD steps must agree.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..grading import rel_error
from .model import FIXES, Model, copy_weights, make_data, shape, train

TOL = 1e-10  # float64: the rewrites reorder sums (one GEMM for three, fused norm), nothing more
ODD = dict(C=24, H=3, E=2, T=5, batch=7)  # heads of 8, experts of 12, an odd batch and token count


def stages(fixes=None) -> list[tuple[str, frozenset]]:
    """[(name, fixes so far)]: "original", then "+ gemm", "+ grouped", ... in FIXES' order
    (or in the order given: the exercise lets a reader choose)."""
    order = list(FIXES) if fixes is None else list(fixes)
    out, done = [("original", frozenset())], []
    for f in order:
        done.append(f)
        out.append((f"+ {f}", frozenset(done)))
    return out


def model_pair(fixes, dims: dict, dtype=torch.float64, seed=0, device="cpu"):
    """The original model and one with `fixes`, holding the same weights."""
    torch.manual_seed(seed)
    ref = Model(False, dims["C"], dims["H"], dims["E"], dtype=dtype).to(device)
    return ref, copy_weights(ref, Model(fixes, dims["C"], dims["H"], dims["E"], dtype=dtype).to(device))


def grads_as_original(model: Model, dims: dict) -> dict[str, torch.Tensor]:
    """Every parameter's gradient, in the original model's layout (so any two stages compare)."""
    shadow = Model(model.fixed, dims["C"], dims["H"], dims["E"], dtype=next(model.parameters()).dtype)
    with torch.no_grad():
        for p, s in zip(model.parameters(), shadow.parameters()):
            s.copy_(p.grad if p.grad is not None else torch.zeros_like(p))
    out = copy_weights(shadow, Model(False, dims["C"], dims["H"], dims["E"], dtype=shadow.inp.weight.dtype))
    return {k: v.detach() for k, v in out.named_parameters()}


class Agreement(NamedTuple):
    stage: str
    outputs: float  # worst relative error against the original
    grads: float
    steps: float  # losses and parameters after `n_steps` SGD steps
    ok: bool
    n_steps: int = 3


def _reference(dims: dict, steps: int):
    """The original model's output, gradients and training run, in float64 (shared by every stage)."""
    x, y = make_data(n=2 * dims["batch"], T=dims["T"], dtype=torch.float64)
    ref, _ = model_pair(False, dims)
    xb, yb = x[:dims["batch"]], y[:dims["batch"]]
    out = ref(xb)
    F.cross_entropy(out, yb).backward()
    grads = grads_as_original(ref, dims)
    ref.zero_grad()
    losses, outs = train(ref, x, y, steps=steps, batch=dims["batch"])
    after = [torch.tensor(losses, dtype=torch.float64), outs, *(p.detach() for p in ref.parameters())]
    return (x, y), out.detach(), grads, after


def check_stage(fixes, dims: dict | None = None, steps: int = 3, name: str = "", _ref=None) -> Agreement:
    """One stage against the original, in float64: the output, the gradient of every parameter,
    and the losses, outputs and parameters after `steps` steps of each one's training loop."""
    dims = dims or shape("cpu")
    (x, y), out_r, gr, after_r = _ref or _reference(dims, steps)
    _, new = model_pair(fixes, dims)
    xb, yb = x[:dims["batch"]], y[:dims["batch"]]
    out_n = new(xb)
    F.cross_entropy(out_n, yb).backward()
    e_out = rel_error(out_n, out_r)
    gn = grads_as_original(new, dims)
    e_grad = rel_error([gn[k] for k in gr], [gr[k] for k in gr])
    new.zero_grad()
    ln, on = train(new, x, y, steps=steps, batch=dims["batch"])
    back = copy_weights(new, Model(False, dims["C"], dims["H"], dims["E"], dtype=torch.float64))
    e_steps = rel_error([torch.tensor(ln, dtype=torch.float64), on, *back.parameters()], after_r)
    ok = max(e_out, e_grad, e_steps) <= TOL
    return Agreement(name or "+".join(sorted(fixes)) or "original", e_out, e_grad, e_steps, ok, steps)


SMALL = dict(C=64, H=8, E=8, T=8, batch=16)  # the notebook's check: the CPU shape's structure, quicker


def check_stages(dims_list=None, steps: int = 3, fixes=None) -> list[Agreement]:
    """Every cumulative stage against the original, at each shape (default: SMALL and ODD)."""
    rows = []
    for dims in dims_list or [SMALL, ODD]:
        ref = _reference(dims, steps)
        for name, fx in stages(fixes)[1:]:
            rows.append(check_stage(fx, dims, steps, _ref=ref, name=f"{name} at C={dims['C']}, H={dims['H']}, "
                                    f"E={dims['E']}, T={dims['T']}, batch={dims['batch']}"))
    return rows


def agreement_report(rows: list[Agreement]) -> str:
    """Machine-independent: ✓ or ✗ per stage, and the worst error only where it fails."""
    lines = []
    for r in rows:
        if r.ok:
            lines.append(f"✓ {r.stage}: outputs, gradients and {r.n_steps} SGD steps match the original (float64)")
        else:
            lines.append(f"✗ {r.stage}: relative errors outputs {r.outputs:.1e}, gradients {r.grads:.1e}, "
                         f"after the steps {r.steps:.1e} (tolerance {TOL:.0e})")
    return "\n".join(lines)
