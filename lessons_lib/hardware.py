"""The facts about the hardware the timing harness stands on: wait for queued GPU work (`synchronize`),
the size of the largest cache (`last_level_cache_bytes`), and which device a call runs on (`pick`).

The bottom of the toolkit: it imports only torch, so timing.py and compiling.py can use it without
importing device.py (which imports them inside its functions: the import graph stays acyclic,
tests/test_imports.py). device.py re-exports these names.
"""
from __future__ import annotations

import os

import torch


def synchronize(device: torch.device | str) -> None:
    """Wait for queued GPU work. A no-op on CPU, where every op is already synchronous."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def last_level_cache_bytes(device: torch.device | str | None = None) -> int:
    """The largest cache on `device`: a GPU's L2, or the CPU's last level (from sysfs).

    Flush buffers and rotation sets are sized from it; 64 MiB is assumed when it can't be read."""
    dev = torch.device(device or "cpu")
    if dev.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)
        return int(size) or 64 * 2**20
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            if entry.startswith("index"):
                with open(os.path.join(base, entry, "size")) as f:
                    best = max(best, _parse_size(f.read().strip()))
    except OSError:
        pass
    return best or 64 * 2**20


def _parse_size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    text = text.upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text) if text.isdigit() else 0


# --- which device: lives here, below timing.py and device.py, so both can resolve one without a cycle ----

def has_cuda() -> bool:
    return torch.cuda.is_available()


COURSE_DEVICES = ("cpu", "cuda")  # where the course runs and times; "meta" also passes `pick`, for shape-only traces


def pick(prefer: str | torch.device | None = None) -> torch.device:
    """The device a lesson should use: `prefer` if given and usable, else CUDA, else CPU.

    Anything else is one sentence (ValueError), before anything runs: a name torch does not know, a device
    type the course does not run on (mps, xpu: their ops and timers are not the course's), a GPU index
    this machine lacks ("cuda:7" on a one-GPU machine), CUDA without a GPU. "meta" passes: shape-only
    analyses run there (an explorer refuses it itself, `widgets.Explorer`)."""
    if prefer is None:
        return torch.device("cuda") if has_cuda() else torch.device("cpu")
    if isinstance(prefer, bool) or not isinstance(prefer, (str, torch.device)):
        raise ValueError(f"device must be 'cpu' or 'cuda' (a name or a torch.device), got {prefer!r}.")
    try:
        dev = torch.device(prefer)
    except (RuntimeError, ValueError):
        raise ValueError(f"Unknown device {prefer!r}: use 'cpu' or 'cuda'.") from None
    if dev.type == "cuda":
        if not has_cuda():
            raise ValueError(
                "CUDA was requested but this machine has no usable CUDA GPU "
                "(torch.cuda.is_available() is False). Choose 'cpu' instead."
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"device {str(dev)!r}: this machine has {count} CUDA GPU{'s' if count != 1 else ''} "
                             f"(cuda:0{f' to cuda:{count - 1}' if count > 1 else ''}); use 'cuda'.")
    elif dev.type not in (*COURSE_DEVICES, "meta"):
        raise ValueError(f"The course runs on 'cpu' or 'cuda', not {dev.type!r}: use "
                         f"{'cuda' if has_cuda() else 'cpu'!r}.")
    return dev
