"""`lessons_lib.diagnose(step, *inputs, device=None, gpu="T4")`: the course's tools, joined, pointed at your step.

It copies your step and everything it reaches (lessons_lib.reach: arguments, closures, globals, a partial's
arguments, a method's object, and the modules, optimizers, schedulers, scalers and iterators in them), and runs
the copy once in the sandbox (lessons_lib.sandbox: nothing written to disk, the random state kept, a budget of
ops and seconds): on `meta` by default (nothing runs for real, nothing is allocated: a model too big for this
machine gets its report in seconds), for real on copies when asked (device="cpu" or "cuda"). Watched by the op
trace (each op with your line of code), the saved-tensor watch, the sync detector's CUDA view and hooks on
backward and the optimizer, it returns a Report of every pitfall the course teaches that the evidence shows:
each with your line, the evidence in numbers, its cost on the named GPU (a roofline model: datasheet peaks and
assumed launch costs, labelled so), the lesson and section that explain it, and the fix. Its first line says
what ran for real; a step that did not run (or not to the end) gets no verdict, and an error your step raises
itself comes back to you with your traceback. It times nothing unless asked (timed=True: fresh copies, never on
meta). `lessons_lib.diagnose` is this package, and it is callable: `lessons_lib.diagnose(step, x)` is
`lessons_lib.diagnose.diagnose(step, x)`.

Which file holds what:
    inputs.py           the call: a callable and its inputs, or a module and a batch (forward, backward of a
                        scalar); the copies it runs on (lessons_lib.reach), on meta or for real; the device, never
                        guessed (whether the call fits the step at all: lessons_lib.step_call)
    collect.py          the one run, watched: each op's evidence; what a step is (one optimizer step)
    fused.py            what CUDA runs fused, as foreach or compiled (cuDNN RNNs, LSTM cells, clipping, torch.compile)
    amp.py              autocast on meta, modelled as CUDA applies it (its op lists)
    host_data.py        tensors made from Python data on the device; host reads that are no GPU sync
    kept.py             graphs kept alive: after the call, and in a list at a later step of the call
    outcome.py          how the run ended: ran, stopped (the sandbox's budget, a limit of meta) or not run, each in
                        one sentence; the step's own error raised again with its traceback; timed=True on copies
    saved.py            what each graph keeps for backward, read as its backward starts (the ledger's rows)
    costs.py            the GPU model: datasheet peaks, launch_queue's schedule, the kernels CUDA would launch
    detect_copies.py    01 broadcast matmul, a contraction by broadcast; 02 expanded copies and attention
                        probabilities kept for backward
    detect_gemms.py     03 small GEMMs of one shape in a Python loop (routed experts: a grouped GEMM)
    detect_launches.py  04 elementwise chains, a launch-bound step (05: would a CUDA graph help), a for-loop
                        optimizer; 06 a batch gathered row by row, a loss per time step
    detect_syncs.py     06 host syncs, pageable transfers, cat in a loop, allocation churn
    detect_graphs.py    05 capture hazards (graphs=True), 06 §5 a graph built for nothing, 07 a graph kept alive
    run.py              diagnose(): the run, each detector, the step in numbers, what it cannot see
    report.py           Finding and Report (text: what ran and the verdict first, then the findings; an HTML
                        table in Jupyter)
    __main__.py         python -m lessons_lib.diagnose file.py:callable (exit 0 clean, 1 pitfalls, 2 not run)
"""
from __future__ import annotations

import sys
import types

from .report import KINDS, Finding, Report, a_gpu  # noqa: F401
from .run import BLIND_SPOTS, CHECKED, diagnose  # noqa: F401


class _CallableModule(types.ModuleType):
    """`lessons_lib.diagnose(...)` calls `diagnose`; the package stays a package (python -m, its modules)."""

    def __call__(self, fn, *inputs, **kwargs) -> Report:
        return diagnose(fn, *inputs, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
