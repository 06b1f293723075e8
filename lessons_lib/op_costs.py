"""What one dispatched aten op asks of memory and compute: the rules `trace.py` applies to each op.

Split from trace.py (issue 29), which re-exports every name here, so `trace.accessed_bytes`,
`trace.tf32_enabled`, `trace.GEMM_OPS` and the rest keep their import path. What the figures are, and
are not (as dispatched, not DRAM traffic; addmm's bias copy and cuBLASLt's epilogue; TF32), is said in
trace.py's docstring.
"""
from __future__ import annotations

import math

import torch

# Ops that return a view although their schema does not say so.
_UNDECLARED_VIEWS = {"_unsafe_view", "_reshape_alias", "alias", "lift_fresh"}
GEMM_OPS = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "_grouped_mm"}
_BIAS_GEMMS = {"addmm", "baddbmm", "addbmm"}  # (bias, a, b): the bias is copied into the output first
# Convolutions as they reach the dispatcher: `convolution` from F.conv*d, its backward, and the
# backend entry points a decomposition or a direct call may show.
CONV_OPS = {"convolution", "_convolution", "convolution_overrideable", "cudnn_convolution", "mkldnn_convolution",
            "miopen_convolution", "_slow_conv2d_forward", "slow_conv3d_forward", "thnn_conv2d",
            "_conv_depthwise2d", "conv_depthwise3d", "slow_conv_dilated2d", "slow_conv_dilated3d",
            "_nnpack_spatial_convolution", "cudnn_convolution_transpose", "miopen_convolution_transpose",
            "slow_conv_transpose2d", "slow_conv_transpose3d", "mkldnn_convolution_transpose",
            "convolution_backward", "convolution_backward_overrideable"}
_TRANSPOSED_CONVS = {"cudnn_convolution_transpose", "miopen_convolution_transpose", "slow_conv_transpose2d",
                     "slow_conv_transpose3d", "mkldnn_convolution_transpose"}
COPY_OPS = {"clone", "copy_", "_to_copy", "contiguous", "_reshape_copy", "cat", "stack", "index_put_"}
# Ops that launch no kernel on a GPU although they are not views (OpTrace.gpu_ops).
NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_local_scalar_dense",
             "resize_", "set_", "record_stream", "_record_function_enter_new", "_record_function_exit"}


def footprint_bytes(t: torch.Tensor) -> int:
    """Bytes of memory a tensor's view spans, first element to last: an expanded (stride-0) view
    counts once, but a strided slice spans its gaps too (every 32nd row spans the whole tensor).
    For what an op reads, use `accessed_bytes`."""
    if t.numel() == 0:
        return 0
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st > 0)
    return span * t.element_size()


def distinct_elements(t: torch.Tensor) -> int:
    """How many different memory locations a view reads: its element count, with stride-0
    (broadcast) dimensions counted once; never more than its span (overlapping windows)."""
    if t.numel() == 0:
        return 0
    distinct = math.prod(int(s) for s, st in zip(t.shape, t.stride()) if st != 0)
    span = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))
    return min(distinct, span)


def accessed_bytes(t: torch.Tensor) -> int:
    """Bytes an op reads (or writes) through this operand: distinct elements × element size."""
    return distinct_elements(t) * t.element_size()


def _storage_key(t: torch.Tensor):
    """Identity of the memory behind `t` (shared by all its views), on every device, meta included."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return id(t)


def _storage_bytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError, AttributeError):
        return t.numel() * t.element_size()


def _gemm_dims(name: str, shapes) -> tuple[int, int, int, int] | None:
    if name in _BIAS_GEMMS:
        shapes = shapes[1:]
    if len(shapes) < 2:
        return None
    a, b = shapes[0], shapes[1]
    if len(a) == 2 and len(b) == 2:
        return (1, a[0], b[1], a[1])
    if len(a) == 3 and len(b) == 3:
        return (a[0], a[1], b[2], a[2])
    if len(a) == 2 and len(b) == 3:  # _grouped_mm: (total M, K) @ (groups, K, N) with offsets
        return (1, a[0], b[2], a[1])
    return None


def conv_flops(out_shape, weight_shape, transposed: bool = False, in_shape=None) -> int:
    """2 · N · C_out · L_out · (C_in / groups) · k for a convolution, any number of spatial dims.

    The weight is (C_out, C_in / groups, *k), so that is 2 · out.numel() · prod(weight.shape[1:]).
    A transposed convolution's weight is (C_in, C_out / groups, *k): each *input* element meets
    prod(weight.shape[1:]) weights, so it is 2 · in.numel() · prod(weight.shape[1:])."""
    per = math.prod(weight_shape[1:])
    return 2 * math.prod(in_shape if transposed else out_shape) * per


def _conv_op_flops(name: str, args: tuple, kwargs: dict, outs: list[torch.Tensor]) -> int:
    def arg(i, key, default=None):
        return args[i] if len(args) > i else kwargs.get(key, default)

    if name in ("convolution_backward", "convolution_backward_overrideable"):
        grad_out, inp, weight = args[0], args[1], args[2]
        transposed = bool(arg(7, "transposed", False))
        mask = arg(10, "output_mask", (True, True, True))
        one = conv_flops(tuple(grad_out.shape), tuple(weight.shape), transposed, tuple(inp.shape))
        return one * (int(bool(mask[0])) + int(bool(mask[1])))  # grad of input, grad of weight
    inp, weight = args[0], args[1]
    if not (isinstance(inp, torch.Tensor) and isinstance(weight, torch.Tensor)) or not outs:
        return 0
    if name in ("convolution", "_convolution", "convolution_overrideable"):
        transposed = bool(arg(6, "transposed", False))
    else:
        transposed = name in _TRANSPOSED_CONVS
    return conv_flops(tuple(outs[0].shape), tuple(weight.shape), transposed, tuple(inp.shape))


def _bias_copy(name: str, args: tuple, kwargs: dict, outs: list[torch.Tensor]) -> int:
    """Bytes addmm / baddbmm / addbmm copy the (expanded) bias into the output before the GEMM."""
    if name not in _BIAS_GEMMS or not outs or not args or not isinstance(args[0], torch.Tensor):
        return 0
    beta = kwargs.get("beta", 1)
    if isinstance(beta, (int, float)) and beta == 0:
        return 0
    if _storage_key(args[0]) == _storage_key(outs[0]):  # in place (addmm_): the bias already is the output
        return 0
    return accessed_bytes(outs[0])


_LT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _lt_bias(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether CUDA's addmm would take cuBLASLt's bias epilogue (no copy of the bias): the conditions
    of Blas.cpp's addmm_out_cuda_impl / isInputCompliesAddmmCudaLt that a dispatch can see (torch 2.9
    to 2.15; the newest also needs mat1 wider than 1, which is required here for every version)."""
    if name != "addmm" or len(args) < 3 or not all(isinstance(a, torch.Tensor) for a in args[:3]):
        return False
    bias, m1, m2 = args[:3]
    beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
    return (isinstance(beta, (int, float)) and beta == 1 and bias.dim() == 1 and bias.is_contiguous()
            and bias.shape[0] == m2.shape[1] and m1.dtype in _LT_DTYPES
            and min(*m1.shape, *m2.shape) > 1)


def tf32_enabled(op: str = "matmul") -> bool:
    """Whether float32 work of `op` may run in TF32 on a CUDA GPU now: "matmul" (cuBLAS GEMMs; PyTorch's
    default since 1.12: no) or "conv" (cuDNN convolutions; default: yes).

    Since torch 2.9 each backend and op has one setting, `torch.backends.cuda.matmul.fp32_precision` and
    `torch.backends.cudnn.conv.fp32_precision` ("tf32" or "ieee"; "none" inherits
    `torch.backends.cudnn.fp32_precision`, then `torch.backends.fp32_precision`), and ATen runs TF32 exactly
    when the inherited value is "tf32" (`Context::float32Precision` and `Context::allowTF32CuDNN(op)` in
    aten/src/ATen/Context.cpp; cuBLAS's math mode and compute type in aten/src/ATen/cuda/CUDABlas.cpp). The old flags (`torch.backends.cuda.matmul.allow_tf32`,
    `torch.set_float32_matmul_precision`, `torch.backends.cudnn.allow_tf32`) write the same settings, but
    reading them raises a RuntimeError once a program has mixed the two APIs (conv and rnn set apart, say):
    they are read only on a torch without the new one."""
    if op not in ("matmul", "conv"):
        raise ValueError(f"op must be 'matmul' (cuBLAS) or 'conv' (cuDNN), got {op!r}.")
    owner = torch.backends.cuda.matmul if op == "matmul" else getattr(torch.backends.cudnn, "conv", None)
    try:
        value = getattr(owner, "fp32_precision", None)
    except (AttributeError, RuntimeError):
        value = None
    if isinstance(value, str):
        return value == "tf32"
    if op == "conv":
        return bool(getattr(torch.backends.cudnn, "allow_tf32", False))
    return bool(getattr(torch.backends.cuda.matmul, "allow_tf32", False)) or \
        torch.get_float32_matmul_precision() != "highest"


def tf32_allowed() -> bool:
    """Whether float32 matmuls may run in TF32 now (PyTorch's default since 1.12: no): `tf32_enabled("matmul")`."""
    return tf32_enabled("matmul")


def _tf32(name: str, dtype) -> bool:
    if dtype != torch.float32:
        return False
    if name in GEMM_OPS:
        return tf32_enabled("matmul")
    if name in CONV_OPS:  # cuDNN convolutions: TF32 allowed by default
        return tf32_enabled("conv")
    return False


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def _is_view_op(func) -> bool:
    name = func.overloadpacket.__name__
    if name in _UNDECLARED_VIEWS:
        return True
    rets = func._schema.returns
    return bool(rets) and rets[0].alias_info is not None and not rets[0].alias_info.is_write
