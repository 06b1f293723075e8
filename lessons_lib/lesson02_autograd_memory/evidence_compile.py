"""Lesson 02 under torch.compile: what the compiled posted version saves, its peaks and its time."""
from __future__ import annotations

import dataclasses

import torch
from torch.autograd.graph import saved_tensors_hooks

from .. import device as _device
from .. import compile_notice, compiling, memory, timing
from ..device import fmt_bytes
from ..lesson import Variant
from .explore import LESSON
from .variants import broadcast_matmul, make_inputs, train_step


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
    # compiling.compile_cold announces the compile first and turns a missing or failing compiler into a sentence
    cold = compiling.compile_cold(broadcast_matmul, x, W, backend=backend, step=lambda f, x, W: train_step(f, x, W, g),
                                  busy_s=compile_notice.BUSY_S["02 broadcast step"])
    if not cold.ok:
        report.problem = cold.problem
        return report
    compiled, report.compile_s = cold.fn, cold.cold_s
    odd = {"batch": 5, "groups": 3, "dim": 7}
    check = dataclasses.replace(LESSON, variants=[LESSON.variant(LESSON.baseline), Variant("torch.compile", compiled)])
    rows = check.check_correct([full, odd], dev, seed=0)
    report.correct = check.correctness_report(rows).replace(
        "match the float64 reference", "match the float64 reference (output, dx and dW)")
    report.saved_new = _new_saved_bytes(compiled, x, W)
    report.graph = memory.graph(compiled(x, W))
    if backend == "inductor":  # a stand-in backend runs eager kernels: its peaks and times are not Inductor's
        report.peaks = memory.measured_peaks(compiled, x, W, device=dev)
        report.eager_peaks = memory.measured_peaks(broadcast_matmul, x, W, device=dev)
        report.time = timing.measure(LESSON.call(compiled), x, W, g, label="compiled", min_run_time=min_run_time,
                                     device=dev)
        report.eager_time = timing.measure(LESSON.call(broadcast_matmul), x, W, g, label="eager",
                                           min_run_time=min_run_time, device=dev)
    return report

