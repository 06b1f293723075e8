"""GroupedLinear's strategies: every way to compute G small Linears at once, and the weight's memory order each reads fastest."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..display import count


STRATEGIES = ("loop", "bmm", "matmul_channels", "einsum", "block_diagonal", "conv", "grouped_mm", "vmap")
AUTO = "auto"
MAX_BLOCK_DIAGONAL_BYTES = 256 * 2**20  # the block-diagonal weight is groups² × in × out: refuse beyond this


# --- layouts ------------------------------------------------------------------------------------


def _norm_dim(dim: int, ndim: int) -> int:
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim={dim} is out of range for an input with {count(ndim, 'dimension')}.")
    return dim % ndim


def _rows(x: torch.Tensor, dim: int, channels: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """x as (rows, channels): the channel dimension moved last and the others flattened.

    For the last dimension this is a view. For a channel-first layout (dim=1 of (N, C, L)) the
    moved tensor is not contiguous and `reshape` copies it: the layout copy a GEMM pays there."""
    d = _norm_dim(dim, x.dim())
    moved = x.movedim(d, -1) if d != x.dim() - 1 else x
    lead = tuple(moved.shape[:-1])
    return moved.reshape(-1, channels), lead


def _unrows(y: torch.Tensor, lead: tuple[int, ...], dim: int, ndim: int) -> torch.Tensor:
    """(rows, out_channels) back to the input's layout (a view; channel-first outputs are strided)."""
    y = y.reshape(*lead, y.shape[-1])
    d = _norm_dim(dim, ndim)
    return y.movedim(-1, d) if d != ndim - 1 else y


# --- the strategies: fn(x, weight, bias, dim) -> output; weight (G, O, K), bias (G, O) or None ---


def loop(x, weight, bias, dim=-1):
    """The thread's SlowGroups: one F.linear per group on a column slice, then one cat."""
    G, O, K = weight.shape
    rows, lead = _rows(x, dim, G * K)
    outs = [F.linear(rows[:, g * K:(g + 1) * K], weight[g], None if bias is None else bias[g]) for g in range(G)]
    return _unrows(torch.cat(outs, dim=-1), lead, dim, x.dim())


def bmm(x, weight, bias, dim=-1):
    """One batched GEMM: the rows viewed as (G, rows, K) (strided, no copy) times the weight as
    (G, K, O). With a bias it is `baddbmm`, which first copies the bias, expanded, into the output
    (on every backend) and then accumulates the GEMM into it (beta = 1): nothing is fused. The
    (G, rows, O) result is laid back as (rows, G·O), which copies once."""
    G, O, K = weight.shape
    rows, lead = _rows(x, dim, G * K)
    xg = rows.view(-1, G, K).transpose(0, 1)
    if bias is None:
        y = torch.bmm(xg, weight.transpose(1, 2))
    else:
        y = torch.baddbmm(bias.unsqueeze(1), xg, weight.transpose(1, 2))
    return _unrows(y.transpose(0, 1).reshape(-1, G * O), lead, dim, x.dim())


def matmul_channels(x, weight, bias, dim=-1):
    """The reply's MultichannelLinear, for channel-first layouts: x viewed as
    (leading, G, K, trailing) and multiplied by the stacked weight. matmul broadcasts the weight
    over the leading dimension (a copy of the weight per leading index), but the activations
    are only viewed, in and out."""
    G, O, K = weight.shape
    d = _norm_dim(dim, x.dim())
    if d == x.dim() - 1:
        raise ValueError("matmul_channels needs a channel-first layout (a dimension after the channels); "
                         "for channels last use 'bmm' or 'einsum'.")
    lead, tail = x.shape[:d], x.shape[d + 1:]
    x4 = x.reshape(math.prod(lead), G, K, math.prod(tail))
    y = torch.matmul(weight, x4)
    if bias is not None:
        y = y + bias.to(y.dtype).unsqueeze(-1)  # under autocast y is already in the autocast dtype
    return y.reshape(*lead, G * O, *tail)


def einsum(x, weight, bias, dim=-1):
    """einsum over (rows, G, K) and (G, O, K): it permutes and views both into one bmm."""
    G, O, K = weight.shape
    rows, lead = _rows(x, dim, G * K)
    y = torch.einsum("mgk,gok->mgo", rows.view(-1, G, K), weight)
    if bias is not None:
        y = y + bias.to(y.dtype)  # under autocast y is already in the autocast dtype
    return _unrows(y.reshape(-1, G * O), lead, dim, x.dim())


def block_diagonal(x, weight, bias, dim=-1):
    """One plain GEMM against a (G·O, G·K) block-diagonal weight: G× the FLOPs (the zeros are
    multiplied too) and the weight is rebuilt each call, but it is one GEMM and no layout copy.

    Groups stay independent: 0 × NaN = NaN, so the zero blocks would carry a NaN or inf in one group's
    input into every group's output. The GEMM therefore sees non-finite inputs as 0, and each group's
    output in a row whose input had a NaN or inf in that group is NaN (separate Linears give NaN there
    for a NaN; for an inf, ±inf where the weights' signs agree). x·0 summed over each group is 0, or NaN
    where the group holds one: added to the output, it marks exactly those groups. No host sync."""
    G, O, K = weight.shape
    rows, lead = _rows(x, dim, G * K)
    clean = torch.nan_to_num(rows, nan=0.0, posinf=0.0, neginf=0.0)
    y = F.linear(clean, torch.block_diag(*weight.unbind(0)), None if bias is None else bias.reshape(G * O))
    poison = (rows.detach() * 0).view(-1, G, K).sum(-1, keepdim=True)  # (rows, G, 1): 0, or NaN where a group has one
    y = (y.view(-1, G, O) + poison.to(y.dtype)).view(-1, G * O)
    return _unrows(y, lead, dim, x.dim())


def conv(x, weight, bias, dim=-1):
    """Grouped Conv1d, kernel_size=1. A channel-first (N, C, L) or (C, L) input goes in as it
    is; any other layout is laid out as (rows, C, 1) first."""
    G, O, K = weight.shape
    w = weight.reshape(G * O, K, 1)
    b = None if bias is None else bias.reshape(G * O)
    d = _norm_dim(dim, x.dim())
    if x.dim() in (2, 3) and d == x.dim() - 2:
        return F.conv1d(x, w, b, groups=G)
    rows, lead = _rows(x, dim, G * K)
    y = F.conv1d(rows.unsqueeze(-1), w, b, groups=G).squeeze(-1)
    return _unrows(y, lead, dim, x.dim())


class _ContiguousGrad(torch.autograd.Function):
    """Identity forward; makes the incoming gradient dense. `grouped_mm`'s backward rejects the
    stride-0 gradient that `out.sum().backward()` sends."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return g.contiguous()


def grouped_mm(x, weight, bias, dim=-1):
    """torch.nn.functional.grouped_mm over (G, rows, K) @ (G, K, O): the 3-D × 3-D case, where every
    group has the same rows. Its `bias=` argument is rejected on every build, so the bias is added
    after. Where no fast kernel exists (a CPU, or a GPU its kernels do not cover) this case runs as
    one `bmm`; only the jagged case (2-D inputs with `offs=`) loops, and that loop reads the offsets
    on the host, a sync. See `grouped_mm_problem` for where it runs at all."""
    G, O, K = weight.shape
    fn = _grouped_mm_fn()
    dt = _compute_dtype(x, weight)  # not an autocast op: cast to what autocast would use
    x, weight = x.to(dt), weight.to(dt)
    bias = None if bias is None else bias.to(dt)
    rows, lead = _rows(x, dim, G * K)
    if rows.stride(-1) != 1 or (rows.stride(0) * rows.element_size()) % 16:
        rows = rows.contiguous()  # its kernels need unit column stride and 16-byte aligned rows
    xg = rows.view(-1, G, K).transpose(0, 1)
    y = _ContiguousGrad.apply(fn(xg, weight.transpose(1, 2)))
    if bias is not None:
        y = y + bias.unsqueeze(1)
    return _unrows(y.transpose(0, 1).reshape(-1, G * O), lead, dim, x.dim())


def vmap(x, weight, bias, dim=-1):
    """torch.func.vmap of F.linear over the group dimension: one bmm plus a few ops around it."""
    G, O, K = weight.shape
    dt = _compute_dtype(x, weight)  # vmap's batched linear would add the bias outside autocast
    x, weight = x.to(dt), weight.to(dt)
    bias = None if bias is None else bias.to(dt)
    rows, lead = _rows(x, dim, G * K)
    if bias is None:
        y = torch.func.vmap(lambda xi, wi: F.linear(xi, wi), in_dims=(1, 0), out_dims=1)(rows.view(-1, G, K), weight)
    else:
        y = torch.func.vmap(F.linear, in_dims=(1, 0, 0), out_dims=1)(rows.view(-1, G, K), weight, bias)
    return _unrows(y.reshape(-1, G * O), lead, dim, x.dim())


FUNCTIONS = {"loop": loop, "bmm": bmm, "matmul_channels": matmul_channels, "einsum": einsum,
             "block_diagonal": block_diagonal, "conv": conv, "grouped_mm": grouped_mm, "vmap": vmap}

# The weight's memory order each strategy reads fastest; its shape is (G, out, in) either way. "linear": (G, out,
# in) in memory, as nn.Linear holds it (matmul broadcasts and conv reshapes the weight in that order: from the
# other order each call pays a transposing copy). "gemm": (G, in, out) in memory, the batched GEMM's B operand,
# read without a transpose. Measured on an Intel Xeon, one thread, batch 4 × length 64: the other order cost
# matmul_channels up to 1.3× and conv 1.2×; bmm and einsum 1.25× at 64 groups of 8 (forward).
LAYOUT = {"loop": "linear", "matmul_channels": "linear", "conv": "linear", "block_diagonal": "linear",
          "vmap": "linear", "bmm": "gemm", "einsum": "gemm", "grouped_mm": "gemm"}


def layout_of(weight: torch.Tensor) -> str:
    """"gemm" if the (G, out, in) weight is stored (G, in, out) in memory, else "linear"."""
    return "gemm" if weight.transpose(1, 2).is_contiguous() and not weight.is_contiguous() else "linear"


def laid_out(weight: torch.Tensor, strategy: str) -> torch.Tensor:
    """`weight` (same shape and values) in the memory order `strategy` reads fastest: itself if it already is."""
    if LAYOUT[strategy] == "gemm":
        return weight if weight.transpose(1, 2).is_contiguous() else weight.transpose(1, 2).contiguous().transpose(1, 2)
    return weight if weight.is_contiguous() else weight.contiguous()


def _grouped_mm_fn():
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


# One query for "is autocast on for any device" (~0.1 µs) where torch has it, instead of one per device type.
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _autocast_on(device_type: str) -> bool:
    if device_type not in ("cpu", "cuda"):
        return False  # meta (the op traces): no autocast there
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # older torch: no device argument
        return torch.is_autocast_enabled() if device_type == "cuda" else torch.is_autocast_cpu_enabled()


def _compute_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    dev = x.device.type
    try:
        if torch.is_autocast_enabled(dev):
            return torch.get_autocast_dtype(dev)
    except (TypeError, RuntimeError, AttributeError):  # older torch: the one-argument forms are missing
        if dev == "cuda" and torch.is_autocast_enabled():
            return torch.get_autocast_gpu_dtype()
        if dev == "cpu" and torch.is_autocast_cpu_enabled():
            return torch.get_autocast_cpu_dtype()
    return torch.promote_types(x.dtype, weight.dtype)
