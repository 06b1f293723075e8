"""The line printed before a cold compile: what is compiling and how long it can take on a busy machine.

`compiling.compile_cold` calls `announce` for every caller, so no lesson's compile is silent (a student's
03 §3 sat 55 s without output, then printed "took 52.2 s"). The figures are measured, not hoped: each
notebook's cold compile run as the notebook runs it, in a fresh process with an empty Inductor cache
(`TORCHINDUCTOR_CACHE_DIR`), on a 2-core CPU with two busy loops beside it (see BUSY_LOAD). The doctor quotes
the same figures.
"""
from __future__ import annotations

import threading

BUSY_LOAD = "load 10-12"  # the load the figures below were measured at (two busy loops beside the notebook)
# Seconds, measured 2026-11-28 on a 2-core CPU at BUSY_LOAD, each in a fresh process with an empty Inductor cache:
# lesson 03's compile of the loop (Inductor, batch_linear fusion: 110 and 129 s), lesson 04's compile of
# PseudoLinear (Inductor, dynamic shapes: 93 s; 62 s with the cache 03's compile left) and 04's training step
# with the CPU's stand-in backend (no code generation: 24.6 s); lesson 02's broadcast step, forward and backward
# (Inductor: 10.1 s, in the workshop kit's Run All at load 10-25). On a student's laptop at load 6-7 03's took 52 s.
BUSY_S = {"02 broadcast step": 10.0, "03 loop": 130.0, "04 PseudoLinear": 95.0, "04 training step": 25.0}
BY_BACKEND = {"inductor": max(BUSY_S["03 loop"], BUSY_S["04 PseudoLinear"]),
              "aot_eager_decomp_partition": BUSY_S["04 training step"]}


def announce(what: str, backend: str, device, busy_s: float | None = None) -> None:
    """Print one line before a cold compile of `what`. `busy_s`: this compile's measured figure (default: the
    backend's largest). Silent on an explorer's worker thread: its status line names the phase, and a print
    there would land in whichever cell runs."""
    if threading.current_thread() is not threading.main_thread():
        return
    busy = busy_s if busy_s is not None else BY_BACKEND.get(backend)
    if getattr(device, "type", device) == "cuda":
        how = "the H200 took 1-6 s for the course's compiles; a 2-core host such as Colab's takes longer"
    elif busy:
        how = (f"seconds on a quiet machine, up to about {busy:.0f} s on a busy 2-core laptop (measured at "
               f"{BUSY_LOAD}, an empty compile cache)")
    else:
        how = "seconds on a quiet machine, a minute or more on a busy one"
    print(f"Compiling {what} (torch.compile, backend {backend!r}): tracing and code generation, {how}. "
          "The time it took prints when it is done.", flush=True)


__all__ = ["announce", "BUSY_S", "BY_BACKEND", "BUSY_LOAD"]
