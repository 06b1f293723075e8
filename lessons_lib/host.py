"""What the host machine has, read with the standard library alone: memory, cores, load.

The doctor must run where torch is missing or broken (the room it exists for), so these live
below every module that imports torch; device.py re-exports the memory readers it has always used.
"""
from __future__ import annotations

import os


def _host_total_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    total = _host_total_bytes()
    return total // 2 if total else 2 * 2**30


def usable_cores() -> int:
    """Cores this process may run on (a container's CPU set, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average (runnable processes), or None where the OS has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
