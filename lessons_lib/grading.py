"""Exercise checkers' shared verdict: a list of named checks, printed as ✓ / ✗ lines.

A lesson's checker runs the reader's code and records each property it tests. Checks that
depend on the machine (timing ratios) are added only on a GPU; the rest (correctness,
op traces, saved bytes, kernel counts) hold everywhere, so a verdict reads the same on
every machine.
"""
from __future__ import annotations

import contextlib
import math
import signal
import threading
from dataclasses import dataclass, field

import torch

GPU_TAG = "[GPU]"
READER_TIME_LIMIT = 20.0  # seconds one call of the reader's code may take before the checker gives up


class TimeLimit(Exception):
    """The reader's code ran past the checker's time limit."""


def rel_error(outs, refs) -> float:
    """The worst relative error over paired tensors: inf for NaN or inf anywhere, a wrong count,
    shape or type (broadcasting would hide a wrong shape; `max` would hide a NaN)."""
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
    if len(outs) != len(refs):
        return math.inf
    err = 0.0
    for out, ref in zip(outs, refs):
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.device.type == "meta":
            return math.inf
        if not ref.numel():
            continue
        out = out.detach().double().cpu()
        ref = ref.detach().double().cpu()
        if not torch.isfinite(out).all():
            return math.inf
        e = ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        if not math.isfinite(e):
            return math.inf
        err = max(err, e)
    return err


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Interrupt the block after `seconds` with TimeLimit (main thread on Unix; elsewhere no limit).

    A reader's infinite loop must become a verdict line, not a hung kernel or a hung test run."""
    usable = seconds and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def _raise(_sig, _frame):
        raise TimeLimit(f"still running after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def call_reader(fn, *inputs, limit: float | None = None):
    """Run the reader's `fn` on `inputs`; return (result, problem).

    The inputs are copied first, so a solution that overwrites its input is caught (problem says so)
    and the reference can be computed from the untouched copy. Anything the code does (raise, hang,
    return garbage) comes back as `problem`, a one-line sentence, never as an exception.
    """
    before = [t.detach().clone() if isinstance(t, torch.Tensor) and t.device.type != "meta" else None
              for t in inputs]
    try:
        with time_limit(limit or READER_TIME_LIMIT):
            result = fn(*inputs)
    except TimeLimit as err:
        return None, f"your code was stopped: {err} (an endless loop?)"
    except Exception as err:  # the reader's code: report it, never raise
        return None, f"your code raised {type(err).__name__}: {_one_line(err)}"
    for i, (t, old) in enumerate(zip(inputs, before)):
        if old is not None and not torch.equal(t.detach(), old):
            return result, f"your code changed input {i} in place; leave the inputs as they were"
    return result, None


def call_for_tensor(fn, *inputs, shape: tuple, shape_name: str = "", limit: float | None = None):
    """`call_reader`, then insist on a tensor of `shape`: (result, problem) as call_reader gives."""
    out, problem = call_reader(fn, *inputs, limit=limit)
    if problem is None and not isinstance(out, torch.Tensor):
        problem = f"your function returned {type(out).__name__}, not a tensor"
    if problem is None and tuple(out.shape) != tuple(shape):
        problem = f"output shape {tuple(out.shape)}, expected {shape_name + ' = ' if shape_name else ''}{tuple(shape)}"
    return out, problem

def analyse_reader(analyse, make_inputs, limit: float | None = None, check_inputs: bool = False):
    """Run a structural analysis (op trace, saved-tensor ledger) of the reader's code.

    It runs on `meta` tensors first (any shape, nothing allocated). Correct code may still need
    real values there (`.item()`, a tensor made on the CPU): then it runs on small CPU tensors.
    Returns (result, device used, problem); problem is a one-line sentence or None.
    check_inputs: on either path, code that changed an input in place is a problem (on `meta`, where there are no
    values, an in-place op on the input or a view of it: its version counter; on the CPU, its values), as
    `call_reader` finds for the reader's own call: a checker must not pass code that, say, zeroes its bias after
    computing only where the trace cannot see values."""
    problem = None
    for device in ("meta", "cpu"):
        try:
            with time_limit(limit or READER_TIME_LIMIT):
                inputs = make_inputs(device)
                before = _input_state(inputs) if check_inputs else None
                result = analyse(*inputs)
            changed = _changed_input(inputs, before) if check_inputs else None
            if changed is not None:
                return result, device, f"your code changed input {changed} in place; leave the inputs as they were"
            return result, device, None
        except TimeLimit as err:
            return None, device, f"your code was stopped: {err} (an endless loop?)"
        except Exception as err:  # the reader's code: report it, never raise
            problem = f"could not trace your code ({type(err).__name__}: {_one_line(err)})"
    return None, None, problem


def check_name(problem: str, default: str) -> str:
    """The verdict line a reader problem belongs on: an input changed in place is its own line, whatever the
    checker was doing when it found it (a trace, a ledger, the reader's call)."""
    return "leaves its inputs as they were" if "in place; leave the inputs" in problem else default


def _input_state(inputs) -> list:
    """Per input: (its version counter, a copy of its values where it has values), or None for a non-tensor."""
    return [(t._version, None if t.device.type == "meta" else t.detach().clone()) if isinstance(t, torch.Tensor)
            else None for t in inputs]


def _changed_input(inputs, before) -> int | None:
    """The index of the first input changed in place since `_input_state`, or None."""
    for i, (t, old) in enumerate(zip(inputs, before)):
        if old is None:
            continue
        version, values = old
        if t._version != version or (values is not None and not torch.equal(t.detach(), values)):
            return i
    return None


def speed_check(name: str, starter, reader, bar: float, device, max_time: float = 20.0,
                limit: float | None = None, note: str = "") -> tuple[str, bool, str]:
    """(name, ok, detail) for `Verdict.on_gpu`: the reader's code against the starter, both zero-argument
    callables, timed in paired, alternating rounds by the noise rule (`noise.compare`), never once each.

    It passes when the rule's interval for time(starter) / time(reader) lies above 1 (the reader is decidedly
    faster: over the whole check, the same code is called faster at most `noise.ALPHA` / 2 of the time) and
    the estimate (`Ratio.median`, the number the detail quotes) reaches `bar`. The rounds stop at the first
    of the rule's looks that settles it (`_settled`); an interval that straddles 1 fails with the rule's
    not-decided sentence. Anything the reader's code does while timed (raise, hang, run out of memory)
    becomes the detail, never an exception. `note` is appended to the detail (`precision_label`).
    """
    from . import noise

    try:
        with time_limit(limit or 2 * max_time + READER_TIME_LIMIT):
            cmp = noise.compare({"starter": starter, "yours": reader}, pairs=[("starter", "yours")],
                                max_time=max_time, device=device, settled=lambda c: _settled(c, bar))
    except TimeLimit as err:
        return name, False, f"still timing: {err}"
    except Exception as err:  # the reader's code on the device: a line, not a traceback
        return name, False, f"timing raised {type(err).__name__}: {_one_line(err)}"
    finally:
        _release(device)
    r = cmp.ratio("starter", "yours")
    tail = f"; {note}" if note else ""
    if not r.decided:
        return name, False, r.not_decided() + tail
    ok = r.faster == "yours" and r.median >= bar
    verdict = ("decidedly faster" if r.faster == "yours" else "a tie" if r.tie else "decidedly slower")
    return name, ok, (f"{r.median:.2f}×, {verdict}: median of {len(r.values)} paired rounds, "
                      f"{noise.LEVEL} interval {r.low:.2f}–{r.high:.2f}×" + tail)


def _settled(cmp, bar: float) -> bool:
    """At one of the noise rule's looks: whether the check's question is answered. Not while the reader is
    decidedly faster but the estimate is under the bar and the interval still reaches it (more rounds can
    lift it over); the next look, if any, is taken then. It never adds a look."""
    r = cmp.ratio("starter", "yours")
    return r.decided and not (r.faster == "yours" and r.median < bar <= r.high)


def _release(device) -> None:
    """After a timing on a GPU: wait for it, and hand cached blocks back (the starters allocate gigabytes)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()


def precision_label(device, op: str = "matmul") -> str:
    """What float32 `op`s run in on `device`, for a timing's label: "float32 GEMMs in TF32 (cuBLAS)" (op
    "matmul") or "float32 convolutions in TF32 (cuDNN)" (op "conv") on a CUDA GPU with TF32 (compute
    capability 8.0+) while that backend may use it (`trace.tf32_enabled`: PyTorch's defaults are GEMMs no,
    convolutions yes); "... in full float32" otherwise."""
    from .trace import tf32_enabled

    what = {"matmul": ("GEMMs", "cuBLAS"), "conv": ("convolutions", "cuDNN")}[op]
    dev = torch.device(device)
    on = dev.type == "cuda" and torch.cuda.get_device_capability(dev)[0] >= 8 and tf32_enabled(op)
    return f"float32 {what[0]} in TF32 ({what[1]})" if on else f"float32 {what[0]} in full float32"


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else "")[:200]


@dataclass
class Verdict:
    title: str
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((name, bool(ok), detail))
        return bool(ok)

    def skip(self, name: str, why: str) -> None:
        self.checks.append((name, None, why))

    def on_gpu(self, name: str, ok: bool | None, detail: str = "") -> None:
        """A machine-dependent check: `ok=None` skips it (no GPU). Its line starts with "[GPU]"
        so that nbval's sanitizer can blank it when a notebook runs on a GPU."""
        name = f"{GPU_TAG} {name}"
        if ok is None:
            self.skip(name, detail or "no CUDA GPU here; the other checks do not depend on the machine")
        else:
            self.check(name, ok, detail)

    def on_every_machine(self) -> "Verdict":
        """This verdict without its [GPU] lines: the part that reads the same on every machine."""
        return Verdict(self.title, [c for c in self.checks if not c[0].startswith(GPU_TAG)])

    @property
    def passed(self) -> bool:
        return all(ok is not False for _n, ok, _d in self.checks) and any(ok for _n, ok, _d in self.checks)

    def __str__(self) -> str:
        lines = [f"{self.title}:"]
        for name, ok, detail in self.checks:
            mark = {True: "✓", False: "✗", None: "–"}[ok]
            lines.append(f"  {mark} {name}" + (f" ({detail})" if detail else ""))
        lines.append("Passed. Well done!" if self.passed else "Not yet: fix the ✗ lines and run the checker again.")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def __bool__(self) -> bool:
        return self.passed
