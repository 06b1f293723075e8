"""What a lesson declares, and the generic machinery that checks, times and sweeps it.

A lesson module builds one `Lesson`: its shape parameters, its variants, how to make
inputs, a float64 reference and a memory estimate. Everything else (validation, the
correctness check, timing against the floor, sweeps with a progress bar, and the
explorer widget in `widgets.py`) is written once, here and in the toolkit.

The pieces a Lesson is built from (Param, Variant, Check, Stopped, check_device, check_dtype) live in
lesson_parts.py, and what its runs return (Run, Sweep, Calibration, harness_seconds) in runs.py;
both are re-exported here, so `from lessons_lib.lesson import Run` keeps working. The explorer's
run-time estimate (estimate_seconds, calibration_shapes, calibrate, predict) is the mixin
`Calibrating` in calibration.py, which `Lesson` inherits.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import results, roofline, timing
from .calibration import Calibrating
from .device import DoesNotFit, check_fits, dtype_problem, fmt_bytes, oom_guard, pick  # noqa: F401
from .display import count, text_table
from .grading import rel_error
from .lesson_parts import (DTYPES, _RTOL, Check, Param, Stopped, Variant, _as64, _check_positive,  # noqa: F401
                           _flat, _fmt_params, _fresh, _max_time_kw, _progress, _stopping, _tf32_allowed, check_device,
                           check_dtype, may_use_tf32)
from .runs import (_BLOCK_NOISE, _TIMER_OVERHEAD, CALIBRATION_CALL, CALIBRATION_CALLS,  # noqa: F401
                   CALIBRATION_FLOOR, Calibration, Run, Sweep, _schedule, crossover, harness_seconds,
                   metrics_table, timer_overhead)
from .trace import OpTrace, on_meta, tf32_enabled, trace_ops


@dataclass
class Lesson(Calibrating):
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
    # Where this lesson's thread figures are stored, when another lesson holds them (two lessons from
    # one thread): the explorer also lists that key's *reported* records.
    reported_from: str | None = None
    # model_work(params, dtype) -> {variant: Work}: GPU-only variants for model files (a graph replay,
    # say), whose work the op trace of a CPU variant does not show. `record --model` adds them.
    model_work: Callable[[dict, torch.dtype], dict] | None = None
    _work_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        # the variants' declared order, for figures made from recorded files alone (JSON sorts their keys)
        results.declare_order(self.key, [v.name for v in self.variants])

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
    def check(self, params: dict, device: torch.device | str | None, dtype, memory: bool = True) -> dict:
        """Validate a full parameter set, device and dtype before anything is allocated; return
        the parameters complete. Every public entry point (run, sweep, work, traces) calls it;
        `memory=False` skips the does-it-fit test (meta traces allocate nothing)."""
        dev = check_device(device)
        dtype = check_dtype(dtype)
        if not isinstance(params, dict):
            raise ValueError(f"Parameters must be a dict like {self.defaults('cpu')}, got {params!r}.")
        unknown = set(params) - {p.name for p in self.params}
        if unknown:
            raise ValueError(f"Unknown parameter(s) {sorted(unknown)}; this lesson has {[p.name for p in self.params]}.")
        full = {**self.defaults(dev), **params}
        for p in self.params:
            v = full[p.name]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{p.label} ({p.name}) must be a whole number, got {v!r}.")
            if not p.lo <= v <= p.hi:
                raise ValueError(f"{p.label} ({p.name}) must be between {p.lo} and {p.hi}, got {v}.")
        if self.validate:
            self.validate(full)
        problem = dtype_problem(dtype, dev)
        if problem:
            raise ValueError(problem)
        if memory:
            check_fits(self.peak_bytes(full, dtype), dev, what=f"{self.title} at {_fmt_params(full)}")
        return full

    def variant_names(self, variants=None) -> list[str]:
        """Validated variant names: None means all; one name may be passed as a string."""
        if variants is None:
            return [v.name for v in self.variants]
        if isinstance(variants, str):
            variants = [variants]
        names = list(variants)
        if not names:
            raise ValueError(f"Choose at least one variant of {[v.name for v in self.variants]}.")
        for n in names:
            self.variant(n)  # raises with the valid names
        return names

    # --- correctness --------------------------------------------------------------------
    def check_correct(self, shapes: list[dict] | None = None, device="cpu", dtype=torch.float32,
                      seed=None) -> list[Check]:
        """Every variant against the float64 reference, on fresh random inputs at each shape.

        The reference is the baseline variant run in float64 on its own copy of the inputs, and
        every variant gets a fresh copy too, so a variant that writes into its inputs cannot
        change what the next one sees. With a `step`, every tensor the step returns (an output
        and gradients, say) is compared, and the worst counts. NaN or inf anywhere fails.
        """
        dev = check_device(device)
        dtype = check_dtype(dtype)
        shapes = shapes or [self.defaults(dev), *self.odd_shapes]
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        rows = []
        for shape in shapes:
            full = self.check(shape, dev, dtype)
            if gen is not None:
                torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
            inputs = self.make_inputs(full, dev, dtype)
            ref = _flat(self.call(self.variant(self.baseline).fn)(*(_as64(t) for t in inputs)))
            for v in self.variants:
                fn = self.call(v.fn)
                out = _flat(fn(*_fresh(inputs)))
                err = rel_error(out, ref)
                tol = self.tolerance(full, dtype, dev, tf32=may_use_tf32(fn, inputs, dev, dtype))
                rows.append(Check(v.name, full, err, tol, err <= tol))
        return rows

    def tolerance(self, params: dict, dtype: torch.dtype, device=None, tf32: bool | None = None) -> float:
        """Relative tolerance against float64, scaled by sqrt(reduction length). float32 work may run in
        TF32 on a GPU (10-bit mantissa): then fp16's bound holds. tf32: whether this call may (check_correct
        decides it per variant and backend, `may_use_tf32`); None: where float32 matmuls may (cuBLAS's flag)."""
        dt = dtype
        on_gpu = torch.device(device or "cpu").type == "cuda"
        if dtype == torch.float32 and on_gpu and (_tf32_allowed() if tf32 is None else tf32):
            dt = torch.float16
        return _RTOL.get(dt, 1e-2) * max(self.reduction(params), 1) ** 0.5 * 4

    def correctness_report(self, rows: list[Check]) -> str:
        """A verdict that does not depend on the machine (nbval compares it)."""
        bad = [r for r in rows if not r.ok]
        shapes = len({tuple(sorted(r.params.items())) for r in rows})
        names = sorted({r.variant for r in rows})
        if not bad:
            which = "the variant matches" if len(names) == 1 else f"all {len(names)} variants match"
            return f"✓ {which} the float64 reference at {count(shapes, 'shape')}: {', '.join(names)}"
        lines = [f"✗ {count(len(bad), 'mismatch')}:"]
        lines += [f"  {r.variant} at {_fmt_params(r.params)}: relative error {r.error:.2e} > {r.tol:.1e}"
                  + (" (NaN, inf or a wrong shape)" if math.isinf(r.error) else "") for r in bad]
        return "\n".join(lines)

    # --- work and timing ----------------------------------------------------------------
    def work(self, params: dict, dtype: torch.dtype = torch.float32) -> dict[str, roofline.Work]:
        """FLOPs, bytes and launches of each variant, from op traces on `meta` (no allocation).
        Cached per shape, dtype, variant functions and TF32 flags (the trace marks TF32 work): estimate, run and
        floors share one trace."""
        dtype = check_dtype(dtype)
        key = (tuple(sorted(params.items())), dtype, tuple((v.name, id(v.fn)) for v in self.variants),
               tf32_enabled("matmul"), tf32_enabled("conv"))
        if key not in self._work_cache:
            if len(self._work_cache) > 256:
                self._work_cache.clear()
            self._work_cache[key] = {n: roofline.Work.from_trace(t) for n, t in self.traces(params, dtype).items()}
        return dict(self._work_cache[key])

    def traces(self, params: dict, dtype: torch.dtype = torch.float32) -> dict[str, "OpTrace"]:
        """Each variant's op trace at `params`, on `meta`: any shape, nothing allocated."""
        dtype = check_dtype(dtype)
        full = self.check(params, "cpu", dtype, memory=False)
        inputs = on_meta(*self.make_inputs(full, torch.device("meta"), dtype))
        return {v.name: trace_ops(self.call(v.fn), *inputs) for v in self.variants}

    def work_table(self, params: dict, dtype: torch.dtype = torch.float32) -> str:
        """Per variant: launches, GEMMs, copies, new memory, bytes the ops touch and FLOPs (from traces).

        Dispatch-level counts: what the ops ask for, not DRAM traffic (copies inside a kernel,
        such as cuBLAS workspaces, are not seen; data that stays in cache is still counted)."""
        rows = [("variant", "launches", "GEMMs", "copied", "new allocation", "bytes touched", "GFLOP")]
        for name, t in self.traces(params, dtype).items():
            gemm_batches = "+".join(str(op.gemm[0]) for op in t.gemms[:1]) if t.gemms else "-"
            gemms = f"{len(t.gemms)} (batch {gemm_batches})" if t.gemms else "0"
            rows.append((name, str(len(t.compute_ops)), gemms, fmt_bytes(t.copied_bytes),
                         fmt_bytes(t.alloc_bytes), fmt_bytes(t.moved_bytes), f"{t.flops / 1e9:.2f}"))
        return text_table(rows, numbers=True)

    def run(self, params: dict, device=None, dtype=torch.float32, variants=None, min_run_time=0.2,
            stop: Callable[[], bool] | None = None, max_time: float | None = None,
            block: float | None = None, on_phase: Callable[[str], None] | None = None) -> "Run":
        """Time each variant at one shape with the harness; refuses shapes that don't fit.

        stop: checked before each variant and each timed call; when it returns True, `Stopped` is raised.
        max_time: an upper bound on each variant's measurement (seconds).
        block: seconds per sample on a CPU (`timing.measure(block=...)`: short blocks for ranking on a
            busy machine).
        on_phase(text): told what runs next ("making the inputs", "preparing X", "measuring X (2 of 6)")."""
        dev = check_device(device)
        dtype = check_dtype(dtype)
        min_run_time = _check_positive(min_run_time, "min_run_time")
        full = self.check(params, dev, dtype)
        names = self.variant_names(variants)
        with oom_guard(dev, what=f"{self.title} at {_fmt_params(full)}"):
            timings, metrics, prepared = self._time_variants(full, dev, dtype, names, min_run_time, stop, max_time,
                                                             block, on_phase or (lambda _text: None))
        return Run(self.key, full, str(dtype).replace("torch.", ""), dev.type, timings, self.work(full, dtype),
                   metrics, prepared)

    def _time_variants(self, full, dev, dtype, names, min_run_time, stop, max_time, block=None,
                       on_phase=lambda _text: None):
        """The allocating part of `run`, in its own frame: after an OOM, `oom_guard` clears this
        frame, so the inputs and every intermediate are really freed."""
        timings, metrics, prepared = {}, {}, {}
        on_phase("making the inputs")
        inputs = self.make_inputs(full, dev, dtype)
        for k, name in enumerate(names, 1):
            if stop is not None and stop():
                raise Stopped(f"stopped before {name!r}")
            v = self.variant(name)
            fn = v.fn
            if v.prepare is not None:  # compile / capture outside the clock; its cost is reported
                on_phase(f"preparing {name} (tuning or compiling: not in its bar)")
                t0 = time.perf_counter()
                fn = v.prepare(v.fn, *inputs)
                prepared[name] = time.perf_counter() - t0
            on_phase(f"measuring {name} ({k} of {len(names)})")
            timings[name] = timing.measure(_stopping(self.call(fn), stop, name), *inputs, label=name,
                                           min_run_time=min_run_time,
                                           **_max_time_kw(max_time), **({"block": block} if block else {}))
            if self.metrics is not None:
                on_phase(f"{name}: its metrics (what the lesson measures besides time)")
                metrics[name] = dict(self.metrics(fn, *inputs))
        return timings, metrics, prepared

    def sweep(self, param: str, values: list[int], base: dict | None = None, device=None, dtype=torch.float32,
              variants=None, min_run_time=0.1, progress=True, on_step=None,
              stop: Callable[[], bool] | None = None, max_time: float | None = None,
              keep_partial: bool = False, on_phase: Callable[[str], None] | None = None) -> "Sweep":
        """Run at each value of one parameter. Every shape is checked before the first runs.
        keep_partial: when `stop` ends it, return the points finished so far (`Sweep.stopped`)
        instead of raising `Stopped` (which it still does when no point finished).
        on_phase(text): told what runs next, with the point ("point 2 of 5, batch=64: measuring X (1 of 6)")."""
        dev = check_device(device)
        dtype = check_dtype(dtype)
        self.param(param)
        min_run_time = _check_positive(min_run_time, "min_run_time")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise ValueError(f"Sweep values must be a list of whole numbers, got {values!r}.")
        values = list(values)
        if not values:
            raise ValueError(f"Give at least one value of {param!r} to sweep over.")
        names = self.variant_names(variants)
        base = {**self.defaults(dev), **(base or {})}
        shapes = [self.check({**base, param: v}, dev, dtype) for v in values]
        bar = _progress(len(shapes), f"sweeping {param}") if progress else None
        runs = []
        try:
            for i, shape in enumerate(shapes):
                where = f"point {i + 1} of {len(shapes)}, {param}={shape[param]}: "
                tell = (lambda text, where=where: on_phase(where + text)) if on_phase else None
                try:
                    runs.append(self.run(shape, dev, dtype, names, min_run_time, stop=stop, max_time=max_time,
                                         on_phase=tell))
                except Stopped:
                    if not (keep_partial and runs):
                        raise
                    return Sweep(self.key, param, values[:len(runs)], runs, stopped=True, planned=values)
                if bar is not None:
                    bar.update(1)
                if on_step:
                    on_step(i + 1, len(shapes))
        finally:
            if bar is not None:
                bar.close()
        return Sweep(self.key, param, values, runs)

__all__ = ["Param", "Variant", "Lesson", "Run", "Sweep", "Check", "Stopped", "Calibration", "harness_seconds",
           "timer_overhead", "crossover", "metrics_table", "DTYPES", "DoesNotFit", "check_device", "check_dtype",
           "fmt_bytes"]
