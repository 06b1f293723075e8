"""Look inside: the per-op overhead measured here, the three regimes (roofline bounds per variant),
the FLOPs and bytes each variant moves, which GEMM ran, the GPU's kernels and launch latency, and
Linear's achieved FLOP rate."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import grading, noise, roofline, timing
from .. import device as _device
from ..display import text_table
from ..timing import fmt_time
from .lessons import LESSON, THREAD_SHAPE, TRAIN_LESSON, _measure, _shape, make_inputs


# --- per-op overhead, measured here ---------------------------------------------------------------


def overhead_timings(device=None, min_run_time: float = 0.1) -> list[timing.Timing]:
    """What one tiny op costs here, where the work is nothing and only the overhead remains."""
    dev = timing.timing_device(device)
    return [_measure(fn, *args, label=label, min_run_time=min_run_time, device=dev)
            for label, fn, args in overhead_cases(dev)]


def overhead_cases(dev) -> list[tuple[str, object, tuple]]:
    """(label, fn, args) of `overhead_timings`: tiny ops, and F.linear against the module call on the
    same parameters."""
    one = torch.zeros(1, device=dev)
    row = torch.zeros(1, 1, device=dev)
    lin = nn.Linear(1, 1).to(dev)

    def add_no_grad(a):
        with torch.no_grad():
            return a + a

    def forward_backward(m, x):
        m(x).sum().backward()

    xg = torch.zeros(1, 1, device=dev, requires_grad=True)
    # F.linear gets the module's own parameters (requiring grad, so autograd records both calls alike):
    # the difference between the two is the module call alone.
    cases = [
        ("1-element add", torch.add, (one, one)),
        ("1-element add under no_grad()", add_no_grad, (one,)),
        ("F.linear, 1×1 (the module's parameters)", F.linear, (row, lin.weight, lin.bias)),
        ("nn.Linear(1, 1) module call", lin, (row,)),
        ("nn.Linear(1, 1) forward + backward", forward_backward, (lin, xg)),
    ]
    return cases


def overhead_summary(ts: list[timing.Timing]) -> str:
    """The overhead facts, as measured by `overhead_timings` (in its order); each comparison goes
    through the noise rule (undecided when the two timings' spreads overlap too much)."""
    add, add_ng, lin_fn, lin_mod, fwd_bwd = ts
    ng = noise.from_timings(add_ng, add)
    mod = noise.from_timings(lin_mod, lin_fn)
    return (f"A 1-element add costs {fmt_time(add.median)}: that is the per-op overhead, with no work to do.\n"
            "Wrapping it in `with torch.no_grad():`: " + ng.say(
                "{r:.2f}× the add alone (entering and leaving the context is not free)",
                tie="about the same as the add alone") + ".\n"
            "nn.Linear as a module, against F.linear on the same parameters (both requiring grad): " + mod.say(
                "{r:.1f}× (the module call's Python machinery)", tie="no measurable difference") + ".\n"
            f"A tiny forward + backward costs {fmt_time(fwd_bwd.median)}, about {fwd_bwd.median / add.median:.0f} "
            "adds' worth (a count of ops, not a comparison).")


def peaks(device=None, dtype=torch.float32) -> roofline.Peaks:
    """The device's measured peaks; their launch cost is the measured per-op overhead, on a CPU too."""
    return roofline.measure_peaks(timing.timing_device(device), dtype)


def regime_terms(work: roofline.Work, peaks_: roofline.Peaks) -> dict[str, float]:
    """The three lower bounds, in seconds; the largest is the floor, named by `peaks_.regime(work)`."""
    return peaks_.terms(work)


def regime_table(params: dict, device=None, dtype=torch.float32, run=None, training: bool = False) -> str:
    """Per variant: launches, FLOPs, bytes, the three bounds, the regime, and (with a run) time / floor."""
    lesson = TRAIN_LESSON if training else LESSON
    pk = peaks(device, dtype)
    rows = [("variant", "launches", "MFLOP", "MiB moved", "compute", "memory", "overhead", "regime",
             *(("measured", "× floor") if run else ()))]
    below = False
    for name, w in lesson.work(params, dtype).items():
        t = regime_terms(w, pk)
        # the bytes the memory bound divides: on a CUDA GPU without the addmm bias copy (cuBLASLt's epilogue)
        row = [name, str(w.launches), f"{w.flops / 1e6:.1f}", f"{w.bytes_on(pk.cuda) / 2**20:.2f}",
               *(fmt_time(v) for v in t.values()), pk.regime(w)]
        if run:
            med = run.timings[name].median if name in run.timings else float("nan")
            beaten = med < pk.floor(w)  # not a ratio under 1 stated as a fact: what it means, below the table
            row += [fmt_time(med), "beaten" if beaten else f"{med / pk.floor(w):.1f}"]
            below = below or beaten
        rows.append(tuple(row))
    note = f"\n'beaten': the point ran faster than its floor: {roofline.BEATEN}." if below else ""
    return text_table(rows, numbers=True) + note


def regimes(params: dict, device=None, dtype=torch.float32, training: bool = False) -> dict[str, str]:
    """{variant: "compute" | "memory" | "overhead"} at `params` on this device (toolkit classifier)."""
    lesson = TRAIN_LESSON if training else LESSON
    pk = peaks(device, dtype)
    return {n: pk.regime(w) for n, w in lesson.work(params, dtype).items()}


def gpu_launch_latency(device="cuda", n: int = 200) -> dict[str, float] | None:
    """On a GPU: the host's cost of issuing a tiny op (harness, back to back) and the GPU time one
    tiny op spans between CUDA events. None without a GPU."""
    dev = torch.device(device)
    if dev.type != "cuda" or not _device.has_cuda():
        return None
    one = torch.zeros(1, device=dev)
    issue = timing.measure(torch.add, one, one, label="issue", min_run_time=0.2, device=dev).median
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spans = []
    for _ in range(n):
        torch.cuda.synchronize(dev)
        start.record()
        torch.add(one, one)
        end.record()
        end.synchronize()
        spans.append(start.elapsed_time(end) / 1e3)
    spans.sort()
    return {"issue (host, s per op)": issue, "event span of one op (GPU, s)": spans[len(spans) // 2]}


def work_comparison(params: dict = THREAD_SHAPE) -> str:
    """Linear against PseudoLinear at `params`: FLOPs and bytes from their traces, on a CPU (addmm copies
    the bias into its output) and on a CUDA GPU (cuBLASLt's epilogue adds it: no copy), in words that
    follow the numbers."""
    w = LESSON.work(params)
    lin, pseudo = w["Linear"], w["PseudoLinear"]

    def words(cuda):
        ratio = pseudo.bytes_on(cuda) / lin.bytes_on(cuda)
        more = ("more bytes than" if ratio > 1.05 else "fewer bytes than" if ratio < 0.95
                else "about as many bytes as")
        return f"PseudoLinear reads and writes {more} Linear ({ratio:.2f}×)"

    return (f"Linear: {lin.flops / 1e9:.2f} GFLOP; PseudoLinear: {pseudo.flops / 1e9:.2f} GFLOP (the trace counts "
            "matmul FLOPs).\n"
            f"On a CPU, Linear moves {lin.bytes_on(False) / 2**20:.1f} MiB: addmm first copies the bias into its "
            f"output ({lin.lt_bias_bytes / 2**20:.1f} MiB of the total, written and read back), then adds the "
            f"product onto it. PseudoLinear moves {pseudo.bytes / 2**20:.1f} MiB. {words(False)}.\n"
            f"On a CUDA GPU, addmm with a 1-D bias goes to cuBLASLt, whose epilogue adds the bias as it writes the "
            f"output (no copy): Linear moves {lin.bytes_on(True) / 2**20:.1f} MiB, and {words(True)}.\n"
            "Either way Linear does all the FLOPs.")


# --- the Strassen claim: which GEMM ran ------------------------------------------------------------


def gemm_evidence(params: dict = THREAD_SHAPE) -> str:
    """Linear's GEMMs from its trace (on meta): the aten op, its shape and its FLOPs."""
    t = LESSON.traces({**params, "layers": 1})["Linear"]
    lines = []
    for op in t.gemms:
        b, m, n, k = op.gemm
        lines.append(f"{op.name}: ({m} × {k}) @ ({k} × {n}), {op.flops:,} FLOPs = 2·batch·width², "
                     "the schoolbook count")
    return "\n".join(lines) or "no GEMM in the trace"


def gpu_kernels(params: dict, device="cuda") -> dict[str, list[str]] | None:
    """The kernels one forward of each variant launches (profiler), or None without a GPU or
    without a profiler that sees CUDA."""
    from ..trace import kernels, profiler_sees_cuda

    dev = torch.device(device)
    if dev.type != "cuda" or not _device.has_cuda() or not profiler_sees_cuda():
        return None

    full = LESSON.check({**params, "layers": 1}, dev, torch.float32)
    inputs = make_inputs(full, dev, torch.float32)
    return {v.name: kernels(v.fn, *inputs) for v in LESSON.variants}


def achieved_rate(run, name: str = "Linear") -> float:
    """FLOP/s a variant achieved in a run, counting the schoolbook FLOPs of its trace."""
    return run.work[name].flops / run.timings[name].median


def rate_summary(run, peaks_: roofline.Peaks) -> str:
    """Linear's achieved FLOP rate (schoolbook count) against the measured peak of a large mm and, on
    a GPU the datasheet knows, against the hardware's peak; what that says about the algorithm."""
    rate = achieved_rate(run)
    t = run.timings["Linear"]
    # the rate within the timing's IQR: fastest and slowest the measurement allows
    est = noise.Estimate([run.work["Linear"].flops / max(t.median + t.iqr / 2, 1e-12), rate,
                          run.work["Linear"].flops / max(t.median - t.iqr / 2, 1e-12)])
    precision = f" ({grading.precision_label(run.device)})" if run.device == "cuda" else ""
    lines = [f"Linear at {_shape(run.params)}: {rate / 1e9:,.0f} GFLOP/s counted as 2·batch·width² FLOPs a layer{precision}; "
             f"the measured peak of a large mm is {peaks_.flops / 1e9:,.0f} GFLOP/s ("
             + (f"{rate / peaks_.flops:.0%} of it)." if rate <= peaks_.flops else
                "Linear beat it: the peak measurement was beaten, see below).")]
    sheet = None
    if run.device == "cuda" and _device.has_cuda():
        sheet = roofline.datasheet(_device.describe(torch.device("cuda")).name, torch.float32)
    if sheet:
        named = sheet.source.split(";")[0].removeprefix("datasheet (").rstrip(")")  # "H200: 67 TFLOP/s fp32, ..."
        lines.append(f"The datasheet peak is {sheet.flops / 1e9:,.0f} GFLOP/s ({named}; a model, not a measurement): "
                     f"{rate / sheet.flops:.0%} of what the hardware can do with the schoolbook count.")
    top = sheet.flops if sheet else peaks_.flops
    if not est.decided:
        lines.append("Whether Linear runs above the peak: " + est.not_decided())
    elif est.high <= 1.1 * top:
        lines.append("No sign of fewer multiplications: the schoolbook count runs at or below the peak.")
    elif est.low > 1.1 * top:
        lines.append("Above the peak: the peak measurement (the fastest of many samples of a large mm) was beaten: a "
                     "busy machine interrupts a large call more often than a short one, this GEMM's shape may run "
                     "faster, or the library does fewer multiplications here; rerun on a quieter machine to tell.")
    else:
        lines.append("Within the timing's spread of the peak: no evidence either way; rerun on a quieter machine.")
    return "\n".join(lines)
