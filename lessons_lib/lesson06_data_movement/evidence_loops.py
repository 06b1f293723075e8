"""Lesson 06, claim 2 (replace Python loops with vector ops and broadcasting): seed example 2's
per-element loop (its float64 reference, the error its 'efficient' version raises, its ops per element,
its run time extrapolated from a few hundred elements), and expand vs repeat."""
from __future__ import annotations

import dataclasses

import torch

from .. import timing
from .. import device as _device
from ..display import text_table
from ..timing import fmt_time
from ..trace import trace_ops
from .evidence import _measure
from .variants import SEED_EXAMPLE2, posted_broadcast, posted_elementwise


def elementwise_reference(a, b):
    idx = torch.arange(a.shape[1]) % b.shape[0]
    return a.double().cpu() + b.double().cpu()[idx]


def broadcast_error(a, b) -> str:
    """The error the seed's 'efficient' version raises (its first line)."""
    try:
        posted_broadcast(a, b)
    except RuntimeError as err:
        return str(err).splitlines()[0]
    return ""


def ops_per_element() -> list[str]:
    """The aten ops one pass of the per-element loop dispatches (device-independent)."""
    a, b = torch.empty(2, 20, device="meta"), torch.empty(10, device="meta")
    out = torch.empty(2, 20, device="meta")
    return [op.name for op in trace_ops(posted_elementwise, a, b, out, 1).ops]


@dataclasses.dataclass
class Extrapolation:
    elements_timed: int
    per_element: timing.Timing  # the harness's timing of `elements_timed` elements
    total_elements: int

    @property
    def seconds_per_element(self) -> float:
        return self.per_element.median / self.elements_timed

    @property
    def total_seconds(self) -> float:
        return self.seconds_per_element * self.total_elements

    def __str__(self) -> str:
        hours = self.total_seconds / 3600
        return (f"measured: {self.elements_timed} element{'s' if self.elements_timed != 1 else ''} in {fmt_time(self.per_element.median)} "
                f"({fmt_time(self.seconds_per_element)} per element)\n"
                f"extrapolated (not run): {self.total_elements:,} elements "
                f"(5000 × 2000 × 100 passes) ≈ {self.total_seconds:,.0f} s ≈ {hours:.1f} h")


def extrapolate_elementwise(device=None, elements: int = 300, min_run_time: float = 0.2) -> Extrapolation:
    """Time `elements` passes of the per-element loop at the seed's shape and extrapolate to all of it.

    Only `elements` (at most 2,000) are ever run: the whole loop would take hours."""
    if isinstance(elements, bool) or not isinstance(elements, int) or not 1 <= elements <= 2000:
        raise ValueError(f"elements must be a whole number from 1 to 2000 (a few hundred is plenty), got {elements!r}.")
    dev = timing.timing_device(device)
    rows, cols = SEED_EXAMPLE2["size"]
    a = torch.rand(rows, cols, device=dev)
    b = torch.rand(10, device=dev)
    out = torch.empty_like(a)
    t = _measure(posted_elementwise, a, b, out, elements, label=f"{elements} element{'s' if elements != 1 else ''}",
                 min_run_time=min_run_time, max_time=5.0, device=dev)
    return Extrapolation(elements, t, rows * cols * SEED_EXAMPLE2["num_iterations"])


def expand_vs_repeat(rows: int = 4096, cols: int = 1024) -> str:
    """Adding a row vector to every row: broadcasting (an implicit expand: a view) vs repeat (a copy)."""
    a, v = torch.empty(rows, cols, device="meta"), torch.empty(cols, device="meta")
    variants = {"a + v (broadcast)": lambda a, v: a + v,
                "a + v.expand(rows, cols)": lambda a, v: a + v.expand(a.shape[0], -1),
                "a + v.repeat(rows, 1)": lambda a, v: a + v.repeat(a.shape[0], 1)}
    out = [("version", "ops", "new allocation", "bytes touched")]
    for name, fn in variants.items():
        t = trace_ops(fn, a, v)
        out.append((name, ", ".join(op.name for op in t.compute_ops) or "-", _device.fmt_bytes(t.alloc_bytes),
                    _device.fmt_bytes(t.accessed_bytes)))
    return text_table(out)
