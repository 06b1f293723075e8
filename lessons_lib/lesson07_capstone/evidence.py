"""The hunt, in a practitioner's order: the profiler first, then the course's tools.

1. `profile_train`: torch.profiler over a few training steps. The table sorted by self time (self CUDA
   time on a GPU), and a Chrome trace file written to an ignored working folder (PROFILE_DIR): open it
   at ui.perfetto.dev or chrome://tracing. On a GPU, `memory_snapshot` also writes the allocator's
   history for pytorch.org/memory_viz.
2. `summary`: the trace summarised here, for a room without internet, from the profiler's own events
   (HolisticTraceAnalysis would need pandas and plotly, which the course does not install): the top ops
   by time, ops dispatched (kernel launches on a GPU) per step, host syncs per step; beside them the
   largest tensors saved for backward, from the ledger.
3. tools.py: the course's tools, each finding with the lesson that explains it.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import device as _device
from ..display import html_table
from ..memory import ledger
from .model import Model, copy_weights, make_data, optimizer, shape, slow_train

PROFILE_DIR = Path("profiles")  # ignored by git (.gitignore): traces and snapshots a reader opens elsewhere
TOP = 12  # rows of the profiler's table


def pair(dtype=torch.float32, seed=0, dims: dict | None = None, device="cpu"):
    """A slow model and a fixed one with the same weights (default: the shape for `device`)."""
    d = dims or shape(device)
    torch.manual_seed(seed)
    slow = Model(False, d["C"], d["H"], d["E"], dtype=dtype)
    fixed = copy_weights(slow, Model(True, d["C"], d["H"], d["E"], dtype=dtype))
    return slow.to(device), fixed.to(device)


def data(device="cpu", dims: dict | None = None, batches: int = 8):
    """Training data for `batches` steps at the device's shape, on the device."""
    d = dims or shape(device)
    x, y = make_data(n=batches * d["batch"], T=d["T"])
    return x.to(device), y.to(device)


def fit_threads(model, x, y, batch: int, max_time: float = 2.0) -> str:
    """On a CPU, the thread count for this lesson's timings, decided by the noise rule on its own training step
    (`device.thread_choice`: one step of the original loop, `slow_train`, on all of torch's threads against
    one, in paired rounds), set, and said. setup() decided on many small parallel ops; a whole step is the
    lesson's own evidence (on 2 threads at load 6-7 it took 562.6 ms a step, against 61.4 ms on one).
    `model` is trained one step per call: pass a model whose weights you do not need."""
    if x.device.type != "cpu":
        return "On a GPU the CPU threads only launch work: no thread count to choose."
    opt = optimizer(model)
    threads, said = _device.thread_choice(lambda: slow_train(model, x, y, steps=1, batch=batch, opt=opt),
                                          what="this lesson's training step", max_time=max_time)
    torch.set_num_threads(threads)
    return said


# === 1. the profiler ==================================================================================

_NOT_OPS = ("Optimizer.", "ProfilerStep", "## ")  # user annotations: they span ops, their "self" time is not theirs


def _is_kernel(e) -> bool:
    """A row of work on the GPU (a kernel, a memcpy or memset), not a host-side op."""
    return str(getattr(e, "device_type", "")).endswith("CUDA")


def _is_annotation(e) -> bool:
    """A user annotation (the optimizer's step, a record_function): a span over many ops, on the host and, since
    the profiler mirrors it onto the GPU's timeline, as a GPU row too (the H200 showed Optimizer.step#SGD.step
    among the kernels): its "self" time is not its own."""
    return bool(getattr(e, "is_user_annotation", False)) or e.key.startswith(_NOT_OPS)


def _is_op(e) -> bool:
    """An op or a CUDA runtime call on the host (not a kernel, an annotation or the profiler's own work)."""
    return not _is_kernel(e) and not _is_annotation(e) and e.key not in _PROFILER_OWN


# The profiler's own host work, shown as rows of its own: the H200's table put "Activity Buffer Request" (CUPTI
# asking for a buffer, 2.4 ms once a step) at the top of the original's self CPU time.
_PROFILER_OWN = ("Activity Buffer Request", "Buffer Request", "cudaGetDeviceCount")


def _self_key(cuda: bool, events=()) -> str:
    """The profiler's column of self time on the device: its name changed across releases."""
    if not cuda:
        return "self_cpu_time_total"
    first = next(iter(events), None)
    return "self_cuda_time_total" if first is not None and not hasattr(first, "self_device_time_total") \
        else "self_device_time_total"


@contextlib.contextmanager
def _quiet_profiler():
    """torch.profiler without the profiler's own chatter: Kineto's "USDT ... profiler_start/stop" lines written
    to file descriptor 2 by C++ (red in a notebook) and its warning about clearing events between cycles."""
    import sys
    import warnings

    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


@dataclass
class Profile:
    name: str
    steps: int
    cuda: bool
    table: str  # the profiler's own table, sorted by self time, TOP rows (the text a terminal shows)
    trace_file: Path | None  # the Chrome trace (None: not exported)
    events: list  # key_averages(): one row per op name (kernels have their own rows on a GPU)

    def __str__(self) -> str:
        where = f"\nChrome trace: {self.trace_file}" if self.trace_file else ""
        return f"{self.name}, {self.steps} training step{'s' * (self.steps != 1)}, sorted by self {'CUDA' if self.cuda else 'CPU'} time\n" \
               f"{self.table}{where}"

    def top(self, by: str = "cpu", n: int = 8):
        """The `n` rows with the most self time, per training step, as a compact table. by="cpu": the host's ops and
        CUDA runtime calls (cudaLaunchKernel's row is the host's time launching), ranked by self CPU (the host's own
        time in the row), with CPU total beside it (with what it called: a blocking copy's wait shows there, not in
        its self time). by="device" (a GPU): the aten ops ranked by self CUDA, the device's time in the kernels each
        launched (the kernels' own rows would count that time twice). Annotations and the profiler's own work are
        left out."""
        from ..display import html_table

        device = by == "device" and self.cuda
        key = _self_key(self.cuda, self.events) if device else "self_cpu_time_total"
        rows = [e for e in self.events if _is_op(e) and (not device or e.key.startswith("aten::"))]
        rows = sorted(rows, key=lambda e: getattr(e, key), reverse=True)[:n]
        ms = lambda us: f"{us / 1e3 / self.steps:.3f}"  # noqa: E731  (the profiler counts µs)
        head = ("op (aten::) or CUDA runtime call", "calls a step", "self CPU (ms)", "CPU total (ms)") + \
            (("self CUDA (ms)",) if self.cuda else ())
        body = [(e.key[:60], f"{e.count / self.steps:g}", ms(e.self_cpu_time_total), ms(e.cpu_time_total))
                + ((ms(getattr(e, _self_key(True, self.events))),) if self.cuda else ()) for e in rows]
        where = "GPU time in the kernels each op launched" if device else "host time"
        return html_table([head, *body], numbers=True, caption=f"{self.name}: top {len(body)} by self "
                          f"{'CUDA' if device else 'CPU'} time ({where}), per training step, measured here")

    def waits(self) -> dict:
        """The training loop's waits for the GPU, per step: {runtime call: (calls, self CPU ms)} for the CUDA runtime
        calls that block (a blocking copy is cudaMemcpyAsync then cudaStreamSynchronize: the wait is the
        synchronize's self CPU time). cudaDeviceSynchronize is left out: profile_train and the profiler call it
        once each per profiled call (the H200 counted 2 a call for the fixed loop, which waits nowhere: the sync
        detector and set_sync_debug_mode both found 0). Empty off a GPU."""
        return {e.key: (e.count / self.steps, e.self_cpu_time_total / 1e3 / self.steps) for e in self.events
                if e.key in _WAITS}


def profile_train(model, train, x, y, steps: int = 2, name: str = "step", export: bool = True,
                  batch: int | None = None, opt=None) -> Profile:
    """Profile `steps` steps of `train(model, x, y)` (after one untimed step): the table sorted by self time
    and, with `export`, a Chrome trace in PROFILE_DIR (open it at ui.perfetto.dev or chrome://tracing).
    opt: the optimizer, built once and passed to both calls (steady state); default: the one `train` builds."""
    from torch.profiler import ProfilerActivity, profile

    from ..kernels import profiler_sees_cuda
    from .model import optimizer

    cuda = x.device.type == "cuda" and profiler_sees_cuda()  # a CPU-only build's profiler sees no GPU
    kw = {"opt": opt if opt is not None else optimizer(model)}
    if batch is not None:
        kw["batch"] = batch
    train(model, x, y, steps=1, **kw)  # first-call costs (and the optimizer's first step) are not the step
    _device.synchronize(x.device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with _quiet_profiler():
        with profile(activities=acts) as prof:
            train(model, x, y, steps=steps, **kw)
            _device.synchronize(x.device)
        trace_file = None
        if export:
            PROFILE_DIR.mkdir(exist_ok=True)
            trace_file = PROFILE_DIR / f"{name.replace(' ', '_')}_trace.json"
            prof.export_chrome_trace(str(trace_file))
        events = prof.key_averages()
    table = events.table(sort_by=_self_key(cuda, events), row_limit=TOP, max_name_column_width=44)
    return Profile(name, steps, cuda, table, trace_file, list(events))


def memory_snapshot(model, train, x, y, steps: int = 2, name: str = "step", batch: int | None = None,
                    opt=None) -> str:
    """On a CUDA GPU: the allocator's history over `steps` steps of `train(model, x, y, batch=batch)`, written
    as a pickle for pytorch.org/memory_viz (drag the file onto the page). Elsewhere: why there is none."""
    mem = getattr(torch.cuda, "memory", None)
    if x.device.type != "cuda" or not _device.has_cuda():
        return ("No memory snapshot: it records the CUDA caching allocator, and this run is on the CPU. "
                "On a GPU this writes a file for pytorch.org/memory_viz; here the peaks below are measured "
                "from the profiler's memory events instead.")
    if mem is None or not hasattr(mem, "_record_memory_history") or not hasattr(mem, "_dump_snapshot"):
        return "No memory snapshot: this torch has no torch.cuda.memory._record_memory_history."
    PROFILE_DIR.mkdir(exist_ok=True)
    path = PROFILE_DIR / f"{name.replace(' ', '_')}_memory.pickle"
    try:
        mem._record_memory_history(max_entries=100_000)
    except (AttributeError, RuntimeError) as err:  # a build whose allocator cannot record (a CPU-only build)
        return f"No memory snapshot: this torch cannot record the allocator's history ({type(err).__name__})."
    kw = {"batch": batch} if batch is not None else {}
    try:
        train(model, x, y, steps=steps, opt=opt, **kw)
        torch.cuda.synchronize()
        mem._dump_snapshot(str(path))
    finally:
        mem._record_memory_history(enabled=None)
    return f"Memory snapshot: {path} ({os.path.getsize(path) / 2**20:.1f} MiB): open pytorch.org/memory_viz " \
           "and drop the file on the page."


# === 2. the summary, from the profiler's own events ===================================================

# The host waiting for the GPU, as the CUDA runtime calls it: each wait is one of these, whatever asked for it
# (an .item(), a nonzero, a blocking copy: ATen's memcpy_and_sync is cudaMemcpyAsync then cudaStreamSynchronize).
# cudaDeviceSynchronize is not among them: the profiling harness makes it (Profile.waits).
_WAITS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy")
_HOST_READS = ("aten::_local_scalar_dense", "aten::nonzero")  # on a CPU: values read on the host
_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch")


def summary(p: Profile, top: int = 5) -> dict:
    """What a profile says, in numbers: the top aten ops by self time (self CUDA on a GPU), aten ops dispatched
    (CUDA kernel launches on a GPU) per step, the host's own time per step in ops and runtime calls and, on a
    GPU, the device's (the kernels): a device busy for a fraction of the host's time is a host-bound step; and
    the host's waits per step. On a GPU the device's total is the kernels'
    rows alone (an aten row's self CUDA time is the same kernels' time again: summing both counted it twice)
    and a wait is counted once, at the runtime call that blocks (not again at the .item() or nonzero above it);
    on a CPU nothing waits for a device, and the count is of values read on the host (item, nonzero)."""
    key = _self_key(p.cuda, p.events)
    ops = [e for e in p.events if e.key.startswith("aten::")]
    host = sum(e.self_cpu_time_total for e in p.events if _is_op(e))
    total = sum(getattr(e, key) for e in p.events if _is_kernel(e) and not _is_annotation(e)) if p.cuda else host
    ranked = sorted(ops, key=lambda e: getattr(e, key), reverse=True)[:top]
    launches = sum(e.count for e in p.events if e.key in _LAUNCHES) if p.cuda else sum(e.count for e in ops)
    waits = sum(e.count for e in p.events if e.key in (_WAITS if p.cuda else _HOST_READS))
    return {"top": [(e.key, getattr(e, key) / 1e3 / p.steps, getattr(e, key) / (total or 1)) for e in ranked],
            "per_step": launches / p.steps, "launch_kind": "CUDA kernel launches" if p.cuda else "aten ops dispatched",
            "syncs_per_step": waits / p.steps, "by": "self CUDA" if p.cuda else "self CPU",
            "host_ms": host / 1e3 / p.steps, "device_ms": total / 1e3 / p.steps if p.cuda else None,
            "sync_kind": "host waits for the GPU (cudaStreamSynchronize...)" if p.cuda else
                         "values read on the host (item, nonzero; a GPU waits only where the value lives on it)"}


def saved_largest(model, x, y, batch: int, n: int = 3) -> tuple[list[tuple[str, str, int]], int]:
    """The `n` largest tensors one batch's forward saves for backward (the ledger), as (node, shape, bytes),
    and the total it saves."""
    led = ledger(lambda: F.cross_entropy(model(x[:batch]), y[:batch]))
    rows = sorted((e for e in led.entries if e.counted), key=lambda e: e.bytes, reverse=True)[:n]
    return [(e.node, "x".join(map(str, e.shape)), e.bytes) for e in rows], led.total_bytes


def summary_table(profiles: list[Profile], saved: list) -> "html_table":
    """The summary side by side, one column per profile: machine-dependent (times) and not (counts)."""
    s = [summary(p) for p in profiles]
    rows = [("", *(p.name for p in profiles))]
    for i in range(len(s[0]["top"])):
        rows.append((f"top op {i + 1} by {s[0]['by']} time (ms a step, share)",
                     *(f"{x['top'][i][0].replace('aten::', '')} {x['top'][i][1]:.2f} ({x['top'][i][2]:.0%})"
                       if i < len(x["top"]) else "" for x in s)))
    rows.append(("host's own time in ops and runtime calls (self CPU, ms a step)", *(f"{x['host_ms']:.2f}" for x in s)))
    if s[0]["device_ms"] is not None:
        rows.append(("GPU busy in kernels (self CUDA, ms a step)", *(f"{x['device_ms']:.2f}" for x in s)))
    rows.append((f"{s[0]['launch_kind']} per step", *(f"{x['per_step']:.0f}" for x in s)))
    rows.append((f"{s[0]['sync_kind']} per step", *(f"{x['syncs_per_step']:.1f}" for x in s)))
    for i in range(max(len(v[0]) for v in saved)):
        rows.append((f"saved for backward, largest {i + 1} (ledger)",
                     *(f"{v[0][i][0]} {v[0][i][1]} {_device.fmt_bytes(v[0][i][2])}" if i < len(v[0]) else ""
                       for v in saved)))
    rows.append(("saved for backward, total (ledger)", *(_device.fmt_bytes(v[1]) for v in saved)))
    return html_table(rows, caption="The profile in numbers (times measured here; counts and bytes are facts)")
