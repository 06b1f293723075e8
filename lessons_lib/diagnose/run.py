"""The run and the findings: prepare the step, collect its evidence once, ask each detector, write the Report.

`diagnose` (re-exported by the package, whose docstring says what it does) is here; the package's __init__ keeps
the map and the callable-package trick only.
"""
from __future__ import annotations

from ..roofline import ASSUMED_LAUNCH
from ..syncs import BLIND_SPOTS as SYNC_BLIND_SPOTS, HostSync
from .report import Report, a_gpu

GPUS_NOTE = "T4, L4, V100, A10G, A100, H100, H200 (roofline.DATASHEET)"

CHECKED = (  # (what, lesson, the kinds it covers)
    ("broadcast matmul copies", "01", ("broadcast matmul",)),
    ("contractions by broadcast", "01", ("contraction by broadcast",)),
    ("saved for backward", "02", ("expanded copy kept for backward", "attention matrix kept for backward")),
    ("small GEMMs in a loop", "03", ("GEMMs in a Python loop",)),
    ("elementwise chains", "04", ("elementwise chain",)),
    ("launch-bound step", "04/05", ("launch-bound step",)),
    ("optimizer for loop", "04", ("for-loop optimizer",)),
    ("capture hazards", "05", ("capture hazard",)),
    ("host syncs", "06", ("host sync",)),
    ("pageable transfers", "06", ("pageable transfer",)),
    ("row-by-row gather", "06", ("row-by-row gather",)),
    ("loss per time step", "06", ("loss per time step",)),
    ("cat in a loop", "06", ("cat in a loop",)),
    ("allocation churn", "06", ("allocation churn",)),
    ("graph for nothing", "06", ("graph built for nothing",)),
    ("graph kept alive", "07", ("graph kept alive",)),
)

BLIND_SPOTS = (
    "it sees what reaches PyTorch's dispatcher in one call: time in Python around the ops, data loading (a "
    "DataLoader's workers, the disk), C++ extensions, custom CUDA or Triton kernels and NCCL collectives are not "
    "seen",
    "on meta every value is a stand-in (.item() returns 0, a boolean mask selects everything): code whose control "
    "flow reads values may take another path than on the GPU",
    f"costs are a roofline model of the named GPU (datasheet peaks, {ASSUMED_LAUNCH['T4'] * 1e6:g} µs of host time "
    "per launch assumed): lower bounds, not measurements; kernels that do not fill the GPU, and cuBLAS's own "
    "choices, are not modelled",
    "a cat, a list or a total that grows across calls (outside the step) is seen only when one call runs two "
    "steps or more; a graph kept alive, only when it outlives the call",
    "memory is counted as the ops ask for it (new storages, what autograd saves), not as the caching allocator "
    "holds it: fragmentation and a CUDA graph's private pool are not seen",
    "a torch.compile'd function runs eagerly here and is priced as compiled (its GEMMs, one kernel between them), "
    "not as Inductor's own kernels; the backward of a line is counted at the line that calls backward",
)


def diagnose(fn, *inputs, device=None, gpu: str = "T4", graphs: bool = False, timed: bool = False,
             **kwargs) -> Report:
    """A Report of the pitfalls in one call of `fn(*inputs, **kwargs)` (or, for an nn.Module, its forward on
    `inputs` and a backward of the sum of its outputs), run on copies of everything the step reaches.

    device: None or "meta" (shape-only copies: nothing runs for real, nothing is allocated), "cpu" or "cuda"
    (real copies where your objects live: the step runs once for real, on them). gpu: whose datasheet prices
    the evidence (GPUS_NOTE). graphs: also run graph_check (a second run, on fresh copies) for CUDA-graph capture
    hazards. timed: also time the step with the course's harness, on fresh copies (never on meta). A step's own
    keyword arguments named device, gpu, graphs or timed must be passed positionally.
    A step that cannot run gets a report that says why on its first line; an error the step raises itself
    comes back to you as it would from your own call, with your traceback.
    """
    from .. import sandbox, step_call
    from ..reach import Uncopyable
    from .collect import collect
    from .costs import Gpu, dominant_dtype
    from .inputs import _device_type, prepare
    from .outcome import judge

    if not isinstance(gpu, str):
        raise ValueError(f"gpu={gpu!r}: name a GPU, one of {GPUS_NOTE}.")
    Gpu.of(gpu)  # refuse an unknown GPU before running anything
    where = "meta" if device is None else _device_type(device)
    problem = step_call.problem(fn, inputs, kwargs)
    if problem is None:
        try:
            first = prepare(fn, inputs, kwargs, device, step_call.names(fn, len(inputs)))
        except Uncopyable as err:
            problem = str(err)
    if problem is not None:
        return Report(gpu=Gpu.of(gpu).name, ran_on=where, not_run=problem)
    with sandbox.sandbox(meta=first.device == "meta", home=first.home, shared=first.shared) as box:
        ev = collect(first, cuda_view=first.device != "cpu")
    how, why = judge(ev, box, first)
    if how == "not run":
        return Report(gpu=Gpu.of(gpu).name, ran_on=where, not_run=why)
    notes = list(first.notes) + box.notes()
    report = _findings(ev, Gpu.of(gpu, dominant_dtype(ev)), notes)
    report.stopped = why
    if how != "ran":  # a backward that never ran and graphs still alive are the stop's doing, not the step's
        report.findings = [f for f in report.findings if f.kind not in ("graph built for nothing", "graph kept alive")]
    if graphs and how == "ran":
        from .detect_graphs import capture_hazards

        fresh = prepare(fn, inputs, kwargs, device, step_call.names(fn, len(inputs)))
        converted = any("fused" in n for n in fresh.notes)  # graph_check saw foreach where the reader's is fused
        with sandbox.sandbox(meta=fresh.device == "meta", home=fresh.home, shared=fresh.shared):
            found, report.graph_report = capture_hazards(fresh, ev, skip_optimizer=converted)
        if converted:
            report.notes.append("the fused optimizer ran as foreach on meta: its learning rate under capture is "
                                "not judged here (graph_check it on the device it trains on)")
        report.findings += found
        report.blind_spots += [f"graph_check: {s}" for s in report.graph_report.blind_spots()]
    report.checked = {f"{what} ({lesson})": ("not asked (graphs=True)" if kinds == ("capture hazard",) and not graphs
                                             else sum(f.kind in kinds for f in report.findings))
                      for what, lesson, kinds in CHECKED}
    if timed:
        from .outcome import time_on_copies

        report.timing, report.timed_calls, note = time_on_copies(fn, inputs, kwargs, device)
        if note:
            report.notes.append(note)
    return report


def _findings(ev, gpu, notes: list[str]) -> Report:
    from . import detect_copies, detect_gemms, detect_graphs, detect_launches, detect_syncs
    from .costs import kernels, sync_points

    ks = kernels(ev)
    after = sync_points(ev, ks)
    findings = (detect_copies.broadcast_matmuls(ev, gpu) + detect_copies.broadcast_contractions(ev, gpu)
                + detect_copies.saved_copies_and_attention(ev, gpu)
                + detect_gemms.gemm_loops(ev, gpu) + detect_launches.elementwise_chains(ev, gpu)
                + detect_launches.launch_bound(ev, gpu, after) + detect_launches.optimizer_loops(ev, gpu)
                + detect_launches.hand_written_updates(ev, gpu)
                + detect_launches.row_gathers(ev, gpu) + detect_launches.losses_per_step(ev, gpu)
                + detect_syncs.host_syncs(ev, gpu, ks, after)
                + detect_syncs.pageable_transfers(ev, gpu) + detect_syncs.cat_loops(ev, gpu)
                + detect_syncs.allocation_churn(ev, gpu) + detect_graphs.graph_for_nothing(ev, gpu)
                + detect_graphs.kept_graphs(ev, gpu))
    blind = list(BLIND_SPOTS) + [f"the sync detector: {s}" for s in SYNC_BLIND_SPOTS]
    if ev.device != "meta":
        blind[1] = ("on a CPU run, every host read counts as a GPU sync would (x[j] with a CPU index waits for "
                    "nothing on a GPU): an upper bound" if ev.device == "cpu" else
                    "it ran on your CUDA tensors: costs are still the model, not this GPU's timings")
    return Report(findings, step_numbers(ev, gpu, ks, after), {}, blind, notes, gpu.name, ev.device, ev.error)


def _step_unit(ev) -> str:
    """What one step of the call was (collect.Evidence.steps): the count that per-step numbers divide by."""
    return ("optimizer steps" if ev.optimizers else "rounds of updates written by hand" if ev.update_rounds else
            "backward calls" if ev.backward_calls else "forward passes of the model" if ev.forwards else "calls")


def step_numbers(ev, gpu, ks, after) -> dict:
    """The step in numbers, per step: what the report's head line says, and what tests compare."""
    from ..display import count
    from .costs import b, per_step, t

    work = gpu.work(ks)
    saved = max((s.ledger.total_bytes for s in ev.ledgers), default=0)
    n_syncs = sum(1 for e in ev.sync_at if isinstance(e[1], HostSync))
    eager = gpu.eager(ks, after) / ev.steps if ks else 0.0
    regime = gpu.peaks.regime_words(work) if ks else "no GPU work"
    copied = (ev.trace.copied_bytes - ev.syncs.transfer_bytes) / ev.steps
    return {"steps": ev.steps, "ops": len(ev.trace.compute_ops) / ev.steps, "launches": len(ks) / ev.steps,
            "cats": len(ev.trace.named("cat")) / ev.steps, "flops": work.flops / ev.steps,
            "bytes": work.bytes / ev.steps, "gemms": len(ev.trace.gemms) / ev.steps, "saved_bytes": saved,
            "syncs": n_syncs / ev.steps, "transferred": ev.syncs.transfer_bytes / ev.steps,
            "copied": copied,
            "regime": regime, "eager_s": eager,
            "summary": (f"{count(per_step(len(ks), ev.steps), 'kernel launch')}, "
                        f"{count(len(ev.trace.gemms) // ev.steps, 'GEMM')}, "
                        f"{work.flops / ev.steps / 1e9:.3g} GFLOP, {b(work.bytes / ev.steps)} read and written, "
                        f"{b(copied)} copied, "
                        f"{b(ev.syncs.transfer_bytes / ev.steps)} between host and device, {b(saved)} saved for backward, "
                        f"{count(per_step(n_syncs, ev.steps), 'host sync')} a step ({count(ev.steps, 'step')} seen: "
                        f"{_step_unit(ev)}); "
                        f"on {a_gpu(gpu.name)}: {regime}, ≈ {t(eager)} a step eager (model)")}
