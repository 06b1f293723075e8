"""The hunt, step 2: the course's tools on the original loop and the fixed one, each finding with its lesson.

- `findings`: per training step, original against fixed: ops dispatched here and kernel launches on a CUDA GPU
  (traced on meta as CUDA runs it), GEMMs, bytes copied, the largest copy, bytes saved for backward, host syncs on
  a GPU (the sync detector's CUDA view: the data on the device, the loop's index tensors on the host) and the
  host reads that wait for nothing, cats; with `regimes`, the roofline's regime at the device's own shape.
- `sync_story`: those syncs and reads, line by line; `index_syncs`: x[idx] with the indices on the host or not.
- `chain_counts`: the hand-written norm and GELU against the built-ins, counted by the op trace and the ledger.
- `broadcast_costs`: where one broadcast q/k/v projection's time goes, forward and backward (torch.profiler).
- `diagnosed`, `diagnosis_table`: the hunt's end: lessons_lib.diagnose on both loops, in one call each.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..display import count, html_table, number
from ..device import fmt_bytes
from ..memory import ledger
from ..syncs import cuda_syncs, syncs
from ..trace import trace_ops
from .evidence import pair
from .model import fixed_train, gelu_chain, make_data, norm_by_hand, optimizer, qkv_broadcast, shape, slow_train

LESSONS = {"ops": "04 (launch overhead: each op pays a fixed cost)", "gemms": "03 (a loop of small Linears)",
           "copied": "01 (broadcast matmul copies its operands)", "saved": "02 (what autograd keeps)",
           "syncs": "06 (host syncs and data movement)", "cats": "06 (cat in a loop)",
           "regime": "04 (the three regimes: compute, memory, overhead)"}


def findings(steps: int = 2, dims: dict | None = None, regimes: bool = False, device="cpu") -> dict:
    """Per training step (optimizers built once and past their first step), for the original and the fixed loop,
    at `dims` (default: the CPU's shape on every machine, so the counts are the same everywhere). With
    `regimes`: the regime of a step on `device`, at that device's own default shape (measured peaks)."""
    from .gpu import gpu_work

    d = dims or shape("cpu")
    x, y = make_data(n=steps * d["batch"], T=d["T"])
    slow, fixed = pair(dims=d)
    on_gpu = gpu_work(d, steps)
    rows, traces = {}, {}
    for name, model, train in (("original", slow, slow_train), ("fixed", fixed, fixed_train)):
        opt = optimizer(model)
        train(model, x, y, 1, d["batch"], opt=opt)  # the optimizer's first step (momentum buffers made)
        tr = traces[name] = trace_ops(train, model, x, y, steps, d["batch"], opt=opt)
        gpu = cuda_syncs(train, model, x, y, steps=steps, batch=d["batch"])
        here = syncs(train, model, x, y, steps=steps, batch=d["batch"], opt=opt)
        led = ledger(lambda: F.cross_entropy(model(x[:d["batch"]]), y[:d["batch"]]))
        big = max(tr.copies, key=lambda op: op.write_bytes)
        gpu_lines = gpu.lines()
        rows[name] = {"ops": len(tr.compute_ops) / steps, "launches": on_gpu[name][0].launches / steps,
                      "gemms": len(tr.gemms) / steps, "copied": tr.copied_bytes / steps,
                      "largest_copy": (big.name, big.out_shapes[0]), "saved": led.total_bytes,
                      "syncs": len(gpu.syncs) / steps, "sync_lines": gpu_lines,
                      "reads": len(here.syncs) / steps,
                      "read_lines": {k: n for k, n in here.lines().items() if k not in gpu_lines},
                      "cats": len(tr.named("cat")) / steps}
    if regimes:
        same = torch.device(device).type != "cuda" and d == shape("cpu")  # this CPU's shape: the traces above serve
        for name, (words, floor) in regime_of(device, steps, traces if same else None).items():
            rows[name]["regime"], rows[name]["floor_ms"] = words, floor * 1e3
    return rows


def regime_of(device="cpu", steps: int = 2, traces: dict | None = None) -> dict[str, tuple[str, float]]:
    """{stage: (regime in words, floor per step in seconds)} of the original and the fixed step on `device` at its
    default shape, with its measured peaks: on a GPU the work traced as CUDA runs it (gpu.gpu_work), on a CPU
    the op trace of `steps` steady-state steps (`traces`, when the caller has them at that shape). Machine-dependent."""
    from .. import roofline
    from .gpu import gpu_work

    dev = torch.device(device)
    d = shape(dev)
    peaks = roofline.measure_peaks(dev)
    if dev.type == "cuda":
        work = {n: w for n, (w, _) in gpu_work(d, steps).items() if n in ("original", "fixed")}
    elif traces is not None:
        work = {n: roofline.Work.from_trace(t) for n, t in traces.items()}
    else:
        x, y = make_data(n=steps * d["batch"], T=d["T"])
        slow, fixed = pair(dims=d)
        work = {}
        for name, model, train in (("original", slow, slow_train), ("fixed", fixed, fixed_train)):
            opt = optimizer(model)
            train(model, x, y, 1, d["batch"], opt=opt)
            work[name] = roofline.Work.from_trace(trace_ops(train, model, x, y, steps, d["batch"], opt=opt))
    return {n: (peaks.regime_words(w), peaks.floor(w) / steps) for n, w in work.items()}


def findings_table(rows: dict, dims: dict | None = None) -> "html_table":
    """The course's tools, original vs fixed, each row with the lesson that explains it."""
    o, f = rows["original"], rows["fixed"]
    d = dims or shape("cpu")
    out = [("per training step", "original", "fixed", "lesson"),
           ("ops that do work, dispatched here (op trace)", number(o["ops"]), number(f["ops"]), LESSONS["ops"]),
           ("kernel launches on a CUDA GPU (op trace on meta, as CUDA runs it)", number(o["launches"]),
            number(f["launches"]), LESSONS["ops"]),
           ("GEMMs (op trace)", number(o["gemms"]), number(f["gemms"]), LESSONS["gemms"]),
           ("bytes copied (op trace)", fmt_bytes(o["copied"]), fmt_bytes(f["copied"]), LESSONS["copied"]),
           ("largest copy (op trace)", _op(o["largest_copy"]), _op(f["largest_copy"]), LESSONS["copied"]),
           ("saved for backward, one batch (ledger)", fmt_bytes(o["saved"]), fmt_bytes(f["saved"]), LESSONS["saved"]),
           ("host syncs on a GPU (sync detector, CUDA view)", number(o["syncs"]), number(f["syncs"]), LESSONS["syncs"]),
           ("values read on the host, waiting or not (every .item(), x[j])", number(o["reads"]), number(f["reads"]),
            LESSONS["syncs"]),
           ("cats (op trace)", number(o["cats"]), number(f["cats"]), LESSONS["cats"])]
    if "regime" in o:
        out.append(("regime on this machine (roofline, measured peaks)", o["regime"], f["regime"], LESSONS["regime"]))
    dims_ = ", ".join(f"{k}={v}" for k, v in d.items())
    return html_table(out, caption=f"The course's tools on one training step at {dims_} (the same on every machine)")


def sync_story(row: dict, steps: int = 2) -> str:
    """A loop's host syncs on a GPU, line by line, then the host reads that wait for nothing (deterministic)."""
    lines = ["On a GPU (the sync detector's CUDA view), per step:"]
    lines += [f"  {count(n / steps, 'host sync')} at: {w}" for w, n in row["sync_lines"].items()] or ["  none"]
    if row["read_lines"]:
        lines.append("Values read on the host that wait for nothing (a CPU tensor read on the CPU), per step:")
        lines += [f"  {number(n / steps)} at: {w}" for w, n in row["read_lines"].items()]
    return "\n".join(lines)


def index_syncs(n: int = 64, batch: int = 8) -> dict[str, list[str]]:
    """x[idx], y[idx] with `idx` a CPU tensor, then a tensor on the device: the host syncs each makes on a GPU
    (the sync detector's CUDA view), as "what: why" lines."""
    x, y = make_data(n=n, T=4)
    idx = torch.randperm(n)[:batch]

    def host(x, y):
        return x[idx], y[idx]

    def dev(x, y, idx):
        return x[idx], y[idx]

    return {"indices on the host": [f"{s.what}: {s.why}" for s in cuda_syncs(host, x, y).syncs],
            "indices on the device": [f"{s.what}: {s.why}" for s in cuda_syncs(dev, x, y, idx).syncs]}


def chain_counts(dims: dict | None = None) -> "html_table":
    """The hand-written norm and tanh-GELU against F.layer_norm and F.gelu, forward at (batch, T, C): the ops
    each dispatches (op trace) and the full-size tensors it keeps for backward, new memory only (ledger)."""
    d = dims or shape("cpu")
    B, T, C = d["batch"], d["T"], d["C"]
    x = torch.randn(B, T, C, requires_grad=True)
    g, b = torch.ones(C, requires_grad=True), torch.zeros(C, requires_grad=True)
    fns = {"norm_by_hand": lambda x: norm_by_hand(x, g, b), "F.layer_norm": lambda x: F.layer_norm(x, (C,), g, b),
           "gelu_chain": gelu_chain, "F.gelu(approximate='tanh')": lambda x: F.gelu(x, approximate="tanh")}
    rows = [("forward of", "ops dispatched", f"full-size ({B}x{T}x{C}) tensors kept for backward", "bytes kept")]
    for name, fn in fns.items():
        ops = len(trace_ops(fn, x).compute_ops)
        led = ledger(fn, x)
        full = [e for e in led.entries if e.counted and e.shape == tuple(x.shape)]
        rows.append((name, str(ops), str(len(full)), fmt_bytes(led.total_bytes)))
    return html_table(rows, caption="Counted by the op trace and the saved-tensor ledger (the same on every machine)")


# === where a broadcast projection's time goes ==========================================================

def broadcast_parts(device="cpu", dims: dict | None = None) -> dict:
    """The work of one forward and backward of `qkv_broadcast` (three per-head weights), part by part, as
    zero-argument callables doing exactly the ops autograd runs there (tests/lesson07 checks them against the op
    trace): matmul's copy of each weight per batch row (expand, then clone), the forward GEMMs, and backward's
    weight gradient, one per batch row (BmmBackward0: the saved input transposed @ the gradient), then its sum
    over the batch (the expand's backward)."""
    dev = torch.device(device)
    d = dims or shape(dev)
    B, T, C, H = d["batch"], d["T"], d["C"], d["H"]
    D = C // H
    xh = torch.randn(B * H, T, C, device=dev)  # the input, as matmul copied it per head
    ws = [torch.randn(H, C, D, device=dev) for _ in range(3)]
    wx = [w.expand(B, H, C, D).reshape(B * H, C, D) for w in ws]  # the copies the forward made
    grads = [torch.randn(B * H, T, D, device=dev) for _ in range(3)]
    return {"weight copies": lambda: [w.expand(B, H, C, D).contiguous() for w in ws],
            "forward GEMMs": lambda: [torch.bmm(xh, w) for w in wx],
            "weight gradients per batch row, and their sum": lambda: [
                torch.bmm(xh.transpose(1, 2), g).view(B, H, C, D).sum(0, keepdim=True) for g in grads]}


def broadcast_costs(device="cpu", dims: dict | None = None, max_time: float = 3.0):
    """`broadcast_parts` timed in paired rounds (noise.compare, device passed): the Comparison."""
    from .. import noise

    dev = torch.device(device)
    fns = broadcast_parts(dev, dims)
    names = list(fns)
    return noise.compare(fns, pairs=[(names[2], names[0]), (names[1], names[0])], max_time=max_time, device=dev)


def broadcast_table(cmp, device="cpu", dims: dict | None = None):
    """The parts' times and the sentence the rounds decide: how many times the weight copies' time the weight
    gradient takes."""
    dev = torch.device(device)
    d = dims or shape(dev)
    names = cmp.names
    rows = [("the broadcast q, k, v projections", "time (median)", "× the weight copies' time")]
    for n in names:
        r = cmp.ratio(n, names[0])
        rows.append((n, f"{cmp.median(n) * 1e3:.2f} ms", "" if n == names[0] else r.say("{v:.1f}×")))
    where = "GPU" if dev.type == "cuda" else "CPU"
    dims_ = ", ".join(f"{k}={v}" for k, v in d.items())
    return html_table(rows, caption=f"Measured here ({where}, {dims_}), paired rounds (noise.compare)")


def _op(op) -> str:
    name, shp = op
    return f"{name} {'x'.join(map(str, shp))}"


# === the hunt's end: lessons_lib.diagnose finds it all in one call =======================================

def diagnosed(steps: int = 2, dims: dict | None = None) -> dict:
    """{"original": Report, "fixed": Report}: lessons_lib.diagnose on each loop as `findings` runs it (the CPU's
    shape on every machine, the optimizer built once and past its first step), on meta copies, as a T4 would run
    it. The same on every machine (tests/diagnose/test_lesson07.py holds it to the findings table)."""
    from .. import diagnose

    d = dims or shape("cpu")
    x, y = make_data(n=steps * d["batch"], T=d["T"])
    slow, fixed = pair(dims=d)
    out = {}
    for name, model, train in (("original", slow, slow_train), ("fixed", fixed, fixed_train)):
        opt = optimizer(model)
        train(model, x[:d["batch"]], y[:d["batch"]], 1, d["batch"], opt=opt)  # momentum buffers made
        out[name] = diagnose(train, model, x, y, steps, d["batch"], opt=opt)
    return out


def _gist(evidence: str, width: int = 110) -> str:
    """The evidence's first clause, cut at a word with '…' where it is longer than `width`."""
    import textwrap

    return textwrap.shorten(evidence.split("; ")[0], width, placeholder=" …")


def diagnosis_table(report, title: str = "") -> "html_table":
    """A Report as a table of (lesson, pitfall, your line, the evidence's gist): no file paths, so the same on
    every machine (a notebook cell's file name is not)."""
    if report.clean:
        rows = [("lesson", "pitfall", "your line", "evidence"), ("", "no pitfall found", "", report.step["summary"])]
    else:
        rows = [("lesson", "pitfall", "your line", "evidence")]
        rows += [(f.lesson, f.kind, f"{f.where.function}(): {f.where.text}" if f.where.function else f.where.text,
                  _gist(f.evidence)) for f in report.findings]
    from ..diagnose import a_gpu

    n = len(report.findings)
    return html_table(rows, caption=title or f"lessons_lib.diagnose: {n} finding{'s' * (n != 1)} (ran on "
                      f"{report.ran_on}; costs on {a_gpu(report.gpu)}: roofline model)")
