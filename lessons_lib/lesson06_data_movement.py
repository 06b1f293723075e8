"""Lesson 06: data movement and tensor hygiene, seed 001's advice tested claim by claim.

Forum seed 001 ("How can I speed up PyTorch vector operations?") is a list of confident advice
with three timing examples. Each claim gets an experiment here, evidence that does not depend
on the machine where it exists (sync detector, op traces, saved-tensor ledger), a timing where
the effect is a time, a verdict, and the corrected rule:

1. keep data on the GPU (transfers, pinned memory, non_blocking, hidden syncs);
2. replace Python loops with vector ops and broadcasting (the seed's per-element loop; expand vs repeat);
3. `torch.cat` in a loop reallocates: pre-allocate and fill (vs collect, then cat once);
4. in-place ops avoid copies;
5. `no_grad` saves time and memory (and `inference_mode`);
6. channel-first layouts help convolutions.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn

from . import memory, noise, results, roofline, timing, transfers
from . import device as _device
from .display import html_table, text_table
from .grading import Verdict, analyse_reader, call_for_tensor, call_reader, rel_error
from .lesson import Lesson, Param, Variant
from .syncs import syncs
from .timing import fmt_time
from .trace import trace_ops
from .widgets import Explorer

KEY = "06_data_movement"
# The seed's three examples, at its sizes (it reports no timings: "the output demonstrates...").
SEED_EXAMPLE1 = {"size": (10000, 1000), "num_iterations": 100}
SEED_EXAMPLE2 = {"size": (5000, 2000), "num_iterations": 100}
SEED_EXAMPLE3 = {"num_tensors": 10, "size": (1000, 1000), "num_iterations": 100}


def _measure(fn, *args, label: str, min_run_time: float = 0.1, max_time: float = 3.0) -> timing.Timing:
    """The harness with an upper bound on the whole measurement (a demo never runs away)."""
    return timing.measure(fn, *args, label=label, min_run_time=min_run_time, max_time=max_time)


def _bytes(t) -> int:
    return t.numel() * t.element_size()


# === 1 · transfers and syncs (seed example 1) ===================================================


def posted_transfer_loop(cpu_tensor, num_iterations: int, device):
    """Seed example 1, 'inefficient', as posted (`.cuda()` written as `.to(device)`)."""
    for _ in range(num_iterations):
        gpu_tensor = cpu_tensor.to(device)
        result = torch.sum(gpu_tensor)
        result = result.cpu()
    return result


def copy_only_loop(cpu_tensor, num_iterations: int, device):
    """The same copies, but the result stays on the device: the copy's cost without a read-back."""
    for _ in range(num_iterations):
        gpu_tensor = cpu_tensor.to(device, non_blocking=True)
        result = torch.sum(gpu_tensor)
    return result


def kept_on_device_loop(gpu_tensor, num_iterations: int):
    """Seed example 1, 'efficient': the data made once on the device, nothing copied in the loop."""
    for _ in range(num_iterations):
        result = torch.sum(gpu_tensor)
    return result


def transfer_syncs(device=None, num_iterations: int = 5, size=(64, 32)) -> dict:
    """The sync detector on the seed's two loops (small tensors: the count, not the time, matters)."""
    dev = _device.pick(device)
    cpu_tensor = torch.rand(size)
    gpu_tensor = cpu_tensor.to(dev)
    return {"as posted": syncs(posted_transfer_loop, cpu_tensor, num_iterations, dev),
            "copy only": syncs(copy_only_loop, cpu_tensor, num_iterations, dev),
            "kept on device": syncs(kept_on_device_loop, gpu_tensor, num_iterations)}


def sync_table(reports: dict, num_iterations: int = 5) -> str:
    """Host syncs and copies per loop, and per pass of the loop."""
    rows = [("loop", "host syncs", "per pass", "copies between devices", "bytes copied")]
    for name, r in reports.items():
        rows.append((name, str(len(r.syncs)), f"{len(r.syncs) / num_iterations:g}", str(len(r.transfers)),
                     _device.fmt_bytes(r.transfer_bytes)))
    return text_table(rows, numbers=True)


def hidden_syncs_example(x, threshold: float = 0.5):
    """A training-loop fragment full of host syncs that look harmless."""
    loss = (x * x).mean()
    print(f"loss {loss:.3f}")  # f-string of a 0-d tensor: .item()
    if loss > threshold:  # a tensor in an if
        x = x / 2
    big = x[x > threshold]  # boolean mask: output size depends on the data
    rows = torch.nonzero(x > threshold)  # data-dependent size
    stats = x.mean(0).tolist()  # copies to the host
    total = x.sum().item()  # reads a value
    return big, rows, stats, total


def hidden_syncs_fixed(x, threshold: float = 0.5):
    """The same results, kept on the device: masks become multiplications and `where`."""
    loss = (x * x).mean()
    x = torch.where(loss > threshold, x / 2, x)
    keep = x > threshold
    big = torch.where(keep, x, torch.zeros_like(x))  # fixed size: zeros where the mask is False
    return big, keep, x.mean(0), x.sum(), loss


def seed_example1_model(names=("T4", "L4", "A100", "H100"), size=SEED_EXAMPLE1["size"]) -> list[dict]:
    """Per named GPU, one pass of seed example 1 from datasheets (MODEL, not measured): the
    copy of a pageable tensor (transfers.model) plus the sum's memory floor, against the sum alone."""
    nbytes = 4 * math.prod(size)
    rows = []
    for n in names:
        link, peaks = transfers.model(n), roofline.datasheet(n)
        sum_s = max(nbytes / peaks.bandwidth, peaks.launch)
        copy_s = link.seconds(nbytes, pinned=False)
        rows.append({"gpu": n, "copy": copy_s, "sum": sum_s, "posted": copy_s + 2 * sum_s + peaks.launch,
                     "kept": sum_s, "ratio": (copy_s + sum_s) / sum_s})
    return rows


def seed_example1_model_table(rows=None) -> str:
    rows = rows or seed_example1_model()
    out = [("GPU (model)", "copy 40 MB pageable", "sum (memory floor)", "posted / pass", "kept / pass",
            "posted ÷ kept")]
    for r in rows:
        out.append((r["gpu"], fmt_time(r["copy"]), fmt_time(r["sum"]), fmt_time(r["posted"]),
                    fmt_time(r["kept"]), f"{r['posted'] / r['kept']:.0f}×"))
    return text_table(out) + "\n" + transfers.MODEL_NOTE + " Sum: datasheet bandwidth floor."


def seed_example1_timings(device=None, size=None, num_iterations: int = 10, min_run_time: float = 0.1) -> dict:
    """The seed's two loops and the copy-only loop, timed with the harness (a fixed number of passes)."""
    dev = _device.pick(device)
    size = size or (SEED_EXAMPLE1["size"] if dev.type == "cuda" else (1000, 1000))
    _device.check_fits(3 * 4 * math.prod(size), dev, "seed example 1")
    cpu_tensor = torch.rand(size)
    gpu_tensor = cpu_tensor.to(dev)
    out = {"as posted": _measure(posted_transfer_loop, cpu_tensor, num_iterations, dev, label="as posted",
                                 min_run_time=min_run_time),
           "kept on device": _measure(kept_on_device_loop, gpu_tensor, num_iterations, label="kept on device",
                                      min_run_time=min_run_time)}
    return out


def seed_example1_verdict(device=None, size=None, num_iterations: int = 10, max_time: float = 8.0):
    """(Comparison, sentence): the posted loop against the kept-on-device one in paired rounds (the
    noise rule), on a GPU; on a CPU both sum the same tensor, so there is nothing to conclude."""
    dev = _device.pick(device)
    if dev.type != "cuda":
        return None, ("On a CPU both loops sum the same tensor (no copy exists), so timing them says nothing about "
                      "the claim: the copy's cost is the model's figure above, labelled model.")
    size = size or SEED_EXAMPLE1["size"]
    _device.check_fits(3 * 4 * math.prod(size), dev, "seed example 1")
    cpu_tensor = torch.rand(size)
    gpu_tensor = cpu_tensor.to(dev)
    cmp = noise.compare({"as posted": lambda: posted_transfer_loop(cpu_tensor, num_iterations, dev),
                         "kept on device": lambda: kept_on_device_loop(gpu_tensor, num_iterations)},
                        pairs=[("as posted", "kept on device")], max_time=max_time)
    return cmp, cmp.say("as posted", "kept on device", "measured here: the posted loop takes {r:.0f}× as long as "
                        "the loop that keeps its data on the GPU (median of paired rounds, {low:.0f}–{high:.0f}×)")


# === 2 · Python loops vs vector ops (seed example 2) ============================================


def posted_elementwise(a, b, out, count: int):
    """Seed example 2's inner loops, for the first `count` elements of `out` (never run it whole)."""
    cols = a.shape[1]
    for k in range(count):
        i, j = divmod(k, cols)
        out[i, j] = a[i, j] + b[j % 10]
    return out


def posted_broadcast(a, b):
    """Seed example 2's 'efficient' version as posted: a (5000, 2000) + b (10,) does not broadcast."""
    return a + b


def broadcast_view(a, b):
    """What the loop computes, as one op: column j gets b[j % 10]. Columns viewed as (cols/10, 10):
    b broadcasts over them without a copy (cols must be a multiple of b's length)."""
    rows, cols = a.shape
    return (a.view(rows, cols // b.shape[0], b.shape[0]) + b).view(rows, cols)


def broadcast_gather(a, b):
    """Any number of columns: gather b[j % 10] once (a vector of cols elements), then broadcast."""
    idx = torch.arange(a.shape[1], device=a.device) % b.shape[0]
    return a + b[idx]


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
        return (f"measured: {self.elements_timed} elements in {fmt_time(self.per_element.median)} "
                f"({fmt_time(self.seconds_per_element)} per element)\n"
                f"extrapolated (not run): {self.total_elements:,} elements "
                f"(5000 × 2000 × 100 passes) ≈ {self.total_seconds:,.0f} s ≈ {hours:.1f} h")


def extrapolate_elementwise(device=None, elements: int = 300, min_run_time: float = 0.2) -> Extrapolation:
    """Time `elements` passes of the per-element loop at the seed's shape and extrapolate to all of it.

    Only `elements` (at most 2,000) are ever run: the whole loop would take hours."""
    if isinstance(elements, bool) or not isinstance(elements, int) or not 1 <= elements <= 2000:
        raise ValueError(f"elements must be a whole number from 1 to 2000 (a few hundred is plenty), got {elements!r}.")
    dev = _device.pick(device)
    rows, cols = SEED_EXAMPLE2["size"]
    a = torch.rand(rows, cols, device=dev)
    b = torch.rand(10, device=dev)
    out = torch.empty_like(a)
    t = _measure(posted_elementwise, a, b, out, elements, label=f"{elements} elements", min_run_time=min_run_time,
                 max_time=5.0)
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


# === 3 · torch.cat in a loop (seed example 3) ====================================================
# Inputs are the pieces themselves: fn(*pieces), each (rows, cols).


def cat_in_a_loop(*pieces):
    """Seed example 3, 'inefficient': grow the result by one piece per pass (minus the `.cuda()`)."""
    result = pieces[0].new_empty(0)
    for tensor in pieces:
        result = torch.cat((result, tensor))
    return result


def preallocate_and_fill(*pieces):
    """Seed example 3, 'efficient': allocate the result once, copy each piece into its rows."""
    rows = sum(p.shape[0] for p in pieces)
    result = pieces[0].new_empty((rows, *pieces[0].shape[1:]))
    offset = 0
    for tensor in pieces:
        result[offset:offset + tensor.size(0)] = tensor
        offset += tensor.size(0)
    return result


def cat_once(*pieces):
    """Collect the pieces, then one `torch.cat`: one op, every byte copied once."""
    return torch.cat(pieces)


def cat_inputs(p: dict, device, dtype):
    return tuple(torch.randn(p["rows"], p["cols"], device=device, dtype=dtype) for _ in range(p["pieces"]))


def cat_peak_bytes(p: dict, dtype) -> int:
    """The pieces, the result and (cat in a loop) the previous result alive during each cat."""
    e = torch.empty(0, dtype=dtype).element_size()
    return 3 * p["pieces"] * p["rows"] * p["cols"] * e


def predicted_cat_bytes(n: int, piece_bytes: int) -> dict[str, int]:
    """Bytes written by each strategy for n pieces: the loop writes 1 + 2 + ... + n pieces."""
    return {"cat in a loop": piece_bytes * n * (n + 1) // 2, "preallocate + fill": piece_bytes * n,
            "cat once": piece_bytes * n}


CAT_LESSON = Lesson(
    key=KEY,
    title="Joining pieces: cat in a loop, pre-allocate, cat once",
    params=[Param("pieces", "pieces (n)", cpu=256, gpu=256, lo=1, hi=4096),
            Param("rows", "rows per piece", cpu=16, gpu=256, lo=1, hi=1 << 16),
            Param("cols", "columns", cpu=64, gpu=1024, lo=1, hi=1 << 16)],
    variants=[Variant("cat in a loop", cat_in_a_loop, "the seed's 'inefficient': n cats, quadratic bytes"),
              Variant("preallocate + fill", preallocate_and_fill, "the seed's 'efficient': n copies, linear bytes"),
              Variant("cat once", cat_once, "collect, then one cat: one op, linear bytes")],
    make_inputs=cat_inputs,
    peak_bytes=cat_peak_bytes,
    reduction=lambda p: 1,  # copies: exact
    baseline="cat in a loop",
    compare=("cat in a loop", "cat once"),
    odd_shapes=[{"pieces": 1, "rows": 1, "cols": 1}, {"pieces": 7, "rows": 3, "cols": 5},
                {"pieces": 33, "rows": 1, "cols": 17}],
)


def cat_bytes_table(ns=(8, 16, 32, 64, 128, 256), rows: int = 16, cols: int = 64) -> tuple[str, dict]:
    """Bytes each strategy copies, predicted (formula) and measured (trace on meta), for each n."""
    piece = rows * cols * 4
    out = [("n", "cat in a loop: predicted", "traced", "preallocate + fill", "cat once", "loop ÷ once")]
    measured: dict[str, list[int]] = {v.name: [] for v in CAT_LESSON.variants}
    for n in ns:
        tr = CAT_LESSON.traces({"pieces": n, "rows": rows, "cols": cols})
        pred = predicted_cat_bytes(n, piece)
        for name, t in tr.items():
            measured[name].append(t.copied_bytes)
        loop, once = measured["cat in a loop"][-1], measured["cat once"][-1]
        out.append((str(n), f"{pred['cat in a loop']:,}", f"{loop:,}", f"{measured['preallocate + fill'][-1]:,}",
                    f"{once:,}", f"{loop / once:.1f}"))
    return text_table(out, numbers=True), {"n": list(ns), **measured}


def growth_exponent(ns, values) -> float:
    """Slope of log(values) against log(n) over the last two points: 2 for n², 1 for linear."""
    return math.log(values[-1] / values[-2]) / math.log(ns[-1] / ns[-2])


def cat_verdict(device=None, pieces: int | None = None, max_time: float = 3.0):
    """(Comparison, sentence): the three strategies in paired rounds (the noise rule); the sentence states
    only what the rounds decide. The last round's timings are in `cmp.timings`. On a CPU at 64 pieces by
    default: at 256 one call of the loop takes 50-400 ms on a busy 2-core machine, and paired rounds of
    it would take a minute (the n² bytes at 256 pieces come from the trace instead)."""
    dev = _device.pick(device)
    p = {**CAT_LESSON.defaults(dev), "pieces": pieces or (CAT_LESSON.defaults(dev)["pieces"] if dev.type == "cuda" else 64)}
    CAT_LESSON.check(p, dev, torch.float32)
    pieces = cat_inputs(p, dev, torch.float32)
    cmp = noise.compare({v.name: (lambda fn=v.fn: fn(*pieces)) for v in CAT_LESSON.variants}, max_time=max_time,
                        pairs=[("cat in a loop", "cat once"), ("preallocate + fill", "cat once")])
    loop = cmp.say("cat in a loop", "cat once", "cat once is {r:.0f}× faster than cat in a loop",
                   tie="cat once and cat in a loop take the same time (within 5%)")
    fill = cmp.say("preallocate + fill", "cat once", "pre-allocate + fill takes {r:.1f}× the time of cat once",
                   tie="pre-allocate + fill takes the same time as cat once (within 5%)")
    return cmp, f"here, at {p['pieces']} pieces ({len(cmp.rounds['cat once'])} paired rounds): {loop}; {fill}"


def sweep_exponent(ns, medians, iqrs) -> noise.Estimate:
    """The time exponent between a sweep's last two points, with the range its IQRs allow (from the
    fastest plausible first point to the slowest plausible last one, and back): decided (noise rule)
    only when that range is within ±0.15, so no extra measurement is needed to say "not decided"."""
    (n0, n1), (m0, m1), (q0, q1) = ns[-2:], medians[-2:], iqrs[-2:]
    ends = [(max(m0 + a * q0 / 2, 1e-12), max(m1 + b * q1 / 2, 1e-12)) for a, b in ((1, -1), (0, 0), (-1, 1))]
    return noise.Estimate([growth_exponent([n0, n1], [t0, t1]) for t0, t1 in ends], abs_tol=0.15)


def cat_explorer(device=None) -> Explorer:
    return Explorer(CAT_LESSON, device)


explorer = cat_explorer


# --- transfers as explorer variants (a GPU is needed: refused with a sentence on a CPU) ----------


def _transfer_inputs(p: dict, device, dtype):
    n = p["megabytes"] * 2**20 // torch.empty(0, dtype=dtype).element_size()
    host = torch.rand(n, dtype=dtype)
    pinned = host.pin_memory() if transfers.pin_problem() is None else host
    return torch.empty(n, device=device, dtype=dtype), host, pinned


def copy_pageable(dst, host, pinned):
    """Copy from ordinary (pageable) host memory."""
    return dst.copy_(host)


def copy_pinned(dst, host, pinned):
    """Copy from an already pinned buffer, queued (non_blocking)."""
    return dst.copy_(pinned, non_blocking=True)


def pin_then_copy(dst, host, pinned):
    """Pin a fresh copy, then copy: the pin is a host copy of its own."""
    fresh = host if host.is_meta else host.pin_memory()  # traced on meta (the estimate): nothing to pin
    return dst.copy_(fresh, non_blocking=True)


def _transfer_validate(p: dict) -> None:
    why = transfers.problem()
    if why:
        raise ValueError(why)


def transfer_lesson() -> Lesson:
    """Built on demand, not at module level: a transfer's bytes cross the host link, which the
    roofline's memory term (device bandwidth) does not model, so `record --model` must not see it."""
    variants = [Variant("pageable", copy_pageable, "plain copy_ from pageable memory"),
                Variant("pinned", copy_pinned, "from a reused pinned buffer, non_blocking"),
                Variant("pin, then copy", pin_then_copy, "t.pin_memory().to(dev, non_blocking=True)")]
    if transfers.has_cuda() and transfers.pin_problem():  # a GPU, but no pinned memory: the pageable copy only
        variants = variants[:1]
    return Lesson(
        key=KEY + "_transfers",
        title="Host to device copies: pageable, pinned, pin-then-copy",
        params=[Param("megabytes", "MiB per copy", cpu=16, gpu=64, lo=1, hi=4096)],
        variants=variants,
        make_inputs=_transfer_inputs,
        peak_bytes=lambda p, dtype: 4 * p["megabytes"] * 2**20,
        reduction=lambda p: 1,
        baseline="pageable",
        validate=_transfer_validate,
    )


def transfer_explorer(device=None) -> Explorer:
    """Pageable vs pinned copies as variants (CUDA only: on a CPU every run is refused with a sentence).
    Where pinned memory is unavailable, it says why and offers the pageable copy alone."""
    lesson = transfer_lesson()
    if len(lesson.variants) == 1:
        print(transfers.pin_problem(), "The explorer times the pageable copy only.")
    return Explorer(lesson, device)


# === 4 · in-place ops =============================================================================


def out_of_place(a, b):
    return a + b


def in_place(a, b):
    return a.add_(b)


def into_buffer(a, b, out):
    return torch.add(a, b, out=out)


def inplace_traces(n: int = 1 << 20) -> str:
    """What in-place saves, from the trace: the allocation, not the bytes read and written."""
    a, b, out = (torch.empty(n, device="meta") for _ in range(3))
    rows = [("version", "op", "new allocation", "bytes read + written")]
    for name, fn, args in (("a + b", out_of_place, (a, b)), ("a.add_(b)", in_place, (a, b)),
                           ("torch.add(a, b, out=buf)", into_buffer, (a, b, out))):
        t = trace_ops(fn, *args)
        rows.append((name, t.compute_ops[0].name, _device.fmt_bytes(t.alloc_bytes), _device.fmt_bytes(t.accessed_bytes)))
    return text_table(rows)


def inplace_timings(device=None, n: int | None = None, min_run_time: float = 0.1) -> dict[str, timing.Timing]:
    """a + b (a fresh output each call) vs a.add_(b) vs add into a reused buffer, timed.

    On a CPU a fresh large output comes from the OS (mmap), and its first touch page-faults: the
    out=buf version separates the allocation from in-place-ness. On CUDA the caching allocator
    hands back the same block, so the three are close."""
    dev = _device.pick(device)
    n = n or (1 << 26 if dev.type == "cuda" else 1 << 23)
    _device.check_fits(4 * 4 * n, dev, "the in-place comparison")
    a, b, buf = torch.rand(n, device=dev), torch.rand(n, device=dev), torch.empty(n, device=dev)
    calls = {"a + b (new output)": (out_of_place, a, b), "torch.add(a, b, out=buf)": (into_buffer, a, b, buf),
             "a.add_(b) (in place)": (in_place, a, b)}
    return {name: _measure(fn, *args, label=name, min_run_time=min_run_time) for name, (fn, *args) in calls.items()}


def inplace_cause(device=None, n: int | None = None, max_time: float = 4.0):
    """Why a.add_(b) beats torch.add(a, b, out=buf) on a CPU although the op reads and writes the same bytes.

    Five calls in paired rounds (the noise rule): a fresh output (the allocation's cost); the in-place method; the same add written over its own
    input with out=a (is it the method, or where the result goes?); the add into a separate buffer; and a
    copy into that buffer (reads one array, writes one). A CPU cache is write-allocate: storing to a line
    it does not hold first reads that line from memory (unless the store is streamed), so a separate
    destination adds one array of reads; writing over an input that was just read does not. If that is
    the cause, out=buf costs ~4/3 of in-place (4 arrays of traffic against 3) and the copy costs about the
    in-place add (3 against 3) although it moves two thirds of the useful bytes. Returns (Comparison,
    sentences)."""
    dev = _device.pick(device)
    n = n or (1 << 26 if dev.type == "cuda" else 1 << 22)
    _device.check_fits(4 * 3 * n, dev, "the in-place comparison")
    a, b, buf = torch.rand(n, device=dev), torch.rand(n, device=dev), torch.empty(n, device=dev)
    fns = {"a + b (new output)": lambda: a + b, "a.add_(b)": lambda: a.add_(b),
           "torch.add(a, b, out=a)": lambda: torch.add(a, b, out=a),
           "torch.add(a, b, out=buf)": lambda: torch.add(a, b, out=buf), "buf.copy_(a)": lambda: buf.copy_(a)}
    pairs = [("torch.add(a, b, out=a)", "a.add_(b)"), ("torch.add(a, b, out=buf)", "torch.add(a, b, out=a)"),
             ("buf.copy_(a)", "a.add_(b)"), ("a + b (new output)", "torch.add(a, b, out=buf)")]
    cmp = noise.compare(fns, pairs=pairs, min_run_time=0.03, max_time=max_time)
    mib = _device.fmt_bytes(4 * n)
    lines = [f"{len(cmp.rounds['a.add_(b)'])} paired rounds, {mib} per array, {dev.type}:",
             "- " + cmp.say(*pairs[3], "a fresh output each call (a + b) takes {r:.2f}× adding into a reused buffer: "
                            "the allocation's cost" + (" (a large fresh block comes from the operating system and "
                                                       "page-faults on first touch)" if dev.type == "cpu" else ""),
                            tie="a fresh output each call (a + b) costs the same as a reused buffer (within 5%)"),
             "- " + cmp.say(*pairs[0], "the same add written over its own input (out=a) takes {r:.2f}× a.add_(b)",
                            tie="the same add written over its own input (out=a) is as fast as a.add_(b) (within 5%): "
                                "the method is not the difference, where the result goes is"),
             "- " + cmp.say(*pairs[1], "writing the result into a separate buffer (out=buf) takes {r:.2f}× writing it "
                            "over an input (out=a), for the same bytes read and written by the op",
                            tie="writing into a separate buffer costs the same as writing over an input (within 5%)"),
             "- " + cmp.say(*pairs[2], "a copy into that buffer (reads 1 array, writes 1) takes {r:.2f}× the in-place "
                            "add (reads 2, writes 1)",
                            tie="a copy into that buffer (reads 1 array, writes 1) takes as long as the in-place add "
                                "(reads 2, writes 1)")]
    return cmp, "\n".join(lines)


def inplace_reading(cmp) -> str:
    """What the four ratios of `inplace_cause` say about the cause, only from what they decided."""
    r_sep, r_copy = cmp.ratio("torch.add(a, b, out=buf)", "torch.add(a, b, out=a)"), cmp.ratio("buf.copy_(a)", "a.add_(b)")
    if not (r_sep.decided and r_copy.decided):
        return "The cause is " + noise.NOT_DECIDED.format(spread=min(max(r_sep.spread, r_copy.spread), 99.99))
    if r_sep.faster == "torch.add(a, b, out=a)" and r_copy.median > 0.85:
        return ("Read together: a separate destination costs about one more array of memory traffic than the op's "
                "own reads and writes, as write-allocate predicts (4/3 ≈ 1.33× when memory-bound; more where the "
                "buffer's lines must also be evicted from cache). In-place saves that traffic and the allocation, "
                "not the op's bytes.")
    alloc = cmp.ratio("a + b (new output)", "torch.add(a, b, out=buf)")
    if alloc.faster == "torch.add(a, b, out=buf)":
        return ("Here a separate destination costs no more than writing over an input: what in place saved on this "
                "run is the allocation, not memory traffic.")
    return ("Here neither the allocation nor a separate destination cost measurable time at this size: in place saved "
            "memory (no second array), not time.")


def version_counter_error() -> str:
    """Reproduce autograd's refusal: sigmoid saves its output for backward; mul_ then changes it."""
    x = torch.randn(4, requires_grad=True)
    y = x.sigmoid()
    before = y._version
    y.mul_(2)
    after = y._version
    try:
        y.sum().backward()
    except RuntimeError as err:
        first = str(err).split(":")[0].split("\n")[0]  # the sentence; the tensor details vary by version
        return f"y._version {before} -> {after} after y.mul_(2); backward raised:\n  {first}"
    return "backward did not raise"


def expanded_write_error() -> str:
    """Writing in place into an expanded (stride-0) view: many elements share one location."""
    b = torch.zeros(4)
    try:
        b.expand(3, 4).add_(1)
    except RuntimeError as err:
        return str(err).splitlines()[0]
    return "no error"


def normalise_in_place(x):
    """Looks harmless, changes the caller's tensor: a second call sees different data."""
    x -= x.mean()
    x /= x.std()
    return x


def aliasing_demo() -> str:
    data = torch.arange(1.0, 6.0)
    first = normalise_in_place(data).clone()
    return (f"data after one call: {data.tolist()}\n"
            f"the caller's tensor was overwritten: {not torch.equal(data, torch.arange(1.0, 6.0))}; "
            f"first result kept: {[round(v, 3) for v in first.tolist()]}")


# === 5 · no_grad and inference_mode ===============================================================


def mlp(width: int = 512, depth: int = 3) -> nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def forward_with_grad(model, x):
    return model(x)


def forward_no_grad(model, x):
    with torch.no_grad():
        return model(x)


def forward_inference_mode(model, x):
    with torch.inference_mode():
        return model(x)


GRAD_MODES = {"with autograd": forward_with_grad, "no_grad": forward_no_grad, "inference_mode": forward_inference_mode}


def saved_bytes(batch: int = 256, width: int = 512, depth: int = 3) -> dict[str, int]:
    """Bytes autograd keeps for backward in one forward, per mode (lesson 02's ledger, on meta)."""
    model = mlp(width, depth).to("meta")
    x = torch.empty(batch, width, device="meta")
    return {name: memory.ledger(fn, model, x).total_bytes for name, fn in GRAD_MODES.items()}


def grad_mode_timings(device=None, batch: int | None = None, width: int = 512, depth: int = 3,
                      min_run_time: float = 0.1) -> dict[str, timing.Timing]:
    dev = _device.pick(device)
    batch = batch or (4096 if dev.type == "cuda" else 64)
    model = mlp(width, depth).to(dev)
    x = torch.randn(batch, width, device=dev)
    return {name: _measure(fn, model, x, label=name, min_run_time=min_run_time) for name, fn in GRAD_MODES.items()}


def grad_modes_agree() -> float:
    """The three modes compute the same output (worst relative error against float64)."""
    model = mlp(64, 2)
    x = torch.randn(5, 64)
    ref = mlp(64, 2).double()(x.double())
    return max(rel_error(fn(model, x), ref) for fn in GRAD_MODES.values())


# === 6 · memory layout: channels_last vs contiguous NCHW ==========================================


def convnet(channels: int = 32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(2 * channels, 2 * channels, 3, padding=1), nn.ReLU())


def layout_inputs(device=None, batch: int | None = None, size: int | None = None, dtype=torch.float32):
    dev = _device.pick(device)
    batch = batch or (64 if dev.type == "cuda" else 4)  # CPU: small enough for paired rounds in a few seconds
    size = size or (64 if dev.type == "cuda" else 16)
    x = torch.randn(batch, 3, size, size, device=dev, dtype=dtype)
    return x


def layout_strides(batch: int = 2, size: int = 8) -> str:
    """What channels_last is: the same shape, other strides. A convolution's output is channels_last when its
    input or its weight is: cudnn_conv_suggest_memory_format (ATen's ConvUtils.h) on CUDA, and the same rule
    on this CPU's backends (_determine_backend_memory_format), shown by the strides below."""
    x = torch.randn(batch, 3, size, size)
    cl = torch.channels_last
    lines = []
    for name, x_cl, w_cl in (("contiguous (NCHW)", False, False), ("channels_last (NHWC)", True, True),
                             ("input NHWC, weight NCHW", True, False), ("input NCHW, weight NHWC", False, True)):
        m = convnet(4).to(memory_format=cl) if w_cl else convnet(4)
        xi = x.contiguous(memory_format=cl) if x_cl else x
        y = m(xi)
        out = "channels_last" if y.is_contiguous(memory_format=cl) and not y.is_contiguous() else "NCHW"
        lines.append(f"{name:24s} input strides {xi.stride()}; output strides {y.stride()} ({out})")
    ref = convnet(4).double()(x.double())
    err = rel_error(convnet(4).to(memory_format=cl)(x.contiguous(memory_format=cl)), ref)
    lines.append(f"channels_last output vs float64 NCHW reference: {'✓' if err < 1e-5 else '✗'} (within 1e-5)")
    return "\n".join(lines)


def layout_timings(device=None, dtype=torch.float32, min_run_time: float = 0.1, **kw) -> dict[str, timing.Timing]:
    """The small convnet's forward, NCHW vs channels_last, model and input in the same layout."""
    dev = _device.pick(device)
    x = layout_inputs(dev, dtype=dtype, **kw)
    out = {}
    with torch.no_grad():
        for name, fmt in (("contiguous NCHW", torch.contiguous_format), ("channels_last", torch.channels_last)):
            m = convnet().to(dev, dtype).to(memory_format=fmt)
            out[name] = _measure(m, x.contiguous(memory_format=fmt), label=name, min_run_time=min_run_time)
    return out


def grad_mode_verdict(device=None, batch: int | None = None, width: int = 512, depth: int = 3,
                      max_time: float = 4.0):
    """(Comparison, sentence): a forward with autograd against inference_mode, paired rounds."""
    dev = _device.pick(device)
    batch = batch or (4096 if dev.type == "cuda" else 64)
    model = mlp(width, depth).to(dev)
    x = torch.randn(batch, width, device=dev)
    cmp = noise.compare({name: (lambda fn=fn: fn(model, x)) for name, fn in GRAD_MODES.items()},
                        pairs=[("with autograd", "inference_mode")], max_time=max_time)
    return cmp, cmp.say("with autograd", "inference_mode",
                        "here inference_mode is {r:.2f}× the speed of a forward with autograd: skipping autograd's "
                        "bookkeeping saves a measurable share of the time at this size",
                        tie="here inference_mode and a forward with autograd take the same time (within 5%): next "
                            "to the matmuls, autograd's bookkeeping is small at this size")


def layout_verdict(device=None, dtype=torch.float32, max_time: float = 4.0, **kw):
    """(Comparison, sentence): the small convnet's forward in NCHW against channels_last, paired rounds."""
    dev = _device.pick(device)
    x = layout_inputs(dev, dtype=dtype, **kw)
    fns = {}
    for name, fmt in (("contiguous NCHW", torch.contiguous_format), ("channels_last", torch.channels_last)):
        m, xi = convnet().to(dev, dtype).to(memory_format=fmt), x.contiguous(memory_format=fmt)
        fns[name] = lambda m=m, xi=xi: _no_grad_call(m, xi)
    cmp = noise.compare(fns, pairs=[("contiguous NCHW", "channels_last")], max_time=max_time)
    r = cmp.ratio("contiguous NCHW", "channels_last")
    word = {"channels_last": "channels_last wins: the seed's 'channel-first helps' does not hold on this device",
            "contiguous NCHW": "NCHW wins for this network on this device: the seed's advice holds here; on GPUs "
                               "with tensor cores, measure in float16/bfloat16 before trusting it"}
    return cmp, r.say("here channels_last runs at {r:.2f}× NCHW's speed: " + word.get(r.faster or "", ""),
                      tie="here neither layout wins (within 5%): channel-first gives no advantage on this device "
                          "either")


def _no_grad_call(m, x):
    with torch.no_grad():
        return m(x)


# === summary =======================================================================================

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


# === recorded results ==============================================================================

CAT_NS_CPU = [16, 32, 64, 128, 256]
CAT_NS_GPU = [16, 32, 64, 128, 256, 512]


def record(device, quick: bool = False) -> dict:
    """This lesson's recorded results: the cat strategies at n = 256 and swept over n, the in-place
    and grad-mode timings, the per-element extrapolation and (CUDA) host<->device bandwidths."""
    dev = torch.device(device)
    t = 0.05 if quick else 0.3
    pk = roofline.measure_peaks(dev)
    out = {}
    # quick: the bar's shape (256 pieces) at the CPU size, on any device
    head = CAT_LESSON.run(CAT_LESSON.defaults("cpu" if quick else dev), dev, min_run_time=t)
    out["headline"] = results.run_to_dict(head, pk)
    ns = (CAT_NS_GPU if dev.type == "cuda" else CAT_NS_CPU)[: 2 if quick else None]
    sw = CAT_LESSON.sweep("pieces", ns, None, dev, min_run_time=t / 2, progress=False)
    out["sweeps"] = {"pieces": results.sweep_to_dict(sw)}
    inplace = inplace_timings(dev, n=1 << 20 if quick else None, min_run_time=t)
    out["inplace"] = {k: {"median": v.median, "iqr": v.iqr} for k, v in inplace.items()}
    ex = extrapolate_elementwise(dev, elements=100 if quick else 300, min_run_time=t)
    out["elementwise"] = {"elements_timed": ex.elements_timed, "per_element": ex.seconds_per_element,
                          "extrapolated_total_s": ex.total_seconds, "kind": "extrapolated from the timed elements"}
    if dev.type == "cuda" and transfers.problem(dev) is None:
        out["transfers"] = {b.label: {"gbs": b.gbs, "median": b.timing.median, "bytes": b.nbytes}
                            for b in transfers.measure_all(4 * 2**20 if quick else 64 * 2**20, dev, t)}
        ex1 = seed_example1_timings(dev, size=(1000, 1000) if quick else None, min_run_time=t)
        out["seed_example1"] = {k: {"median": v.median, "iqr": v.iqr} for k, v in ex1.items()}
    return out


def targets(device, section: dict) -> list[dict]:
    """This lesson's bars, from its recorded section (see record.targets)."""
    out = []
    head = section.get("headline")
    if head and head["params"].get("pieces") == 256:
        v = head["variants"]
        ratio = v["cat once"]["bytes"] / v["cat in a loop"]["bytes"]
        out.append({"name": "06 cat once / cat in a loop, bytes at n = 256 (trace)", "value": ratio,
                    "bar": "<= 2/n = 0.0078", "ok": ratio <= 2 / 256})
        speed = v["cat in a loop"]["median"] / v["cat once"]["median"]
        out.append({"name": "06 cat once speed-up over cat in a loop at n = 256", "value": speed,
                    "bar": ">= 10 (CPU)", "ok": speed >= 10 if torch.device(device).type == "cpu" else None})
    ex1 = section.get("seed_example1")
    if ex1:
        r = ex1["as posted"]["median"] / ex1["kept on device"]["median"]
        out.append({"name": "06 seed example 1: as posted / kept on device", "value": r, "bar": ">= 2 (GPU)",
                    "ok": r >= 2})
    tr = section.get("transfers")
    if tr:
        pinned, pageable = tr.get("host → device, pinned"), tr.get("host → device, pageable")
        if pinned and pageable:
            r = pinned["gbs"] / pageable["gbs"]
            out.append({"name": "06 pinned / pageable host→device bandwidth", "value": r, "bar": ">= 1.5 (GPU)",
                        "ok": r >= 1.5})
    return out


# === exercise ======================================================================================
# A data-preparation step: scale each piece by its own largest magnitude and join the pieces. The
# starter reads every scale on the host (.item(): a sync per piece) and grows the result with
# torch.cat in the loop (bytes copied grow as n²). Rewrite it with no host sync and bytes copied
# linear in the number of pieces, giving the same values.


def exercise_starter(*pieces):
    out = pieces[0].new_empty(0, pieces[0].shape[1])
    for p in pieces:
        scale = p.abs().max().item()  # a host sync per piece
        out = torch.cat([out, p / max(scale, 1e-6)])  # re-copies everything so far
    return out


def exercise_reference(*pieces):
    return torch.cat([p.double() / p.double().abs().max().clamp_min(1e-6) for p in pieces])


EXERCISE_SHAPES = [(8, 4, 16), (5, 3, 7), (1, 1, 1), (17, 2, 33)]  # (pieces, rows, cols)
EXERCISE_GROWTH = (16, 64)  # pieces counts for the growth checks
EXERCISE_PIECE = (4, 32)


def _exercise_pieces(n, rows, cols, gen, device="cpu"):
    return tuple((torch.randn(rows, cols, generator=gen) * (1 + i % 3)).to(device) for i in range(n))


def check_exercise(fn) -> Verdict:
    """Grade the rewrite: float64 correctness at odd shapes, zero host syncs inside the loop (the count
    must not grow with the number of pieces), and bytes copied linear in n (trace)."""
    v = Verdict(f"Exercise 06 ({getattr(fn, '__name__', 'your function')})")
    if not callable(fn):
        v.check("is a function", False, f"got {type(fn).__name__}; pass your function itself, e.g. my_prepare")
        return v
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for n, rows, cols in EXERCISE_SHAPES:
        pieces = _exercise_pieces(n, rows, cols, gen)
        ref = exercise_reference(*pieces)  # from the pieces before the reader's code runs
        out, problem = call_for_tensor(fn, *pieces, shape=ref.shape)
        if problem:
            v.check(f"runs and returns ({n}·rows, cols) for {n} pieces of {rows} × {cols}", False, problem)
            return v
        worst = max(worst, rel_error(out, ref))
    v.check(f"matches the float64 reference at {len(EXERCISE_SHAPES)} shapes (odd ones included)", worst < 1e-5,
            "NaN or inf in the output" if worst == math.inf else (f"worst relative error {worst:.1e}" if worst >= 1e-5 else ""))

    counts = {}
    for n in EXERCISE_GROWTH:
        pieces = _exercise_pieces(n, *EXERCISE_PIECE, gen)
        report, problem = call_reader(lambda *p: syncs(fn, *p), *pieces)
        if problem:
            v.check("can be run under the sync detector", False, problem)
            return v
        counts[n] = report
    a, b = (counts[n] for n in EXERCISE_GROWTH)
    lines = ", ".join(f"{k} ×{c}" for k, c in b.lines().items())
    v.check("no host sync inside the loop (the count does not grow with the pieces)",
            len(b.syncs) <= len(a.syncs) and len(b.syncs) <= 1,
            f"{len(a.syncs)} syncs for {EXERCISE_GROWTH[0]} pieces, {len(b.syncs)} for {EXERCISE_GROWTH[1]}: {lines}"
            if b.syncs else "")

    copied = {}
    for n in EXERCISE_GROWTH:
        def inputs(device, n=n):
            g = torch.Generator().manual_seed(n)
            return _exercise_pieces(n, *EXERCISE_PIECE, g, device)

        t, _where, problem = analyse_reader(lambda *p: trace_ops(fn, *p), inputs)
        if problem:
            v.check("can be traced", False, problem)
            return v
        copied[n] = t.copied_bytes
    growth = copied[EXERCISE_GROWTH[1]] / max(copied[EXERCISE_GROWTH[0]], 1)
    linear = EXERCISE_GROWTH[1] / EXERCISE_GROWTH[0]
    v.check(f"bytes copied grow linearly with the pieces (×{linear:g} pieces → at most ×{1.25 * linear:g} bytes)",
            growth <= 1.25 * linear,  # 25% slack for a fixed-size extra copy; quadratic growth is ×16
            f"×{growth:.1f} ({_device.fmt_bytes(copied[EXERCISE_GROWTH[0]])} → "
            f"{_device.fmt_bytes(copied[EXERCISE_GROWTH[1]])})")
    if _device.has_cuda() and not getattr(torch.cuda, "_course_simulated", None):
        v.on_gpu(*_gpu_speed_check(fn))
    else:
        v.on_gpu("at least 3× faster than the starter at 256 pieces", None)
    return v


# On a GPU the exercise is also timed, at 256 pieces of 256 × 1024 float32 (1 MiB each). Model (datasheet
# bandwidth, 5 µs per launched op as roofline.ASSUMED_LAUNCH, one launch latency per sync): the starter's
# cats write 256·257/2 MiB ≈ 34.5 GB and read as much, ≥ 20 ms on an H100 (3.35 TB/s), ≥ 215 ms on a T4
# (320 GB/s), plus ~5 launches and a sync per piece (~7 ms); a solution launches ~4 ops per piece and one cat
# (~5 ms of launches, 0.5 GB of bytes). Modelled ratio ≈ 5× on an H100, ≈ 40× on a T4; the bar, 3×, leaves
# a 1.6× margin below the H100's figure.
GPU_SPEEDUP_BAR = 3.0


def _gpu_speed_check(fn):
    gen = torch.Generator().manual_seed(2)
    pieces = _exercise_pieces(256, 256, 1024, gen, "cuda")
    slow = timing.measure(exercise_starter, *pieces, max_time=10).median
    timed, problem = call_reader(lambda: timing.measure(fn, *pieces, max_time=10))
    name = f"at least {GPU_SPEEDUP_BAR:g}× faster than the starter at 256 pieces"
    if problem:
        return name, False, problem
    return name, slow / timed.median >= GPU_SPEEDUP_BAR, f"{slow / timed.median:.1f}×"


__all__ = ["KEY", "CAT_LESSON", "transfer_lesson", "posted_transfer_loop", "copy_only_loop", "kept_on_device_loop",
           "transfer_syncs", "sync_table", "hidden_syncs_example", "hidden_syncs_fixed", "seed_example1_model",
           "seed_example1_model_table", "seed_example1_timings", "posted_elementwise", "posted_broadcast",
           "broadcast_view", "broadcast_gather", "broadcast_error", "ops_per_element", "extrapolate_elementwise",
           "expand_vs_repeat", "cat_in_a_loop", "preallocate_and_fill", "cat_once", "predicted_cat_bytes",
           "cat_bytes_table", "growth_exponent", "cat_explorer", "explorer", "transfer_explorer", "inplace_traces",
           "inplace_timings", "version_counter_error", "expanded_write_error", "normalise_in_place", "aliasing_demo",
           "saved_bytes", "grad_mode_timings", "grad_modes_agree", "layout_strides", "layout_timings",
           "summary_table", "CLAIMS", "record", "targets", "exercise_starter", "check_exercise",
           "seed_example1_verdict", "cat_verdict", "sweep_exponent", "inplace_cause", "inplace_reading",
           "grad_mode_verdict", "layout_verdict"]
