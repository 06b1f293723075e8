"""The hunt, in a practitioner's order: the profiler first, then the course's tools.

1. `profile_train`: torch.profiler over a few training steps. The table sorted by self time (self CUDA
   time on a GPU), and a Chrome trace file written to an ignored working folder (PROFILE_DIR): open it
   at ui.perfetto.dev or chrome://tracing. On a GPU, `memory_snapshot` also writes the allocator's
   history for pytorch.org/memory_viz.
2. `summary`: the trace summarised here, for a room without internet, from the profiler's own events
   (HolisticTraceAnalysis would need pandas and plotly, which the course does not install): the top ops
   by time, ops dispatched (kernel launches on a GPU) per step, host syncs per step; beside them the
   largest tensors saved for backward, from the ledger.
3. `findings`: the course's tools, each finding with the lesson that explains it: the op trace (ops,
   shapes, bytes copied), the saved-tensor ledger, the sync detector and the regime classifier.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import device as _device
from ..display import html_table
from ..memory import ledger
from ..syncs import syncs
from ..trace import trace_ops
from .model import copy_weights, fixed_train, make_data, Model, shape, slow_train

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


# === 1. the profiler ==================================================================================

def _self_key(cuda: bool, events=()) -> str:
    """The profiler's column of self time on the device: its name changed across releases."""
    if not cuda:
        return "self_cpu_time_total"
    first = next(iter(events), None)
    return "self_cuda_time_total" if first is not None and not hasattr(first, "self_device_time_total") \
        else "self_device_time_total"


@dataclass
class Profile:
    name: str
    steps: int
    cuda: bool
    table: str  # the profiler's own table, sorted by self time, TOP rows
    trace_file: Path | None  # the Chrome trace (None: not exported)
    events: list  # key_averages(): one row per op name

    def __str__(self) -> str:
        where = f"\nChrome trace: {self.trace_file}" if self.trace_file else ""
        return f"{self.name}, {self.steps} training steps, sorted by self {'CUDA' if self.cuda else 'CPU'} time\n" \
               f"{self.table}{where}"


def profile_train(model, train, x, y, steps: int = 2, name: str = "step", export: bool = True,
                  batch: int | None = None) -> Profile:
    """Profile `steps` steps of `train(model, x, y)` (after one untimed step): the table sorted by self time
    and, with `export`, a Chrome trace in PROFILE_DIR (open it at ui.perfetto.dev or chrome://tracing)."""
    from torch.profiler import ProfilerActivity, profile

    from ..kernels import profiler_sees_cuda

    cuda = x.device.type == "cuda" and profiler_sees_cuda()  # a CPU-only build's profiler sees no GPU
    kw = {} if batch is None else {"batch": batch}
    train(model, x, y, steps=1, **kw)  # first-call costs are not the step
    _device.synchronize(x.device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
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


def memory_snapshot(model, train, x, y, steps: int = 2, name: str = "step") -> str:
    """On a CUDA GPU: the allocator's history over `steps` steps, written as a pickle for
    pytorch.org/memory_viz (drag the file onto the page). Elsewhere: why there is none."""
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
    try:
        train(model, x, y, steps=steps)
        torch.cuda.synchronize()
        mem._dump_snapshot(str(path))
    finally:
        mem._record_memory_history(enabled=None)
    return f"Memory snapshot: {path} ({os.path.getsize(path) / 2**20:.1f} MiB): open pytorch.org/memory_viz " \
           "and drop the file on the page."


# === 2. the summary, from the profiler's own events ===================================================

_SYNC_EVENTS = ("aten::_local_scalar_dense", "aten::nonzero", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                "cudaMemcpy")  # a value read on the host, a data-dependent size, a blocking wait or copy
_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch")


def summary(p: Profile, top: int = 5) -> dict:
    """What a profile says, in numbers: the top ops by self time, aten ops dispatched (CUDA kernel
    launches on a GPU) per step, and host syncs per step (item/nonzero reads, blocking waits)."""
    key = _self_key(p.cuda, p.events)
    ops = [e for e in p.events if e.key.startswith("aten::")]
    total = sum(getattr(e, key) for e in p.events if not e.key.startswith(("Optimizer", "ProfilerStep"))) or 1
    ranked = sorted(ops, key=lambda e: getattr(e, key), reverse=True)[:top]
    launches = sum(e.count for e in p.events if e.key in _LAUNCHES) if p.cuda else sum(e.count for e in ops)
    host_syncs = sum(e.count for e in p.events if e.key in _SYNC_EVENTS)
    return {"top": [(e.key, getattr(e, key) / 1e3 / p.steps, getattr(e, key) / total) for e in ranked],
            "per_step": launches / p.steps, "launch_kind": "CUDA kernel launches" if p.cuda else "aten ops dispatched",
            "syncs_per_step": host_syncs / p.steps}


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
        rows.append((f"top op {i + 1} by self time (ms a step, share)",
                     *(f"{x['top'][i][0].replace('aten::', '')} {x['top'][i][1]:.2f} ({x['top'][i][2]:.0%})"
                       if i < len(x["top"]) else "" for x in s)))
    rows.append((f"{s[0]['launch_kind']} per step", *(f"{x['per_step']:.0f}" for x in s)))
    rows.append(("host syncs per step (item, nonzero, blocking waits)", *(f"{x['syncs_per_step']:.1f}" for x in s)))
    for i in range(max(len(v[0]) for v in saved)):
        rows.append((f"saved for backward, largest {i + 1} (ledger)",
                     *(f"{v[0][i][0]} {v[0][i][1]} {_device.fmt_bytes(v[0][i][2])}" if i < len(v[0]) else ""
                       for v in saved)))
    rows.append(("saved for backward, total (ledger)", *(_device.fmt_bytes(v[1]) for v in saved)))
    return html_table(rows, caption="The profile in numbers (times measured here; counts and bytes are facts)")


# === 3. the course's tools ===========================================================================

LESSONS = {"ops": "04 (launch overhead: each op pays a fixed cost)", "gemms": "03 (a loop of small Linears)",
           "copied": "01 (broadcast matmul copies its operands)", "saved": "02 (what autograd keeps)",
           "syncs": "06 (host syncs and data movement)", "cats": "06 (cat in a loop)",
           "regime": "04 (the three regimes: compute, memory, overhead)"}


def findings(steps: int = 2, dims: dict | None = None, regimes: bool = False) -> dict:
    """Per training step, for the original and the fixed loop: ops dispatched, GEMMs, bytes copied, host
    syncs, cats; bytes saved for backward (one batch); with `regimes`, the roofline's regime of the step
    on this machine (measured peaks: machine-dependent)."""
    d = dims or shape("cpu")
    x, y = make_data(n=steps * d["batch"], T=d["T"])
    slow, fixed = pair(dims=d)
    rows = {}
    for name, model, train in (("original", slow, slow_train), ("fixed", fixed, fixed_train)):
        tr = trace_ops(train, model, x, y, steps=steps, batch=d["batch"])
        sy = syncs(train, model, x, y, steps=steps, batch=d["batch"])
        led = ledger(lambda: F.cross_entropy(model(x[:d["batch"]]), y[:d["batch"]]))
        big = max(tr.copies, key=lambda op: op.write_bytes)
        rows[name] = {"ops": len(tr.compute_ops) / steps, "gemms": len(tr.gemms) / steps,
                      "copied": tr.copied_bytes / steps, "largest_copy": (big.name, big.out_shapes[0]),
                      "saved": led.total_bytes, "syncs": len(sy.syncs) / steps,
                      "sync_lines": sy.lines(), "cats": len(tr.named("cat")) / steps}
        if regimes:
            from .. import roofline

            peaks = roofline.measure_peaks("cpu")
            work = roofline.Work.from_trace(tr)
            rows[name]["regime"] = peaks.regime_words(work)
            rows[name]["floor_ms"] = peaks.floor(work) / steps * 1e3
    return rows


def findings_table(rows: dict) -> "html_table":
    """The course's tools, original vs fixed, each row with the lesson that explains it."""
    o, f = rows["original"], rows["fixed"]
    fmt = _device.fmt_bytes
    out = [("per training step", "original", "fixed", "lesson"),
           ("ops that do work (op trace)", f"{o['ops']:.0f}", f"{f['ops']:.0f}", LESSONS["ops"]),
           ("GEMMs (op trace)", f"{o['gemms']:.0f}", f"{f['gemms']:.0f}", LESSONS["gemms"]),
           ("bytes copied (op trace)", fmt(o["copied"]), fmt(f["copied"]), LESSONS["copied"]),
           ("largest copy (op trace)", _op(o["largest_copy"]), _op(f["largest_copy"]), LESSONS["copied"]),
           ("saved for backward, one batch (ledger)", fmt(o["saved"]), fmt(f["saved"]), LESSONS["saved"]),
           ("host syncs (sync detector)", f"{o['syncs']:.1f}", f"{f['syncs']:.1f}", LESSONS["syncs"]),
           ("cats (op trace)", f"{o['cats']:.1f}", f"{f['cats']:.1f}", LESSONS["cats"])]
    if "regime" in o:
        out.append(("regime on this machine (roofline, measured peaks)", o["regime"], f["regime"], LESSONS["regime"]))
    return html_table(out, caption="The course's tools on one training step")


def _op(op) -> str:
    name, shp = op
    return f"{name} {'x'.join(map(str, shp))}"
