"""The line printed before a cold compile: what is compiling and how long it can take on a busy machine.

`compiling.compile_cold` calls `announce` for every caller, so no lesson's compile is silent (a student's
03 §3 sat 55 s without output, then printed "took 52.2 s"). The figures are measured, not hoped: each
notebook's cold compile run as the notebook runs it, in a fresh kernel with an empty Inductor cache
(`TORCHINDUCTOR_CACHE_DIR`), on a 2-core CPU with two busy loops beside it (see BUSY_LOAD), beside the one
figure a student reported from a busier laptop. The doctor quotes the same figures.
"""
from __future__ import annotations

import threading

BUSY_LOAD = "two busy loops beside it, load 2.5-2.9"  # where the figures below were measured
# Seconds, measured 2026-11-28 by workshop/run_all_times.py (each notebook's Run All in a fresh kernel with an empty
# Inductor cache) on the course's 2-core AMD EPYC VM at BUSY_LOAD: lesson 02's broadcast step with the CPU's
# stand-in backend (1.8 s), 03's compile of the loop (Inductor: 9.6 s), 04's PseudoLinear (Inductor: 7.9 s) and
# 04's training step (stand-in backend: its whole cell 0.8 s).
BUSY_S = {"02 broadcast step": 1.8, "03 loop": 9.6, "04 PseudoLinear": 7.9, "04 training step": 0.8}
BY_BACKEND = {"inductor": max(BUSY_S["03 loop"], BUSY_S["04 PseudoLinear"]),
              "aot_eager_decomp_partition": max(BUSY_S["02 broadcast step"], BUSY_S["04 training step"])}
# Reported (issue 34): a student's laptop at load 6-7 took 52.2 s for 03's compile, 5.4x the 9.6 s above. A busier
# machine than ours can take that many times longer, and the line says so.
LAPTOP = (52.2, "load 6-7")
LAPTOP_FACTOR = LAPTOP[0] / BUSY_S["03 loop"]


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
        how = (f"about {busy:.0f} s on a 2-core machine with {BUSY_LOAD} (measured, an empty compile cache), "
               f"up to {LAPTOP_FACTOR:.0f}× that on a busier laptop (a student's at {LAPTOP[1]}, reported)")
    else:
        how = "seconds on a quiet machine, a minute or more on a busy one"
    print(f"Compiling {what} (torch.compile, backend {backend!r}): tracing and code generation, {how}. "
          "The time it took prints when it is done.", flush=True)


__all__ = ["announce", "BUSY_S", "BY_BACKEND", "BUSY_LOAD", "LAPTOP", "LAPTOP_FACTOR"]
