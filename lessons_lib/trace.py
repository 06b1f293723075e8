"""Which aten ops a function really runs, on which shapes, and what they ask of memory.

`trace_ops` records every op that reaches the dispatcher, after PyTorch has decomposed
composite functions such as `matmul` and `einsum`. It works on CPU, CUDA and the `meta`
device, so a shape can be analysed without allocating it. Because the op list does not
depend on the device, notebooks print it and nbval checks it on CPU.

What the figures are, and are not:
- *new allocations* (`alloc_bytes`): the storage of each tensor an op creates. Memory that a
  kernel allocates for itself and frees before it returns (a cuBLAS workspace, a clone made
  inside a C++ kernel) never reaches the dispatcher and is not seen.
- *bytes the ops read and write* (`accessed_bytes`): for each op, the distinct elements of each
  operand as the op sees it (a stride-0 expanded view counts its elements once; a strided
  1/32 slice counts 1/32 of its tensor) times the element size, plus what it writes. This is
  what the ops ask for, as dispatched: it is not DRAM traffic. An intermediate that stays in
  cache is still counted, and traffic inside a kernel (tiles re-read by a GEMM) is not.
- The one copy made inside a kernel that the trace does model is the bias of `addmm`,
  `baddbmm` and `addbmm`: the expanded bias is first copied into the output, then the GEMM
  accumulates onto it (beta = 1). On CUDA, `addmm` with a 1-D contiguous bias, beta = 1, a
  floating dtype and both matrices wider than 1 in each dimension goes to cuBLASLt, whose bias
  epilogue adds the bias as it writes: no copy (`addmm_out_cuda_impl` and, from torch 2.10,
  `isInputCompliesAddmmCudaLt` in aten/src/ATen/native/cuda/Blas.cpp; DISABLE_ADDMM_CUDA_LT=1
  turns it off). A trace on CUDA tensors counts no copy there; a trace on `meta` or a CPU counts
  the copy and marks the op (`Op.lt_bias`), so a GPU's roofline can leave it out.
- GEMMs in float32 dispatched while TF32 is allowed for matmuls
  (`torch.backends.cuda.matmul.fp32_precision`, or the old `allow_tf32`: off by default since
  torch 1.12), and float32 convolutions while it is allowed for cuDNN
  (`torch.backends.cudnn.conv.fp32_precision`, or the old `torch.backends.cudnn.allow_tf32`: on by
  default), are marked `Op.tf32`: on a GPU with TF32 tensor cores they run at the TF32 rate
  (`tf32_enabled` reads either API).

`kernels` asks the profiler which GPU kernels launched (CUDA only; kernels.py, re-exported here).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from .code_lines import Where, user_frame
from .compiling import EagerWatch
from .display import count, text_table
from .kernels import kernels, profiler_sees_cuda  # noqa: F401  (re-exported: trace.kernels is their old home)
from .op_costs import (_BIAS_GEMMS, _LT_DTYPES, _TRANSPOSED_CONVS, _UNDECLARED_VIEWS, CONV_OPS,  # noqa: F401
                       COPY_OPS, GEMM_OPS, NO_KERNEL, _bias_copy, _conv_op_flops, _gemm_dims, _is_view_op, _lt_bias,
                       _shape, _storage_bytes, _storage_key, _tf32, accessed_bytes, conv_flops, distinct_elements,
                       footprint_bytes, tf32_allowed, tf32_enabled)


@dataclass(frozen=True)
class Op:
    """One dispatched aten op."""

    name: str  # e.g. "bmm" (the overload packet, without "aten.")
    in_shapes: tuple[tuple[int, ...], ...]
    out_shapes: tuple[tuple[int, ...], ...]
    dtype: str
    is_view: bool  # returns a view of an input: allocates and touches nothing
    alloc_bytes: int  # new allocation: storage of the tensors it creates (not its inner scratch memory)
    read_bytes: int  # distinct input bytes it reads, as dispatched (not DRAM traffic)
    write_bytes: int  # bytes it writes, as dispatched
    flops: int = 0  # multiply-adds × 2 of GEMMs and convolutions; 0 for other ops
    inner_copy_bytes: int = 0  # bytes copied inside the kernel (addmm/baddbmm's bias into the output)
    lt_bias: bool = False  # that copy is one cuBLASLt's bias epilogue skips on CUDA (addmm, 1-D bias)
    tf32: bool = False  # a float32 GEMM or convolution that may run in TF32 on a GPU (flags at dispatch)
    device: str = ""  # the device type its tensors live on (its first output's, else its first input's)
    where: Where | None = None  # the reader's line of code that dispatched it (a trace with lines=True)

    @property
    def gemm(self) -> tuple[int, int, int, int] | None:
        """(batch, M, N, K) for matrix-multiply ops, else None."""
        if self.name not in GEMM_OPS:
            return None
        return _gemm_dims(self.name, self.in_shapes)

    @property
    def is_conv(self) -> bool:
        return self.name in CONV_OPS

    @property
    def accessed_bytes(self) -> int:
        """Bytes it reads plus bytes it writes (as dispatched; not DRAM traffic)."""
        return self.read_bytes + self.write_bytes

    @property
    def lt_saved_bytes(self) -> int:
        """Bytes the bias copy adds (read back, and written) that cuBLASLt's epilogue saves on CUDA."""
        return 2 * self.inner_copy_bytes if self.lt_bias else 0



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
    def convolutions(self) -> list[Op]:
        return [op for op in self.ops if op.is_conv]

    @property
    def copies(self) -> list[Op]:
        """Ops that materialise data that already existed (clone, contiguous, cat...)."""
        return [op for op in self.ops if op.name in COPY_OPS]

    @property
    def copied_bytes(self) -> int:
        """Bytes written by copy ops plus the bias copies inside addmm / baddbmm / addbmm."""
        return sum(op.write_bytes for op in self.copies) + sum(op.inner_copy_bytes for op in self.ops)

    @property
    def compute_ops(self) -> list[Op]:
        """Ops that do work; on a GPU each is at least one kernel launch."""
        return [op for op in self.ops if not op.is_view]

    @property
    def gpu_ops(self) -> list[Op]:
        """The ops that would launch work on a CUDA GPU, from a trace on CUDA or on `meta` standing in for it:
        compute ops on the device, less those that launch nothing there: allocations (`empty*`: the caching
        allocator), host reads (`_local_scalar_dense`: a copy and a wait, not a kernel) and ops whose tensors
        all live on the host (an index order made on the CPU, a value read from a CPU tensor)."""
        return [op for op in self.compute_ops if op.device in ("cuda", "meta") and op.name not in NO_KERNEL]

    @property
    def alloc_bytes(self) -> int:
        """New allocations: storage of every tensor the ops create (scratch inside kernels not seen)."""
        return sum(op.alloc_bytes for op in self.ops)

    @property
    def accessed_bytes(self) -> int:
        """Bytes the ops read and write, as dispatched (distinct elements per operand). Not DRAM
        traffic: cached intermediates are counted, traffic inside a kernel is not."""
        return sum(op.read_bytes + op.write_bytes for op in self.compute_ops)

    @property
    def lt_saved_bytes(self) -> int:
        """Bytes of bias copies that cuBLASLt's epilogue saves on CUDA (0 in a trace taken on CUDA)."""
        return sum(op.lt_saved_bytes for op in self.ops)

    @property
    def tf32_flops(self) -> int:
        """FLOPs of the float32 GEMMs and convolutions that may run in TF32 on a GPU (`Op.tf32`)."""
        return sum(op.flops for op in self.ops if op.tf32)

    @property
    def moved_bytes(self) -> int:
        """Old name of `accessed_bytes`, kept for existing callers."""
        return self.accessed_bytes

    @property
    def flops(self) -> int:
        """FLOPs of the GEMMs and convolutions (2 per multiply-add); elementwise ops count 0."""
        return sum(op.flops for op in self.ops)

    # --- display -------------------------------------------------------------------------
    def table(self, views: bool = True) -> str:
        """A fixed-width table, one op a line. Deterministic, so nbval can compare it."""
        rows = [("op", "inputs", "output", "new allocation")]
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
        copies = [f"{op.name} {_fmt(op.write_bytes)}" for op in self.copies]
        copies += [f"bias into {op.name}'s output {_fmt(op.inner_copy_bytes)}" for op in self.ops if op.inner_copy_bytes]
        n = len(self.compute_ops)
        lines = [f"{count(n, 'op')} that launch{'es' if n == 1 else ''} work, "
                 f"{count(len(self.ops) - len(self.compute_ops), 'view')}",
                 f"GEMMs: {gemms}"]
        if self.convolutions:
            lines.append(f"convolutions: {len(self.convolutions)}, {self.flops / 1e9:.3g} GFLOP in all")
        lines += [f"copies: {', '.join(copies) or 'none'}",
                  f"new allocations: {_fmt(self.alloc_bytes)}; bytes the ops read and write: "
                  f"{_fmt(self.accessed_bytes)} (as dispatched; not DRAM traffic)"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()


def _fmt(n: int) -> str:
    from .device import fmt_bytes

    return fmt_bytes(n)


def _gemm_str(op: Op) -> str:
    b, m, n, k = op.gemm
    return f"{op.name} batch {b} of {m}x{k} @ {k}x{n}"


def _op_record(func, args: tuple, kwargs: dict, out) -> Op:
    """What one dispatched op asks of memory and compute, from its arguments and results."""
    ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    view = _is_view_op(func)
    name = func.overloadpacket.__name__
    # Operands only written: copy_'s destination and out= tensors.
    written_only = set()
    if name == "copy_" and args:
        written_only.add(id(args[0]))
    for o in tree_flatten(kwargs.get("out"))[0]:
        written_only.add(id(o))
    reads = [a for a in ins if id(a) not in written_only]
    in_keys = {_storage_key(a) for a in ins}
    new: dict = {}
    for o in outs:
        key = _storage_key(o)
        if key not in in_keys:
            new.setdefault(key, _storage_bytes(o))
    flops = 0
    if name in GEMM_OPS:
        dims = _gemm_dims(name, tuple(_shape(a) for a in ins))
        flops = 2 * math.prod(dims) if dims else 0
    elif name in CONV_OPS:
        flops = _conv_op_flops(name, args, kwargs, outs)
    bias_copy = 0 if view else _bias_copy(name, args, kwargs, outs)
    lt_bias = bool(bias_copy) and _lt_bias(name, args, kwargs)
    if lt_bias and outs[0].device.type == "cuda":  # cuBLASLt adds the bias in its epilogue: no copy here
        bias_copy, lt_bias = 0, False
    written = sum(accessed_bytes(o) for o in outs)
    dtype = outs[0].dtype if outs else (ins[0].dtype if ins else None)
    return Op(
        name=name,
        in_shapes=tuple(_shape(a) for a in ins),
        out_shapes=tuple(_shape(o) for o in outs),
        dtype=str(dtype or "").replace("torch.", ""),
        is_view=view,
        alloc_bytes=0 if view else sum(new.values()),
        # a bias GEMM reads the bias (copying it) and then the output it accumulates onto
        read_bytes=0 if view else sum(accessed_bytes(a) for a in reads) + bias_copy,
        write_bytes=0 if view else written + bias_copy,
        flops=flops,
        inner_copy_bytes=bias_copy,
        lt_bias=lt_bias,
        tf32=bool(flops) and _tf32(name, dtype),
        device=(outs or ins)[0].device.type if (outs or ins) else "",
    )


class _Recorder(EagerWatch):
    """Records each op into `trace`; with `lines`, each with the reader's line of code (code_lines.user_frame:
    the innermost frame outside torch and the toolkit; in backward, the line that called backward). A compiled
    function runs eagerly under it and stays compiled after (compiling.EagerWatch: on the H200 a trace of
    lesson 04's compiled function on meta left it running eagerly, "fused 1.00x eager")."""

    def __init__(self, trace: OpTrace, lines: bool = False):
        super().__init__()
        self.trace = trace
        self.lines = lines

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (_READS_ON_META[0] and func is torch.ops.aten._local_scalar_dense.default and args
                and args[0].device.type == "meta"):
            out = False if args[0].dtype == torch.bool else 0  # a value read on the host: meta has none
        else:
            out = func(*args, **kwargs)
        op = _op_record(func, args, kwargs, out)
        if self.lines:
            op = dataclasses.replace(op, where=user_frame(2))
        self.trace.ops.append(op)
        return out


_READS_ON_META = [False]  # inside meta_reads(): host reads on meta return a stand-in value


@contextlib.contextmanager
def meta_reads():
    """Inside this block, a trace on `meta` lets a training loop's host reads through: `.item()`
    (aten._local_scalar_dense) is recorded and returns 0 (False for a bool), and a boolean mask selects every
    element (an upper bound), where this torch offers that (torch.fx.experimental._config.
    meta_nonzero_assume_all_nonzero). Opt-in, for a model's work (lesson 07's loops): outside it a read on
    meta raises, which is how a checker learns that code reads values (lesson 04 then traces on the CPU)."""
    try:
        from torch.fx.experimental import _config
        patch = _config.patch(meta_nonzero_assume_all_nonzero=True) if hasattr(
            _config, "meta_nonzero_assume_all_nonzero") else contextlib.nullcontext()
    except ImportError:
        patch = contextlib.nullcontext()
    before = _READS_ON_META[0]
    with patch:
        _READS_ON_META[0] = True
        try:
            yield
        finally:
            _READS_ON_META[0] = before


_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _efficient_attention(args, kwargs):
    """CUDA's memory-efficient attention for an SDPA call on meta tensors; None when it does not apply."""
    if len(args) > len(_SDPA_ARGS) or not set(kwargs) <= set(_SDPA_ARGS):
        return None
    a = {**dict(zip(_SDPA_ARGS, args)), **kwargs}
    q, k, v, mask = a.get("query"), a.get("key"), a.get("value"), a.get("attn_mask")
    if q is None or q.device.type != "meta" or a.get("enable_gqa") or (mask is not None and mask.dtype == torch.bool):
        return None
    lse = any(t.requires_grad for t in (q, k, v))
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, mask, lse, a.get("dropout_p", 0.0), a.get("is_causal", False), scale=a.get("scale"))[0]


class _SdpaAsOnCuda(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch._C._nn.scaled_dot_product_attention:
            out = _efficient_attention(args, kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


@contextlib.contextmanager
def sdpa_as_on_cuda():
    """Inside `with sdpa_as_on_cuda():`, scaled_dot_product_attention on `meta` tensors dispatches the kernel CUDA
    picks for it: the memory-efficient one, one op forward and one backward, keeping the output and a logsumexp
    per row (with dropout, its random seed, not a mask). Meta alone would trace the math path, a (B, H, T, T)
    softmax kept for backward. CUDA's choice (sdp_utils.cpp): flash needs fp16 or bf16 on sm80+, the
    memory-efficient kernel takes float32 too; both keep O(B·H·T) for backward. Two doors: a torch-function mode
    sees the call however the reader imported it, and F.scaled_dot_product_attention is swapped for the duration
    for torch's own callers (F.multi_head_attention_forward: a torch function's internals are hidden from
    torch-function modes). Off meta, or with a boolean mask, the call is unchanged."""
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention

    def as_on_cuda(*args, **kwargs):
        out = _efficient_attention(args, kwargs)
        return sdpa(*args, **kwargs) if out is None else out

    F.scaled_dot_product_attention = as_on_cuda
    try:
        with _SdpaAsOnCuda():
            yield
    finally:
        F.scaled_dot_product_attention = sdpa


def trace_ops(fn, *args, **kwargs) -> OpTrace:
    """Run `fn(*args, **kwargs)` once and record every aten op it dispatches. (On `meta`, a host read
    raises unless the trace runs inside `meta_reads()`.)"""
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
