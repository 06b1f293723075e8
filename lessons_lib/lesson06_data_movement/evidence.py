"""Lesson 06's evidence, shared part: the seed's claims with our verdicts (the summary table), and the
bounded timing every experiment uses. The experiments themselves, one file per claim:

- evidence_transfers.py  1 · keep data on the GPU: host syncs, copies, seed example 1's model and timings
- evidence_loops.py      2 · Python loops vs vector ops: seed example 2, its extrapolation, expand vs repeat
- evidence_cat.py        3 · torch.cat in a loop: bytes predicted and traced, the paired-rounds verdict
- evidence_inplace.py    4 · in-place ops: traces, timings, the cause, autograd's refusals, aliasing
- evidence_grad.py       5 · no_grad and inference_mode: saved bytes, timings, verdict
- evidence_layout.py     6 · channels_last vs NCHW: strides, timings, verdict
"""
from __future__ import annotations

from .. import timing
from ..display import html_table


# === helpers ======================================================================================


def _measure(fn, *args, label: str, device, min_run_time: float = 0.1, max_time: float = 3.0) -> timing.Timing:
    """The harness with an upper bound on the whole measurement (a demo never runs away), on the device the
    public function resolved: never read from the arguments (the posted transfer loop's first is a CPU tensor)."""
    return timing.measure(fn, *args, label=label, min_run_time=min_run_time, max_time=max_time, device=device)


def _whole(value, name: str, lo: int = 1, hi: int = 1 << 40) -> int:
    """A count or size entering a public function: a whole number in range, or one sentence (ValueError)."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be a whole number from {lo:,} to {hi:,}, got {value!r}.")
    return value


def _shape(size, name: str = "size") -> tuple[int, ...]:
    """A tensor shape entering a public function: a tuple of whole numbers >= 1, or one sentence."""
    if not isinstance(size, (tuple, list)) or not size or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in size):
        raise ValueError(f"{name} must be a tuple of whole numbers >= 1, such as (64, 32), got {size!r}.")
    return tuple(size)


def _course_device(device):
    """Where a timing runs: 'cpu' or 'cuda' (`timing.timing_device`: meta, mps, a missing GPU refused)."""
    return timing.timing_device(device)


# === summary ======================================================================================

CLAIMS = [
    ("Keep data on the GPU; transfers add latency", "holds",
     "copy once, keep it there; every blocking copy is also a host sync"),
    ("Replace Python loops with vector ops and broadcasting", "holds (its example 2 does not run)",
     "one op per array, not per element; broadcast with views (expand), not copies (repeat)"),
    ("Channel-first layouts help convolution-heavy code", "does not hold as stated",
     "on GPUs tensor cores want channels_last (NHWC); measure on yours"),
    ("cat in a loop reallocates: pre-allocate with empty and fill", "holds with a condition",
     "collect the pieces, then one torch.cat; pre-allocate only when pieces arrive one by one"),
    ("In-place ops avoid copies", "half right",
     "the op reads and writes the same bytes; in place saves the allocation and the traffic of a separate output "
     "(measured in section 4); autograd may refuse them; they can change the caller's data"),
    ("no_grad decreases time and memory", "holds for memory; time: depends on op size",
     "use inference_mode for inference: no saved tensors, less bookkeeping"),
    ("torch.matmul beats loops; bmm is better still for batches", "holds, with an exception",
     "one matmul for the whole batch; but a broadcast matmul can lose to a loop of mm"),
]


# Claims another lesson tests: their evidence is a pointer, not a figure from this notebook.
TESTED_ELSEWHERE = {CLAIMS[6][0]: "lesson 01 (broadcast matmul slower than a loop; einsum and bmm fast)"}


def summary_table(evidence: dict[str, str] | None = None):
    """The seed's claims, our verdicts, and (from the notebook's own cells) the evidence beside each: an HTML
    table in a notebook (it wraps cell by cell at JupyterLab's default width), fixed-width text when printed."""
    evidence = evidence or {}
    rows = [("claim (seed 001)", "verdict", "corrected rule", "evidence here")]
    for claim, verdict, rule in CLAIMS:
        rows.append((claim, verdict, rule, evidence.get(claim, TESTED_ELSEWHERE.get(claim, "-"))))
    return html_table(rows)
