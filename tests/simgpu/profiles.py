"""The GPUs the simulation can pretend to be: what `torch.cuda` reports about each, nothing more.

Figures are what PyTorch reports on the real card (NVIDIA datasheets for SMs and L2; total_memory
as torch prints it in its own out-of-memory messages). They drive the library's branches (which
dtypes, what fits, which datasheet row), never a number the course reports.
"""
from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class Profile:
    key: str
    name: str  # as torch.cuda.get_device_name() returns it on the real card
    sm_count: int
    capability: tuple[int, int]
    total_memory: int  # bytes
    l2_cache_bytes: int

    @property
    def shown_name(self) -> str:
        """The name the simulated device reports: the card's, marked as a simulation everywhere."""
        return f"{self.name} (simulated)"


PROFILES = {
    # Turing TU104: 40 SMs, 4 MiB L2; torch reports "14.74 GiB total capacity" on a 16 GB T4.
    "t4": Profile("t4", "Tesla T4", 40, (7, 5), int(14.74 * GIB), 4 * 2**20),
    # Hopper GH100, SXM5 80 GB: 132 SMs, 50 MiB L2; torch reports "79.11 GiB total capacity".
    "h100": Profile("h100", "NVIDIA H100 80GB HBM3", 132, (9, 0), int(79.11 * GIB), 50 * 2**20),
}
