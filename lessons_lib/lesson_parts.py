"""The pieces a `Lesson` is built from, and the checks on what a reader passes in.

`Param` (a shape parameter), `Variant` (one implementation), `Check` (one correctness row),
`Stopped`; `check_device` / `check_dtype` (a sentence instead of a traceback), and the small
helpers `lesson.py` runs variants with. Split from lesson.py (issue 21); lesson.py re-exports them.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from . import timing
from .device import has_cuda, pick
from .trace import on_meta, tf32_enabled, trace_ops

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


class Stopped(Exception):
    """A run or sweep was stopped by its `stop` callback (the explorer's Stop button)."""


class Check(NamedTuple):
    """One row of `Lesson.check_correct`: a variant at one shape against the float64 reference."""

    variant: str
    params: dict
    error: float  # worst relative error over every tensor the call returns (inf for NaN, inf or a wrong shape)
    tol: float
    ok: bool


@dataclass
class Variant:
    name: str
    fn: Callable[..., torch.Tensor]
    note: str = ""
    # prepare(fn, *inputs) -> the callable to time. Runs outside the clock (compile, graph capture);
    # Lesson.run reports its cost separately, in Run.prepare_seconds.
    prepare: Callable[..., Callable] | None = None
    # True for a variant that runs one of the others (GroupedLinear(auto) runs the strategy it chose): drawn
    # and timed, but never named "fastest" (its lead over the variant it runs is noise)
    runs_another: bool = False
    # seconds `prepare` may take at most (GroupedLinear(auto)'s tuning budget, say): the explorer's estimate
    # counts it before the first run; afterwards it counts what preparing took here
    prepare_budget: float | None = None

    def source(self) -> str:
        return inspect.getsource(self.fn)


def check_device(device) -> torch.device:
    """A device the course can run on: "cpu", or "cuda" where CUDA is available. Anything else
    (meta, mps, a typo) gets a sentence, before anything runs."""
    if device is None:
        return pick(None)
    if not isinstance(device, (str, torch.device)):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}.")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"Unknown device {device!r}: use 'cpu' or 'cuda'.") from None
    if dev.type == "cuda" and not has_cuda():
        raise ValueError("device='cuda' but no CUDA GPU is available here: use 'cpu' (or a GPU runtime on Colab).")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"The course times and checks on 'cpu' or 'cuda', not {dev.type!r} "
                         "(op traces on 'meta' go through Lesson.traces).")
    return dev


def check_dtype(dtype) -> torch.dtype:
    """float32, float16 or bfloat16, as a torch.dtype or its name; anything else gets a sentence."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    raise ValueError(f"dtype must be one of {list(DTYPES)} (a name or a torch dtype), got {dtype!r}.")


def _check_positive(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {x!r}.")
    return float(x)


def _max_time_kw(max_time):
    """Pass `max_time` to timing.measure only where the harness has it."""
    if max_time is None or "max_time" not in inspect.signature(timing.measure).parameters:
        return {}
    return {"max_time": max_time}


def _tf32_allowed() -> bool:
    """Float32 matmuls (cuBLAS) may run in TF32: the tolerance of a call whose ops are not known."""
    return tf32_enabled("matmul")


def may_use_tf32(fn, inputs, device, dtype) -> bool:
    """Whether `fn(*inputs)` may run float32 work in TF32 here, backend by backend: on a CUDA device, in
    float32, a GEMM while cuBLAS may use TF32 or a convolution while cuDNN may (PyTorch's defaults: GEMMs no,
    convolutions yes; `trace.tf32_enabled` reads the flags). Which ops `fn` runs comes from its op trace on
    `meta` (nothing allocated); a call that cannot be traced there counts as TF32 if either backend allows it."""
    if torch.device(device).type != "cuda" or dtype != torch.float32:
        return False
    matmul, conv = tf32_enabled("matmul"), tf32_enabled("conv")
    if matmul == conv:
        return matmul
    try:
        return any(op.tf32 for op in trace_ops(fn, *on_meta(*inputs)).ops)
    except Exception:  # a kernel without a meta implementation (grouped_mm in float32, say): be lenient
        return True


def _fresh(inputs):
    """A copy of each input tensor (keeping requires_grad), so in-place writes stay with one variant."""
    return tuple(t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                 for t in inputs)


def _flat(result) -> list[torch.Tensor]:
    return [t for t in (result if isinstance(result, (tuple, list)) else (result,)) if isinstance(t, torch.Tensor)]


def _as64(t):
    return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def _fmt_params(p: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items())


def _stopping(call: Callable, stop: Callable[[], bool] | None, name: str) -> Callable:
    """`call`, raising `Stopped` once `stop()` is true: a Stop is seen at the next call, not after the whole
    measurement (up to 10 s in an explorer: lesson 07's sweep stopped 11 s after Stop). It costs each timed call
    one Python call, about 0.1 µs; without `stop`, `call` itself."""
    if stop is None:
        return call

    def checked(*args):
        if stop():
            raise Stopped(f"stopped while measuring {name!r}")
        return call(*args)

    checked.__name__ = getattr(call, "__name__", "call")
    return checked


def _progress(total: int, desc: str):
    """A sweep's progress. In a notebook, one line of plain text updated in place (`_TextProgress`): a saved
    notebook keeps it, where tqdm.auto's widget, once closed, showed "Error displaying widget: model not found"
    after a reload (lesson 04). Elsewhere, tqdm's text bar (stderr), gone when the sweep ends."""
    try:
        from IPython import get_ipython

        in_kernel = getattr(get_ipython(), "kernel", None) is not None
    except ImportError:
        in_kernel = False
    if in_kernel:
        return _TextProgress(total, desc)
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, leave=False)


class _TextProgress:
    """"sweeping width: 2 of 5 points, 3 s" as one text output, updated in place (a display id); closed, it
    says what was done: plain text, which every viewer shows and a reload keeps."""

    def __init__(self, total: int, desc: str):
        import time

        from IPython.display import display

        self.total, self.desc, self.n, self._clock, self._t0 = total, desc, 0, time.perf_counter, time.perf_counter()
        self._handle = display(self._bundle(), raw=True, display_id=True)

    def _bundle(self, done: bool = False) -> dict:
        s = self._clock() - self._t0
        text = (f"{self.desc}: {self.n} of {self.total} points measured in {s:.1f} s" if done else
                f"{self.desc}: {self.n} of {self.total} points, {s:.0f} s so far…")
        return {"text/plain": text}

    def update(self, n: int = 1) -> None:
        self.n += n
        self._handle.update(self._bundle(), raw=True)

    def close(self) -> None:
        self._handle.update(self._bundle(done=True), raw=True)
