"""Lesson 06, claim 1 (keep data on the GPU; transfers add latency): host syncs and copies of seed
example 1's loops (the sync detector), a datasheet model of one pass per named GPU, and timings."""
from __future__ import annotations

import math

import torch

from .. import claim_table, noise, roofline, transfers
from .. import device as _device
from ..display import text_table
from ..syncs import syncs
from ..timing import fmt_time
from .evidence import _course_device, _measure, _shape, _whole
from .variants import SEED_EXAMPLE1, copy_only_loop, kept_on_device_loop, posted_transfer_loop


def transfer_syncs(device=None, num_iterations: int = 5, size=(64, 32)) -> dict:
    """The sync detector on the seed's two loops (small tensors: the count, not the time, matters)."""
    dev = _device.pick(device)
    num_iterations = _whole(num_iterations, "num_iterations", 1, 10_000)
    size = _shape(size)
    nbytes = 4 * math.prod(size)
    _device.check_fits(2 * nbytes, "cpu", "the transfer loops' tensors")  # the CPU tensor and its copies
    if dev.type != "cpu":
        _device.check_fits(2 * nbytes, dev, "the transfer loops' tensors")
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
    dev = _course_device(device)
    num_iterations = _whole(num_iterations, "num_iterations", 1, 10_000)
    size = _shape(size or (SEED_EXAMPLE1["size"] if dev.type == "cuda" else (1000, 1000)))
    _device.check_fits(3 * 4 * math.prod(size), dev, "seed example 1")
    _device.check_fits(4 * math.prod(size), "cpu", "seed example 1's CPU tensor")
    cpu_tensor = torch.rand(size)
    gpu_tensor = cpu_tensor.to(dev)
    out = {"as posted": _measure(posted_transfer_loop, cpu_tensor, num_iterations, dev, label="as posted",
                                 min_run_time=min_run_time, device=dev),
           "kept on device": _measure(kept_on_device_loop, gpu_tensor, num_iterations, label="kept on device",
                                      min_run_time=min_run_time, device=dev)}
    return out


EX1_PAIRS = [("as posted", "kept on device")]  # what seed_example1_verdict's sentence says


def seed_example1_verdict(device=None, size=None, num_iterations: int = 10, max_time: float = 8.0):
    """(Comparison, sentence): the posted loop against the kept-on-device one in paired rounds (the
    noise rule), on a GPU; on a CPU both sum the same tensor, so there is nothing to conclude."""
    dev = _course_device(device)
    num_iterations = _whole(num_iterations, "num_iterations", 1, 10_000)
    if size is not None:
        _shape(size)
    if dev.type != "cuda":
        return None, ("On a CPU both loops sum the same tensor (no copy exists), so timing them says nothing about "
                      "the claim: the copy's cost is the model's figure above, labelled model.")
    size = size or SEED_EXAMPLE1["size"]
    _device.check_fits(3 * 4 * math.prod(size), dev, "seed example 1")
    _device.check_fits(4 * math.prod(size), "cpu", "seed example 1's CPU tensor")
    cpu_tensor = torch.rand(size)
    gpu_tensor = cpu_tensor.to(dev)
    cmp = noise.compare({"as posted": lambda: posted_transfer_loop(cpu_tensor, num_iterations, dev),
                         "kept on device": lambda: kept_on_device_loop(gpu_tensor, num_iterations)},
                        pairs=EX1_PAIRS, max_time=max_time, device=dev)
    return cmp, claim_table.say(cmp.ratio(*EX1_PAIRS[0]), "measured here: the posted loop takes {x} as long as "
                                "the loop that keeps its data on the GPU (median of paired rounds, {low:.0f}–{high:.0f}×)")
