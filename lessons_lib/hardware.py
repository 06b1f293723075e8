"""The two facts about the hardware the timing harness stands on: wait for queued GPU work
(`synchronize`) and the size of the largest cache (`last_level_cache_bytes`).

The bottom of the toolkit: it imports only torch, so timing.py and compiling.py can use it without
importing device.py (which imports them inside its functions: the import graph stays acyclic,
tests/test_imports.py). device.py re-exports both names.
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
