"""Host <-> device copies: measured on a CUDA GPU, modelled from datasheets everywhere else.

`measure(nbytes, direction, pinned)` times one copy between host and GPU memory with the course
harness (`timing.measure`), from a pinned (page-locked) or a pageable host buffer, and returns
its bandwidth. `pin_then_copy` times what a reader often writes instead, `t.pin_memory().to(dev,
non_blocking=True)`: the pin is itself a host copy, so on a fresh tensor it can be *slower* than
a plain `.to(dev)` (PyTorch's tutorial "A guide on good usage of non_blocking and pin_memory()"
shows this). Pinning pays when the pinned buffer is reused, or when it is done off the loop's path:
a DataLoader with `pin_memory=True` and `num_workers > 0` pins in a thread of the main process
(`_pin_memory_loop`), while the loop copies the previous batch; with `num_workers=0` it pins inline,
in the loop; a worker process never pins (torch/utils/data/dataloader.py).

`model(name)` gives the host link of named GPUs from NVIDIA's datasheets. Every figure from it
is a MODEL: a datasheet peak per direction, not a measurement; say so wherever it is shown.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import timing
from .device import check_fits, fmt_bytes, has_cuda

# Host link of named GPUs, from NVIDIA's product datasheets ("interconnect bandwidth"). The
# datasheets give both directions together; one direction is half.
#   T4 datasheet: PCIe Gen3 x16, 32 GB/s.          L4 datasheet: PCIe Gen4 x16, 64 GB/s.
#   V100 datasheet: PCIe 32 GB/s; NVLink 300 GB/s (SXM2, GPU to GPU).
#   A10 datasheet (AWS's A10G is an A10 variant): PCIe Gen4 64 GB/s.
#   A100 datasheet: PCIe Gen4 64 GB/s; NVLink 600 GB/s (SXM, GPU to GPU).
#   H100 datasheet: PCIe Gen5 128 GB/s; NVLink 900 GB/s (SXM) or 600 GB/s (PCIe card, NVLink bridge).
#   H200 datasheet: PCIe Gen5 128 GB/s; NVLink 900 GB/s.
# The host<->GPU path is PCIe on all of these in x86 hosts; NVLink joins GPUs to each other. NVLink to the
# CPU exists only on some non-x86 hosts (IBM POWER8/POWER9 with P100/V100; NVIDIA Grace, NVLink-C2C): not modelled.
LINKS = {  # name: (PCIe both directions GB/s, PCIe generation, NVLink both directions GB/s or None)
    "T4": (32, "Gen3 x16", None),
    "L4": (64, "Gen4 x16", None),
    "V100": (32, "Gen3 x16", 300),
    "A10G": (64, "Gen4 x16", None),
    "A100": (64, "Gen4 x16", 600),
    "H100 PCIe": (128, "Gen5 x16", 600),
    "H100": (128, "Gen5 x16", 900),
    "H200": (128, "Gen5 x16", 900),
}
# ASSUMPTIONS of the model (not datasheet figures), stated wherever it is used:
ASSUMED_LINK_EFFICIENCY = 0.8  # a pinned DMA copy reaches ~80% of the PCIe per-direction peak (packet overhead)
ASSUMED_STAGING_GBS = 10.0  # a pageable copy is first copied by one CPU thread into a pinned staging buffer
ASSUMED_COPY_LATENCY_S = 10e-6  # fixed cost of one copy call (driver + launch)
MODEL_NOTE = (f"model: datasheet PCIe peak per direction × {ASSUMED_LINK_EFFICIENCY:g} (assumed efficiency); "
              f"pageable adds a {ASSUMED_STAGING_GBS:g} GB/s host staging copy (assumed); "
              f"{ASSUMED_COPY_LATENCY_S * 1e6:g} µs per copy (assumed). Not a measurement.")


@dataclass(frozen=True)
class Link:
    """A named GPU's host link, from its datasheet (kind: model)."""

    gpu: str
    pcie_gbs: float  # one direction, datasheet peak
    pcie: str
    nvlink_gbs: float | None  # one direction, GPU to GPU

    @property
    def pinned_gbs(self) -> float:
        return self.pcie_gbs * ASSUMED_LINK_EFFICIENCY

    @property
    def pageable_gbs(self) -> float:
        """Staging copy and DMA one after the other (the model's pessimistic end)."""
        return 1 / (1 / self.pinned_gbs + 1 / ASSUMED_STAGING_GBS)

    def seconds(self, nbytes: int, pinned: bool = True) -> float:
        gbs = self.pinned_gbs if pinned else self.pageable_gbs
        return ASSUMED_COPY_LATENCY_S + nbytes / (gbs * 1e9)


def model(name: str) -> Link | None:
    """The datasheet host link of a named GPU (longest matching name first), or None."""
    for key in sorted(LINKS, key=len, reverse=True):
        if key.lower() in name.lower():
            both, gen, nvlink = LINKS[key]
            return Link(key, both / 2, f"PCIe {gen}", nvlink / 2 if nvlink else None)
    return None


def model_table(nbytes: int, names=("T4", "L4", "A100", "H100")) -> str:
    """Per named GPU: the datasheet link and the modelled copy time of `nbytes`, pinned and pageable."""
    from .display import text_table

    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
        raise ValueError(f"nbytes must be a whole number of bytes >= 1, such as 40_000_000, got {nbytes!r}.")
    if isinstance(names, str):
        raise ValueError(f"names must be a list of GPU names, such as ('T4', 'H100'), got {names!r}.")
    unknown = [n for n in names if model(n) is None]
    if unknown:
        raise ValueError(f"No datasheet host link for {unknown}: name GPUs such as {', '.join(sorted(LINKS))}.")

    rows = [("GPU (model)", "host link", "peak GB/s per dir.", f"pinned {fmt_bytes(nbytes)}",
             "pageable", "NVLink GB/s per dir.")]
    for n in names:
        link = model(n)
        rows.append((n, link.pcie, f"{link.pcie_gbs:g}", timing.fmt_time(link.seconds(nbytes, True)),
                     timing.fmt_time(link.seconds(nbytes, False)),
                     f"{link.nvlink_gbs:g}" if link.nvlink_gbs else "-"))
    return text_table(rows) + "\n" + MODEL_NOTE


# --- measurement (CUDA only) -------------------------------------------------------------------


@dataclass(frozen=True)
class Bandwidth:
    label: str
    nbytes: int
    timing: timing.Timing
    kind: str = "measured"

    @property
    def gbs(self) -> float:
        return self.nbytes / self.timing.median / 1e9

    def __str__(self) -> str:
        return (f"{self.label:32s} {fmt_bytes(self.nbytes):>10s} in {timing.fmt_time(self.timing.median):>9s}: "
                f"{self.gbs:6.1f} GB/s ({self.kind})")


def problem(device=None) -> str | None:
    """Why host<->device copies cannot be measured here, as a sentence; None when they can."""
    dev = torch.device(device) if device is not None else None
    if not has_cuda():
        return ("No CUDA GPU here: a host<->device copy needs a device other than the host, so there is nothing "
                "to measure here. Datasheet link speeds stand in (`transfers.model`, labelled model), and a "
                "GPU's recorded copies replay under \"results from\".")
    if dev is not None and dev.type != "cuda":
        return f"Copies are measured between the host and a CUDA device; {dev} is not one."
    return None


def pin_problem() -> str | None:
    """Why pinned (page-locked) host memory is unavailable, as a sentence; None when it works."""
    if not has_cuda():
        return ("Pinned memory needs an accelerator: page-locking is done by the CUDA driver, so "
                "`pin_memory()` raises on a CPU-only machine. On a CPU there is no copy to speed up.")
    try:
        torch.empty(1).pin_memory()
    except RuntimeError as err:
        return f"This machine could not pin host memory ({str(err).splitlines()[0][:120]})."
    return None


def non_blocking_note(device) -> str:
    """What `non_blocking=True` does on this device, in one sentence."""
    if torch.device(device).type != "cuda":
        return ("`non_blocking=True` changes nothing on a CPU: `.to('cpu')` of a CPU tensor returns the tensor "
                "itself, and there is no queue to overlap with. It matters only for copies between host and GPU.")
    return ("`non_blocking=True` queues the copy on the stream and returns; from a pinned buffer the host goes on "
            "at once, and a copy to the host must be followed by a synchronize before the host reads it.")


def _buffers(nbytes: int, direction: str, pinned: bool, device):
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' (host to device) or 'd2h' (device to host), got {direction!r}.")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 4:
        raise ValueError(f"nbytes must be a whole number of bytes, at least 4; got {nbytes!r}.")
    why = problem(device)
    if why:
        raise ValueError(why)
    if pinned and pin_problem():
        raise ValueError(pin_problem())
    check_fits(nbytes, device, "the device buffer")
    check_fits(nbytes, "cpu", "the host buffer")
    n = nbytes // 4
    host = torch.empty(n, pin_memory=pinned)
    host.fill_(1.0)  # touch every page: a fresh pageable buffer page-faults on first use
    gpu = torch.ones(n, device=device)
    return host, gpu


def measure(nbytes: int = 64 * 2**20, direction: str = "h2d", pinned: bool = True, device="cuda",
            min_run_time: float = 0.2) -> Bandwidth:
    """The bandwidth of one copy of `nbytes` between a host buffer (pinned or pageable) and the GPU.

    Timed with the harness on `device` (passed, so it synchronizes the GPU whatever the argument order).
    Pinned copies are non_blocking (queued, as a DataLoader's are); pageable ones are plain."""
    dev = torch.device(device)
    host, gpu = _buffers(nbytes, direction, pinned, dev)
    nb = pinned

    if direction == "h2d":
        def copy(g, h):
            g.copy_(h, non_blocking=nb)
    else:
        def copy(g, h):
            h.copy_(g, non_blocking=nb)

    label = f"{'host → device' if direction == 'h2d' else 'device → host'}, {'pinned' if pinned else 'pageable'}"
    t = timing.measure(copy, gpu, host, label=label, min_run_time=min_run_time, max_time=10.0, device=dev)
    return Bandwidth(label, host.nbytes, t)


def pin_then_copy(nbytes: int = 64 * 2**20, device="cuda", min_run_time: float = 0.2) -> Bandwidth:
    """`t.pin_memory().to(device, non_blocking=True)` on a pageable tensor, the pin included."""
    dev = torch.device(device)
    host, gpu = _buffers(nbytes, "h2d", False, dev)

    def pin_copy(g, h):
        return h.pin_memory().to(g.device, non_blocking=True)

    t = timing.measure(pin_copy, gpu, host, label="pin_memory() then copy", min_run_time=min_run_time, max_time=10.0,
                       device=dev)
    return Bandwidth("pin_memory() then copy (pin included)", host.nbytes, t)


def measure_all(nbytes: int = 64 * 2**20, device="cuda", min_run_time: float = 0.2) -> list[Bandwidth]:
    """Pinned and pageable in both directions, and pin-then-copy; pinned ones skipped if pinning fails."""
    out = []
    for direction in ("h2d", "d2h"):
        for pinned in (True, False):
            if pinned and pin_problem():
                continue
            out.append(measure(nbytes, direction, pinned, device, min_run_time))
    if not pin_problem():
        out.append(pin_then_copy(nbytes, device, min_run_time))
    return out


__all__ = ["LINKS", "Link", "model", "model_table", "MODEL_NOTE", "Bandwidth", "problem", "pin_problem",
           "non_blocking_note", "measure", "pin_then_copy", "measure_all"]
