"""The fixes, one at a time: the cumulative stages, each checked against the original in float64.

A stage is the set of FIXES applied so far, in FIXES' order ("original" has none). Each stage's model
gets the original's weights (`copy_weights` converts the layouts), then both train side by side in
float64: the outputs, every parameter's gradient and the parameters after a few SGD steps must agree.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..grading import rel_error
from .model import FIXES, Model, copy_weights, make_data, optimizer, shape, train

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
    after = [torch.as_tensor(losses, dtype=torch.float64), outs, *(p.detach() for p in ref.parameters())]
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
    e_steps = rel_error([torch.as_tensor(ln, dtype=torch.float64), on, *back.parameters()], after_r)
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
            lines.append(f"✓ {r.stage}: outputs, gradients and {r.n_steps} SGD step{'s' * (r.n_steps != 1)} match the "
                         "original (float64)")
        else:
            lines.append(f"✗ {r.stage}: relative errors outputs {r.outputs:.1e}, gradients {r.grads:.1e}, "
                         f"after the steps {r.steps:.1e} (tolerance {TOL:.0e})")
    return "\n".join(lines)


# === measure: the waterfall ===========================================================================

class Waterfall(NamedTuple):
    names: list[str]  # the stages, in order
    cmp: object  # noise.Comparison of one call (`steps` training steps, optimizer built once) per stage
    steps: int
    peaks: dict[str, int | None]  # bytes: one batch's forward + backward, measured (allocator or profiler)
    device: str
    dims: dict | None = None  # the shape it ran at

    def per_step(self, name: str) -> float:
        return self.cmp.median(name) / self.steps

    def sentences(self) -> list[str]:
        """One sentence per fix (against the stage before) and one for the whole: decided or not. When the time
        limit left too few paired rounds, one last line says so once and gives the max_time that fits."""
        out = [f"{b}: {_versus(self.cmp.ratio(a, b), 'the stage before')}" for a, b in zip(self.names, self.names[1:])]
        out.append(f"all fixes: {_versus(self.cmp.ratio(self.names[0], self.names[-1]), 'the original')}")
        return out + ([f"Not decided on this run: {self.cmp.lacking}. {self.more_time()}"] if self.cmp.lacking else [])

    def more_time(self) -> str:
        """The waterfall call that gives the noise rule's minimum of paired rounds room at this run's pace (its
        first round, warm-up included, errs long), with a margin; "" when the rounds were enough."""
        if not self.cmp.lacking:
            return ""
        from .. import noise

        done = len(self.cmp.rounds[self.names[0]])
        pace = self.cmp.seconds / max(done, 1)
        need = 5 * math.ceil(noise.MIN_ROUNDS * pace * 1.25 / 5)
        return (f"Raise max_time to fit {noise.MIN_ROUNDS} paired rounds at this run's pace ({pace:.1f} s a round): "
                f"fall = L.waterfall(device, max_time={need})")

    def table(self):
        from ..display import html_table
        from ..device import fmt_bytes

        # both ratio columns are the Ratios the sentences quote ("all fixes" is the last row's "vs the original")
        rows = [("stage", "time per step (median)", "vs the stage before", "vs the original", "peak memory, one batch")]
        for i, n in enumerate(self.names):
            r = "" if i == 0 else _versus(self.cmp.ratio(self.names[i - 1], n), "", short=True)
            whole = "" if i == 0 else _versus(self.cmp.ratio(self.names[0], n), "", short=True)
            pk = self.peaks.get(n)
            rows.append((n, f"{self.per_step(n) * 1e3:.2f} ms", r, whole, fmt_bytes(pk) if pk is not None else "n/a"))
        calls = f"{self.steps} training step{'s' * (self.steps != 1)} a call, each optimizer built once"
        at = f", {', '.join(f'{k}={v}' for k, v in self.dims.items())}" if self.dims else ""
        return html_table(rows, caption=f"Measured here ({self.device}{at}): {calls}, paired rounds (noise.compare)")

    def plot(self):
        """Time per step and peak memory after each fix: two panels, labelled measured."""
        from .. import plots

        fig, (a, b) = plots.panels(2, size=(4.8, 3.2))
        undecided = {b_ for a_, b_ in zip(self.names, self.names[1:]) if not self.cmp.ratio(a_, b_).decided}
        label = {n: n + (" (not decided)" if n in undecided else "") for n in self.names}
        plots.quantity_bars({label[n]: self.per_step(n) * 1e3 for n in self.names},
                            "time per training step (ms, median)", f"measured on this {self.device}", ax=a)
        plots.quantity_bars({label[n]: (self.peaks.get(n) or 0) / 2**20 for n in self.names},
                            "peak memory, one batch's forward + backward (MiB)", "measured", ax=b)
        b.set_yticks(b.get_yticks(), [""] * len(self.names))
        return fig


def stage_models(device="cpu", dims: dict | None = None, fixes=None, seed=0) -> dict[str, Model]:
    """One model per stage, all with the original's weights, on `device`."""
    d = dims or shape(device)
    torch.manual_seed(seed)
    ref = Model(False, d["C"], d["H"], d["E"])
    return {name: copy_weights(ref, Model(fx, d["C"], d["H"], d["E"])).to(device) for name, fx in stages(fixes)}


def step_peak(model: Model, xb, yb) -> int | None:
    """Peak bytes of one batch's forward + backward, measured (CUDA allocator, or the CPU profiler), on the
    batch's device (passed: a closure has no tensor to read it from; on a GPU it was measured as "40 B")."""
    from ..memory_timeline import measured_peaks

    m = measured_peaks(lambda: F.cross_entropy(model(xb), yb), device=xb.device)
    peaks = [p for p in (m.forward, m.backward) if p is not None]
    return max(peaks) if peaks else None


def waterfall(device="cpu", steps: int = 2, max_time: float = 8.0, fixes=None, dims: dict | None = None) -> Waterfall:
    """Time per training step after each fix (cumulative), in paired rounds: each fix against the stage before
    it and the whole against the original decide or say 'not decided'. Steady-state steps: each stage's
    optimizer is built once and lives across the calls (its momentum buffers exist after the warm-up), and a
    call trains `steps` steps (so the original's growing cat grows). Peak memory per stage, measured."""
    from .. import noise

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r}: a call trains a whole number of steps, at least 1.")
    dev = torch.device(device)
    d = dims or shape(dev)
    models = stage_models(dev, d, fixes)
    x, y = make_data(n=steps * d["batch"], T=d["T"])
    x, y = x.to(dev), y.to(dev)
    names = list(models)
    opts = {n: optimizer(m) for n, m in models.items()}
    fns = {n: (lambda m=m, o=opts[n]: train(m, x, y, steps=steps, batch=d["batch"], opt=o)) for n, m in models.items()}
    pairs = list(zip(names, names[1:])) + [(names[0], names[-1])]
    cmp = noise.compare(fns, pairs=pairs, max_time=max_time, rounds=3, device=dev)
    xb, yb = x[:d["batch"]], y[:d["batch"]]
    peaks = {n: step_peak(m, xb, yb) for n, m in models.items()}
    return Waterfall(names, cmp, steps, peaks, "GPU" if dev.type == "cuda" else "CPU", dict(d))


def _versus(r, other: str, short: bool = False) -> str:
    """A ratio time(before) / time(after) in words, through the noise rule (too few rounds: said once, below)."""
    if r.lacking:
        return "not decided" if short else "not decided on this run (too few paired rounds: see the last line)"
    if not r.decided:
        return "not decided" if short else r.not_decided()
    if r.tie:
        return "tie" if short else f"no faster than {other} (within {5}%)"
    if r.median >= 1:
        return f"{r.median:.2f}× faster" if short else f"{r.median:.2f}× faster than {other}"
    return f"{1 / r.median:.2f}× slower" if short else f"{1 / r.median:.2f}× slower than {other}"
