"""Which aten ops a function really runs, on which shapes, and what they allocate.

`trace_ops` records every op that reaches the dispatcher, after PyTorch has decomposed
composite functions such as `matmul` and `einsum`. It works on CPU, CUDA and the `meta`
device, so a shape can be analysed without allocating it. Because the op list does not
depend on the device, notebooks print it and nbval checks it on CPU.

`kernels` asks the profiler which GPU kernels launched (CUDA only).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .display import text_table

# Ops that return a view although their schema does not say so.
_UNDECLARED_VIEWS = {"_unsafe_view", "_reshape_alias", "alias", "lift_fresh"}
GEMM_OPS = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "_grouped_mm"}
COPY_OPS = {"clone", "copy_", "_to_copy", "contiguous", "_reshape_copy", "cat", "stack", "index_put_"}


def footprint_bytes(t: torch.Tensor) -> int:
    """Bytes of memory a tensor actually spans: an expanded (stride-0) view counts once."""
    if t.numel() == 0:
        return 0
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st > 0)
    return span * t.element_size()


@dataclass(frozen=True)
class Op:
    """One dispatched aten op."""

    name: str  # e.g. "bmm" (the overload packet, without "aten.")
    in_shapes: tuple[tuple[int, ...], ...]
    out_shapes: tuple[tuple[int, ...], ...]
    dtype: str
    is_view: bool  # returns a view of an input: allocates and moves nothing
    alloc_bytes: int  # new memory its outputs occupy
    read_bytes: int  # input bytes it must read at least once
    write_bytes: int  # output bytes it writes

    @property
    def gemm(self) -> tuple[int, int, int, int] | None:
        """(batch, M, N, K) for matrix-multiply ops, else None."""
        if self.name not in GEMM_OPS:
            return None
        shapes = self.in_shapes[1:] if self.name in ("addmm", "baddbmm", "addbmm") else self.in_shapes
        a, b = shapes[0], shapes[1]
        if len(a) == 2:
            return (1, a[0], b[1], a[1])
        return (a[0], a[1], b[2], a[2])

    @property
    def flops(self) -> int:
        g = self.gemm
        return 2 * g[0] * g[1] * g[2] * g[3] if g else 0


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def _is_view_op(func) -> bool:
    name = func.overloadpacket.__name__
    if name in _UNDECLARED_VIEWS:
        return True
    rets = func._schema.returns
    return bool(rets) and rets[0].alias_info is not None and not rets[0].alias_info.is_write


@dataclass
class OpTrace:
    ops: list[Op] = field(default_factory=list)

    # --- queries -------------------------------------------------------------------------
    def named(self, *names: str) -> list[Op]:
        return [op for op in self.ops if op.name in names]

    @property
    def gemms(self) -> list[Op]:
        return [op for op in self.ops if op.gemm]

    @property
    def copies(self) -> list[Op]:
        """Ops that materialise data that already existed (clone, contiguous, cat...)."""
        return [op for op in self.ops if op.name in COPY_OPS]

    @property
    def compute_ops(self) -> list[Op]:
        """Ops that do work; on a GPU each is at least one kernel launch."""
        return [op for op in self.ops if not op.is_view]

    @property
    def alloc_bytes(self) -> int:
        return sum(op.alloc_bytes for op in self.ops)

    @property
    def moved_bytes(self) -> int:
        """Bytes read plus written by all non-view ops: a floor on memory traffic."""
        return sum(op.read_bytes + op.write_bytes for op in self.compute_ops)

    @property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops)

    # --- display -------------------------------------------------------------------------
    def table(self, views: bool = True) -> str:
        """A fixed-width table, one op a line. Deterministic, so nbval can compare it."""
        rows = [("op", "inputs", "output", "new memory")]
        for op in self.ops:
            if op.is_view and not views:
                continue
            ins = " , ".join("x".join(map(str, s)) or "scalar" for s in op.in_shapes)
            outs = " , ".join("x".join(map(str, s)) or "scalar" for s in op.out_shapes)
            mem = "view" if op.is_view else _fmt(op.alloc_bytes)
            rows.append((op.name, ins, outs, mem))
        return text_table(rows)

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for op in self.gemms:
            counts[_gemm_str(op)] = counts.get(_gemm_str(op), 0) + 1
        gemms = ", ".join(f"{n} × {g}" if n > 1 else g for g, n in counts.items()) or "none"
        copies = ", ".join(f"{op.name} {_fmt(op.alloc_bytes)}" for op in self.copies) or "none"
        return (
            f"{len(self.compute_ops)} ops that launch work, {len(self.ops) - len(self.compute_ops)} views\n"
            f"GEMMs: {gemms}\n"
            f"copies: {copies}\n"
            f"new memory: {_fmt(self.alloc_bytes)}, bytes moved (at least): {_fmt(self.moved_bytes)}"
        )

    def __repr__(self) -> str:
        return self.table()


def _fmt(n: int) -> str:
    from .device import fmt_bytes

    return fmt_bytes(n)


def _gemm_str(op: Op) -> str:
    b, m, n, k = op.gemm
    return f"{op.name} batch {b} of {m}x{k} @ {k}x{n}"


class _Recorder(TorchDispatchMode):
    def __init__(self, trace: OpTrace):
        super().__init__()
        self.trace = trace

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        view = _is_view_op(func)
        name = func.overloadpacket.__name__
        inplace = name.endswith("_") and not view
        written = sum(footprint_bytes(o) for o in outs)
        self.trace.ops.append(
            Op(
                name=name,
                in_shapes=tuple(_shape(a) for a in ins),
                out_shapes=tuple(_shape(o) for o in outs),
                dtype=str(outs[0].dtype if outs else (ins[0].dtype if ins else "")).replace("torch.", ""),
                is_view=view,
                alloc_bytes=0 if (view or inplace) else written,
                read_bytes=0 if view else sum(footprint_bytes(a) for a in ins[1 if name == "copy_" else 0 :]),
                write_bytes=0 if view else written,
            )
        )
        return out


def trace_ops(fn, *args, **kwargs) -> OpTrace:
    """Run `fn(*args, **kwargs)` once and record every aten op it dispatches."""
    trace = OpTrace()
    with _Recorder(trace):
        fn(*args, **kwargs)
    return trace


def on_meta(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Shape-only copies of tensors, so a trace of a huge shape allocates nothing."""
    return tuple(
        torch.empty_like(t, device="meta").requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
        for t in tensors
    )


def kernels(fn, *args, warmup: int = 1, **kwargs) -> list[str] | None:
    """Names of the GPU kernels one call of `fn` launches, or None when not on CUDA.

    Warm-up runs first so that one-time work (cuBLAS handles, autotuning) is not counted.
    """
    tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
    if not tensors or tensors[0].device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn(*args, **kwargs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args, **kwargs)
        torch.cuda.synchronize()
    # Every event the profiler puts on the GPU timeline: kernels, memcpys and memsets.
    return [evt.name for evt in prof.events() if str(getattr(evt, "device_type", "")).endswith("CUDA")]
