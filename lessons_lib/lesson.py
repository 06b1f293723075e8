"""What a lesson declares, and the generic machinery that checks, times and sweeps it.

A lesson module builds one `Lesson`: its shape parameters, its variants, how to make
inputs, a float64 reference and a memory estimate. Everything else (validation, the
correctness check, timing against the floor, sweeps with a progress bar, and the
explorer widget in `widgets.py`) is written once, here and in the toolkit.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import roofline, timing
from .display import text_table
from .device import DoesNotFit, check_fits, dtype_problem, fmt_bytes, oom_guard, pick
from .trace import OpTrace, on_meta, trace_ops

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Relative tolerance against the float64 reference, scaled by sqrt(reduction length).
_RTOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@dataclass
class Param:
    name: str
    label: str
    cpu: int  # default on a CPU: small enough to time in about a second
    gpu: int  # default on a GPU: the forum thread's shape
    lo: int
    hi: int

    def default(self, device: torch.device) -> int:
        return self.gpu if device.type == "cuda" else self.cpu


@dataclass
class Variant:
    name: str
    fn: Callable[..., torch.Tensor]
    note: str = ""

    def source(self) -> str:
        return inspect.getsource(self.fn)


@dataclass
class Lesson:
    key: str  # e.g. "01_broadcast_matmul"; the key in recorded results
    title: str
    params: list[Param]
    variants: list[Variant]
    make_inputs: Callable[[dict, torch.device, torch.dtype], tuple]
    peak_bytes: Callable[[dict, torch.dtype], int]  # worst variant's estimated peak memory
    reduction: Callable[[dict], int]  # length of the summed dimension, for the tolerance
    baseline: str  # the variant a reader starts from
    validate: Callable[[dict], None] | None = None  # domain checks beyond ranges
    compare: tuple[str, str] | None = None  # the pair whose crossover a sweep marks
    odd_shapes: list[dict] = field(default_factory=list)  # extra shapes the checks cover
    # What one call of a variant is: step(fn, *inputs) -> a tensor or a tuple of tensors. Default
    # fn(*inputs). A training lesson passes forward + backward here; timing, traces and the
    # correctness check all go through it, and check_correct compares every tensor it returns.
    step: Callable[..., object] | None = None
    # Optional numbers beyond time, per variant: metrics(fn, *inputs) -> {"name (unit)": value}.
    # Lesson.run records them on the run's inputs; the explorer tabulates and plots them.
    metrics: Callable[..., dict[str, float]] | None = None

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ValueError(f"No variant {name!r}; choose one of {[v.name for v in self.variants]}.")

    def call(self, fn: Callable) -> Callable:
        """`fn` as one call of this lesson: `step(fn, *inputs)`, or `fn` itself without a step."""
        if self.step is None:
            return fn
        step = self.step

        def one_step(*inputs):
            return step(fn, *inputs)

        one_step.__name__ = getattr(fn, "__name__", "step")
        return one_step

    def defaults(self, device: torch.device | str | None = None) -> dict:
        dev = pick(device)
        return {p.name: p.default(dev) for p in self.params}

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise ValueError(f"{self.title} has no parameter {name!r}; it has {[p.name for p in self.params]}.")

    # --- checks at the door -------------------------------------------------------------
    def check(self, params: dict, device: torch.device | str, dtype: torch.dtype) -> dict:
        """Validate a full parameter set before anything is allocated; return it complete."""
        dev = torch.device(device)
        full = {**self.defaults(dev), **params}
        for p in self.params:
            v = full[p.name]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{p.label} must be a whole number, got {v!r}.")
            if not p.lo <= v <= p.hi:
                raise ValueError(f"{p.label} must be between {p.lo} and {p.hi}, got {v}.")
        unknown = set(full) - {p.name for p in self.params}
        if unknown:
            raise ValueError(f"Unknown parameter(s) {sorted(unknown)}; this lesson has {[p.name for p in self.params]}.")
        if self.validate:
            self.validate(full)
        problem = dtype_problem(dtype, dev)
        if problem:
            raise ValueError(problem)
        check_fits(self.peak_bytes(full, dtype), dev, what=f"{self.title} at {_fmt_params(full)}")
        return full

    # --- correctness --------------------------------------------------------------------
    def check_correct(self, shapes: list[dict] | None = None, device="cpu", dtype=torch.float32, seed=None) -> list[tuple]:
        """Every variant against the float64 reference, on fresh random inputs at each shape.

        The reference is the baseline variant run in float64. With a `step`, every tensor the
        step returns (an output and gradients, say) is compared, and the worst counts. Returns
        rows (variant, shape, relative error, tolerance, ok).
        """
        dev = torch.device(device)
        shapes = shapes or [self.defaults(dev), *self.odd_shapes]
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        rows = []
        for shape in shapes:
            full = self.check(shape, dev, dtype)
            if gen is not None:
                torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
            inputs = self.make_inputs(full, dev, dtype)
            ref = _flat(self.call(self.variant(self.baseline).fn)(*(_as64(t) for t in inputs)))
            tol = _RTOL.get(dtype, 1e-2) * max(self.reduction(full), 1) ** 0.5 * 4
            for v in self.variants:
                out = _flat(self.call(v.fn)(*inputs))
                err = _rel_error(out, ref)
                rows.append((v.name, full, err, tol, err <= tol))
        return rows

    def correctness_report(self, rows: list[tuple]) -> str:
        """A verdict that does not depend on the machine (nbval compares it)."""
        bad = [r for r in rows if not r[4]]
        shapes = len({tuple(sorted(r[1].items())) for r in rows})
        names = sorted({r[0] for r in rows})
        if not bad:
            return f"✓ all {len(names)} variants match the float64 reference at {shapes} shapes: {', '.join(names)}"
        lines = [f"✗ {len(bad)} mismatches:"]
        lines += [f"  {n} at {_fmt_params(s)}: relative error {e:.2e} > {t:.1e}" for n, s, e, t, _ in bad]
        return "\n".join(lines)

    # --- work and timing ----------------------------------------------------------------
    def work(self, params: dict, dtype: torch.dtype = torch.float32) -> dict[str, roofline.Work]:
        """FLOPs, bytes and launches of each variant, from op traces on `meta` (no allocation)."""
        return {n: roofline.Work.from_trace(t) for n, t in self.traces(params, dtype).items()}

    def traces(self, params: dict, dtype: torch.dtype = torch.float32) -> dict[str, "OpTrace"]:
        """Each variant's op trace at `params`, on `meta`: any shape, nothing allocated."""
        full = {**self.defaults("cpu"), **params}
        inputs = on_meta(*self.make_inputs(full, torch.device("meta"), dtype))
        return {v.name: trace_ops(self.call(v.fn), *inputs) for v in self.variants}

    def work_table(self, params: dict, dtype: torch.dtype = torch.float32) -> str:
        """Per variant: launches, GEMMs, copies, new memory, bytes moved and FLOPs (from traces)."""
        rows = [("variant", "launches", "GEMMs", "copies", "new memory", "bytes moved", "GFLOP")]
        for name, t in self.traces(params, dtype).items():
            gemm_batches = "+".join(str(op.gemm[0]) for op in t.gemms[:1]) if t.gemms else "-"
            gemms = f"{len(t.gemms)} (batch {gemm_batches})" if t.gemms else "0"
            rows.append((name, str(len(t.compute_ops)), gemms, fmt_bytes(sum(op.alloc_bytes for op in t.copies)),
                         fmt_bytes(t.alloc_bytes), fmt_bytes(t.moved_bytes), f"{t.flops / 1e9:.2f}"))
        return text_table(rows, numbers=True)

    def run(self, params: dict, device=None, dtype=torch.float32, variants=None, min_run_time=0.2) -> "Run":
        """Time each variant at one shape with the harness; refuses shapes that don't fit."""
        dev = pick(device)
        full = self.check(params, dev, dtype)
        names = variants or [v.name for v in self.variants]
        timings, metrics = {}, {}
        with oom_guard(dev, what=f"{self.title} at {_fmt_params(full)}"):
            inputs = self.make_inputs(full, dev, dtype)
            for name in names:
                fn = self.variant(name).fn
                timings[name] = timing.measure(self.call(fn), *inputs, label=name, min_run_time=min_run_time)
                if self.metrics is not None:
                    metrics[name] = dict(self.metrics(fn, *inputs))
            del inputs
        return Run(self.key, full, str(dtype).replace("torch.", ""), dev.type, timings, self.work(full, dtype),
                   metrics)

    def sweep(self, param: str, values: list[int], base: dict | None = None, device=None, dtype=torch.float32,
              variants=None, min_run_time=0.1, progress=True, on_step=None) -> "Sweep":
        """Run at each value of one parameter. Every shape is checked before the first runs."""
        dev = pick(device)
        self.param(param)
        base = {**self.defaults(dev), **(base or {})}
        shapes = [self.check({**base, param: v}, dev, dtype) for v in values]
        bar = _progress(len(shapes), f"sweeping {param}") if progress else None
        runs = []
        for i, shape in enumerate(shapes):
            runs.append(self.run(shape, dev, dtype, variants, min_run_time))
            if bar is not None:
                bar.update(1)
            if on_step:
                on_step(i + 1, len(shapes))
        if bar is not None:
            bar.close()
        return Sweep(self.key, param, list(values), runs)


@dataclass
class Run:
    lesson: str
    params: dict
    dtype: str
    device: str
    timings: dict[str, timing.Timing]
    work: dict[str, roofline.Work]
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # variant -> {"name (unit)": value}

    def table(self, baseline: str | None = None) -> str:
        return timing.table(list(self.timings.values()), baseline)

    def metrics_table(self) -> str:
        """The lesson's metrics (if it declares any), one variant a line; "" when there are none."""
        return metrics_table(self.metrics)

    def floors(self, peaks: roofline.Peaks) -> dict[str, float]:
        return {n: peaks.floor(self.work[n]) for n in self.timings}


@dataclass
class Sweep:
    lesson: str
    param: str
    values: list[int]
    runs: list[Run]

    def medians(self) -> dict[str, list[float]]:
        names = self.runs[0].timings.keys()
        return {n: [r.timings[n].median for r in self.runs] for n in names}

    def iqrs(self) -> dict[str, list[float]]:
        names = self.runs[0].timings.keys()
        return {n: [r.timings[n].iqr for r in self.runs] for n in names}

    def metric_series(self) -> dict[str, dict[str, list[float]]]:
        """{metric: {variant: one value per swept value}}; empty when the lesson has no metrics."""
        first = self.runs[0].metrics
        names = list(dict.fromkeys(m for per in first.values() for m in per))
        return {m: {v: [r.metrics[v][m] for r in self.runs] for v in first} for m in names}


def metrics_table(metrics: dict[str, dict[str, float]]) -> str:
    """{variant: {metric: value}} as a fixed-width table (values to 3 significant figures)."""
    if not metrics:
        return ""
    names = list(dict.fromkeys(m for per in metrics.values() for m in per))
    rows = [("variant", *names)]
    rows += [(v, *(f"{per[m]:.3g}" if m in per else "-" for m in names)) for v, per in metrics.items()]
    return text_table(rows, numbers=True)


def crossover(values: list[int], a: list[float], b: list[float]) -> int | None:
    """The first value at which series `a` stops being slower than `b` (or vice versa)."""
    for i in range(1, len(values)):
        if (a[i - 1] > b[i - 1]) != (a[i] > b[i]):
            return values[i]
    return None


def _flat(result) -> list[torch.Tensor]:
    return [t for t in (result if isinstance(result, (tuple, list)) else (result,)) if isinstance(t, torch.Tensor)]


def _rel_error(outs: list[torch.Tensor], refs: list[torch.Tensor]) -> float:
    """The worst relative error over paired tensors (inf if their number or shapes differ)."""
    if len(outs) != len(refs):
        return float("inf")
    err = 0.0
    for out, ref in zip(outs, refs):
        if out.shape != ref.shape:  # broadcasting would hide a wrong shape
            return float("inf")
        if ref.numel():
            err = max(err, ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item())
    return err


def _as64(t):
    return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def _fmt_params(p: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items())


def _progress(total: int, desc: str):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, leave=False)


__all__ = ["Param", "Variant", "Lesson", "Run", "Sweep", "crossover", "metrics_table", "DTYPES", "DoesNotFit",
           "fmt_bytes"]
