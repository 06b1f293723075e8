"""Lesson 06's explorers and recorded results.

CAT_LESSON (cat in a loop, pre-allocate, cat once) is the explorer's lesson and the one `record --model`
traces; the transfer lesson (pageable vs pinned copies) is built on demand. `python -m lessons_lib.record`
imports this module and reads KEY, `record`, `targets` and CAT_LESSON.
"""
from __future__ import annotations

import torch

from .. import results, roofline, transfers
from ..lesson import Lesson, Param, Variant
from ..widgets import Explorer
from .evidence_inplace import inplace_timings
from .evidence_loops import extrapolate_elementwise
from .evidence_transfers import seed_example1_timings
from .variants import cat_in_a_loop, cat_once, copy_pageable, copy_pinned, pin_then_copy, preallocate_and_fill

KEY = "06_data_movement"  # this lesson's key in the recorded results


# === the cat explorer =============================================================================


def cat_inputs(p: dict, device, dtype):
    return tuple(torch.randn(p["rows"], p["cols"], device=device, dtype=dtype) for _ in range(p["pieces"]))


def cat_peak_bytes(p: dict, dtype) -> int:
    """The pieces, the result and (cat in a loop) the previous result alive during each cat."""
    e = torch.empty(0, dtype=dtype).element_size()
    return 3 * p["pieces"] * p["rows"] * p["cols"] * e


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


def cat_explorer(device=None) -> Explorer:
    return Explorer(CAT_LESSON, device)


explorer = cat_explorer


# === transfers as explorer variants (a GPU is needed: refused with a sentence on a CPU) ===========


def _transfer_inputs(p: dict, device, dtype):
    n = p["megabytes"] * 2**20 // torch.empty(0, dtype=dtype).element_size()
    host = torch.rand(n, dtype=dtype)
    pinned = host.pin_memory() if transfers.pin_problem() is None else host
    return torch.empty(n, device=device, dtype=dtype), host, pinned


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
    Where pinned memory is unavailable, it says why and offers the pageable copy alone. Its "results from"
    menu replays the copies `record` measured on a GPU (`transfer_sections`)."""
    lesson = transfer_lesson()
    if len(lesson.variants) == 1:
        print(transfers.pin_problem(), "The explorer times the pageable copy only.")
    return Explorer(lesson, device, sections=transfer_sections)


TRANSFER_KEY = KEY + "_transfers"
# the explorer's variants as `record` stores them (transfers.measure_all's labels): the same copies, host to device
RECORDED_AS = {"pageable": "host → device, pageable", "pinned": "host → device, pinned",
               "pin, then copy": "pin_memory() then copy (pin included)"}


def transfer_sections(rec: results.Recorded) -> tuple[str, dict] | None:
    """The transfer explorer's figures in a recorded file: a section of its own, or the host-to-device copies
    `record` measured (the 06 section's "transfers"), as a headline of the explorer's variants at their size."""
    data = rec.lesson(TRANSFER_KEY)
    if data:
        return TRANSFER_KEY, data
    copies = (rec.lessons.get(KEY) or {}).get("transfers") or {}
    rows = {name: copies[label] for name, label in RECORDED_AS.items() if label in copies}
    if not rows:
        return None
    nbytes = next(iter(rows.values()))["bytes"]
    variants = {name: {"median": r["median"], "iqr": r.get("iqr", 0.0)} for name, r in rows.items()}
    return KEY, {"headline": {"params": {"megabytes": max(1, round(nbytes / 2**20))}, "dtype": "float32",
                              "variants": variants}}


# === recorded results =============================================================================

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
        out["transfers"] = {b.label: {"gbs": b.gbs, "median": b.timing.median, "iqr": b.timing.iqr, "bytes": b.nbytes}
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
