"""GroupedLinear (lessons_lib/grouped_linear/): what the test files share: the thread's SlowGroups, a float64 reference."""

import torch
import torch.nn as nn


ON_CPU = ["loop", "bmm", "einsum", "block_diagonal", "conv", "vmap"]  # run in float64 everywhere
CHANNEL_FIRST = [*ON_CPU, "matmul_channels"]


class SlowGroups(nn.Module):
    """The thread's SlowGroups, with its two typos fixed (super().__init__(), torch.cat)."""

    def __init__(self, channels: int, groups: int):
        super().__init__()
        assert channels % groups == 0
        self.groups = groups
        self.projs = nn.ModuleList(nn.Linear(channels // groups, channels // groups) for _ in range(groups))

    def forward(self, x):
        parts = torch.chunk(x.transpose(-1, -2), self.groups, dim=-1)
        return torch.cat([self.projs[n](parts[n]) for n in range(self.groups)], dim=-1).transpose(-1, -2)


def _reference(x, weight, bias, dim):
    """Group by group with plain float64 matmuls, independent of every strategy."""
    x, weight = x.double(), weight.double()
    moved = x.movedim(dim, -1)
    G, O, K = weight.shape
    parts = [moved[..., g * K:(g + 1) * K] @ weight[g].T + (0 if bias is None else bias[g].double())
             for g in range(G)]
    return torch.cat(parts, -1).movedim(-1, dim)


def _rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()
