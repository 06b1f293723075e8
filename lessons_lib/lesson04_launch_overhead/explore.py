"""Lesson 04's explorer and recorded results: explorer(), record and targets. `python -m lessons_lib.record`
imports this module and reads `record`, `targets` and the Lessons bound here (LESSON, TRAIN_LESSON)."""
from __future__ import annotations

import torch

from .. import compiling, noise, results
from .. import device as _device
from ..widgets import Explorer
from .lessons import LESSON, TRAIN_LESSON, _shape, compiled_work, has_tf32, with_compiled, with_tf32
from .evidence import overhead_timings, peaks
from .compiled import compile_and_compare
from .fusion import fusion_causes


def explorer(device=None, compiled: bool | None = None, training: bool = False,
             tf32: bool | None = None) -> Explorer:
    """The toolkit's explorer on this lesson: after a Run it names each variant's regime and prints
    its three roofline bounds; after a Sweep, where each variant's regime changes.

    compiled: add a torch.compile'd variant (default: on a GPU only; a compile on a CPU takes
        seconds per shape, the first one much longer: the run's estimate counts
        compiling.COMPILE_BUDGET_S for it until it has seen one compile here, then what that took).
        Its forward counts as one fused kernel in the floors and regimes.
    tf32: add "Linear (TF32)", Linear with TF32 allowed for its matmuls (default: on a GPU with TF32
        tensor cores, compute capability 8.0+; PyTorch's own default for matmuls is off). Its compute
        floor uses the TF32 peak; on a CPU it is Linear again.
    """
    dev = _device.pick(device)
    lesson = TRAIN_LESSON if training else LESSON
    if compiled is None:
        compiled = dev.type == "cuda" and compiling.problem(dev) is None
    if tf32 is None:
        tf32 = has_tf32(dev)
    if tf32:
        lesson = with_tf32(lesson)
    if compiled:
        lesson = with_compiled(lesson)
    return Explorer(lesson, dev, work_of=compiled_work if compiled and not training else None)


# --- recorded results --------------------------------------------------------------------------------

WIDTHS_GPU = [128, 256, 512, 1024, 2048, 4096, 8192]
WIDTHS_CPU = [16, 32, 64, 128, 256, 512]
BATCHES_GPU = [256, 1024, 4096, 16384, 65536, 262144]
BATCHES_CPU = [16, 64, 256, 1024, 4096, 16384, 65536]
REGIME_SHAPES = {  # three shapes where the regimes are not in doubt on most machines
    "cpu": [{"width": 16, "batch": 16, "layers": 4}, {"width": 256, "batch": 65536, "layers": 4},
            {"width": 1024, "batch": 1024, "layers": 1}],
    "cuda": [{"width": 16, "batch": 16, "layers": 4}, {"width": 4096, "batch": 32768, "layers": 4},
             {"width": 8192, "batch": 32768, "layers": 1}],
}
MEMORY_BOUND = {"cpu": {"width": 256, "batch": 65536, "layers": 4}, "cuda": {"width": 4096, "batch": 32768, "layers": 4}}


def record(device, quick: bool = False) -> dict:
    """This lesson's recorded results: per-op overhead, the regime of every variant at three shapes,
    a headline run at the default shape, width and batch sweeps, and (not quick) the compiled bar."""
    dev = torch.device(device)
    t = 0.05 if quick else 0.3
    pk = peaks(dev)
    kind = "cuda" if dev.type == "cuda" else "cpu"
    out = {"quick": quick, "overhead": {tm.label: {"median": tm.median, "iqr": tm.iqr}
                                        for tm in overhead_timings(dev, min_run_time=t)}}
    shapes = REGIME_SHAPES[kind][:1] if quick else REGIME_SHAPES[kind]
    out["regimes"] = []
    for shape in shapes:
        run = LESSON.run(shape, dev, min_run_time=t)
        out["regimes"].append(results.run_to_dict(run, pk))
    head = LESSON.run(LESSON.defaults(dev), dev, min_run_time=t)
    out["headline"] = results.run_to_dict(head, pk)
    widths = WIDTHS_GPU if kind == "cuda" else WIDTHS_CPU
    batches = BATCHES_GPU if kind == "cuda" else BATCHES_CPU
    if quick:
        widths, batches = widths[:2], batches[:2]
    sw = LESSON.sweep("width", widths, None, dev, min_run_time=t / 2, progress=False)
    sb = LESSON.sweep("batch", batches, {"width": 256}, dev, variants=["PseudoLinear", "addcmul"],
                      min_run_time=t / 2, progress=False)
    out["sweeps"] = {"width": results.sweep_to_dict(sw), "batch": results.sweep_to_dict(sb)}
    if not quick:
        cr = compile_and_compare(MEMORY_BOUND[kind], dev, min_run_time=t)
        if cr.compiled.ok and cr.fused:
            fc = fusion_causes(cr.params, dev, compiled=cr.compiled.fn, max_time=60.0)
            ref = fc.one or fc.many
            names = fc.many.names
            out["compiled"] = {
                "params": cr.params, "cold_s": cr.compiled.cold_s, "eager": cr.eager.median,
                "compiled": cr.fused.median, "speedup": cr.eager.median / cr.fused.median,
                "bytes_eager": fc.bytes_eager, "bytes_fused": fc.bytes_fused, "bytes_bound": fc.bound,
                "threads": fc.threads, "faults_per_call": fc.faults,
                "medians": {n: fc.many.median(n) for n in names},
                "medians_1_thread": {n: fc.one.median(n) for n in names} if fc.one else None,
                "rounds": len(ref.rounds[names[0]]),
                # fusion alone: compiled against eager into reused buffers, one thread where it applies
                "fusion": _ratio_dict(ref.ratio(names[1], names[2])),
                "allocator": _ratio_dict(ref.ratio(names[0], names[1])),
                "threads_ratio": (_ratio_dict(noise.Ratio([a / b for a, b in zip(fc.many.rounds[names[1]],
                                                                                  fc.one.rounds[names[1]])]))
                                  if fc.one else None)}
        else:
            out["compiled"] = {"problem": cr.compiled.problem}
    return out


def _ratio_dict(r: noise.Ratio) -> dict:
    return {"median": r.median, "low": r.low, "high": r.high, "decided": r.decided}


FUSION_MARGIN = 1.25  # on the bytes bound: traced bytes are not DRAM bytes (caches, write-allocate)


def targets(device, section: dict) -> list[dict]:
    """This lesson's bars as measured here. Fusion, for the lesson's reason: the compiled forward
    against eager PseudoLinear writing into reused buffers (no allocator in the ratio; one thread on a
    CPU, so no thread waits either) is faster, and by no more than the bytes bound the traces give
    (2·layers) with a margin, since fusion saves bytes; decided by paired rounds. Beside it, shown
    and not judged: the allocator's share (new outputs over reused buffers, page faults per call).
    The per-op overhead measured, not assumed; every variant's regime recorded at three shapes. On a
    GPU, `gpu` claim tests hold the bars."""
    cpu = torch.device(device).type == "cpu"
    out = []
    c = section.get("compiled") or {}
    if "fusion" in c:
        f, bound = c["fusion"], c["bytes_bound"]
        ok = f["decided"] and f["low"] > 1 and f["high"] <= FUSION_MARGIN * bound
        out.append({"name": f"04 fused / eager PseudoLinear into reused buffers, forward, 1 thread, at "
                            f"{_shape(c['params'])} (bytes bound {bound:.1f}×)",
                    "value": f["median"], "bar": f"> 1 and <= {FUSION_MARGIN:g} × bytes bound, decided (CPU)",
                    "ok": ok if cpu else None})
        a = c["allocator"]
        faults = (c.get("faults_per_call") or {}).get("eager, new outputs")
        out.append({"name": "04 eager PseudoLinear, new outputs / reused buffers (the allocator; "
                            f"{faults:,.0f} minor page faults a call)" if faults is not None else
                            "04 eager PseudoLinear, new outputs / reused buffers (the allocator)",
                    "value": a["median"], "bar": "info (shown, not judged)", "ok": None})
    add = (section.get("overhead") or {}).get("1-element add")
    if add:
        out.append({"name": "04 per-op overhead, a 1-element add (µs, measured)", "value": add["median"] * 1e6,
                    "bar": "> 0", "ok": add["median"] > 0})
    shapes = section.get("regimes") or []
    if shapes:
        named = all(v.get("regime") for r in shapes for v in r["variants"].values())
        quick = bool(section.get("quick")) and len(shapes) < 3  # --quick records one shape: not judged
        out.append({"name": "04 shapes with every variant's regime recorded", "value": len(shapes),
                    "bar": ">= 3", "ok": None if quick else len(shapes) >= 3 and named,
                    **({"na": "quick: --quick records one shape"} if quick else {})})
    return out
