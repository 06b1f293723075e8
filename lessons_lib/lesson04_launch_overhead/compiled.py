"""torch.compile: the graphs Inductor gets (recording backend), one real cold compile checked and timed
against eager, and a compiled training step checked against float64."""
from __future__ import annotations

import dataclasses

import torch

from .. import compile_notice, compiling, noise, roofline, timing
from .. import device as _device
from ..lesson import Variant
from ..timing import fmt_time
from .variants import pseudo_linear
from .lessons import (
    LESSON, TRAIN_LESSON, _device_first_line, _measure, _shape, compiled_work, make_inputs, make_train_inputs,
    train_step,
)
from .evidence import peaks


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
    dev = timing.timing_device(device)
    full = LESSON.check(params, dev, torch.float32)
    inputs = make_inputs(full, dev, torch.float32)
    c = compiling.compile_cold(pseudo_linear, *inputs, dynamic=True, capture_code=True,
                               busy_s=compile_notice.BUSY_S["04 PseudoLinear"])
    out = CompiledRun(c, full)
    if not c.ok:
        return out
    try:
        odd = [{"width": 33, "batch": 5, "layers": full["layers"]}, {"width": 7, "batch": 17, "layers": full["layers"]}]
        check = dataclasses.replace(LESSON, variants=[LESSON.variant("PseudoLinear"), Variant("compiled", c.fn)])
        rows = check.check_correct([full, *odd], dev, seed=0)
        out.correct = check.correctness_report(rows)
        out.eager = _measure(pseudo_linear, *inputs, label="eager", min_run_time=min_run_time, device=dev)
        out.fused = _measure(c.fn, *inputs, label="compiled", min_run_time=min_run_time, device=dev)
        if small:
            out.small_params = LESSON.check(small, dev, torch.float32)
            s = make_inputs(out.small_params, dev, torch.float32)
            out.small = (_measure(pseudo_linear, *s, label="eager", min_run_time=min_run_time, device=dev),
                         _measure(c.fn, *s, label="compiled", min_run_time=min_run_time, device=dev))
    except Exception as err:  # a recompile that fails at another shape: say so, keep the cold time
        c.problem = f"the compiled function failed after compiling ({type(err).__name__}: {err})"
        return out
    pk = peaks(dev)
    for p in (full, out.small_params) if out.small_params else (full,):
        out.regimes[_shape(p)] = (pk.regime(LESSON.work(p)["PseudoLinear"]), pk.regime(compiled_work(p)["compiled"]))
    return out


def compiled_training_check(params: dict, device=None) -> str:
    """A compiled training step (forward and backward) against float64 at `params` and an odd shape.

    On a GPU with Inductor. On a CPU (where a notebook affords one cold Inductor compile) with
    Inductor's decompositions and partitioner but no code generation (`default_backend`): that checks
    the captured forward and backward graphs, not the generated code.
    """
    dev = timing.timing_device(device)
    backend = compiling.default_backend(dev)
    full = TRAIN_LESSON.check(params, dev, torch.float32)
    inputs = make_train_inputs(full, dev, torch.float32)
    c = compiling.compile_cold(pseudo_linear, *inputs[:4], backend=backend, dynamic=True, step=_train_call(inputs),
                               busy_s=compile_notice.BUSY_S["04 training step"] if dev.type == "cpu" else None)
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
