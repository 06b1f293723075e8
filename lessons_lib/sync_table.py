"""The sync detector's tables: which aten ops make the host wait for the device.

`_SYNC_OPS`: ops seen at the dispatcher that read a device value on the host or size their
output from the data. `CUDA_KERNEL_SYNCS`: ops that read on the host *inside* ATen's CUDA code
(flagged by name on any device), with where in ATen's source and when. `BLIND_SPOTS`: what the
detector cannot see. Split from syncs.py (issue 21), which re-exports every name here. `dispatch_sync`:
the rules that read these tables for one dispatched op, on the device it runs on or in the CUDA view.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten

# --- which operations make the host wait ----------------------------------------------------

# aten ops that read a device value on the host, or whose output size depends on the data (the
# host must learn the size before it can allocate): on a GPU each one waits for the stream.
_SYNC_OPS = {
    "_local_scalar_dense": "reads a value on the host (.item(), float(t), if t:, print(t))",
    "is_nonzero": "reads a value on the host (if t:, bool(t))",
    "nonzero": "output size depends on the data",
    "masked_select": "output size depends on the data",
    "unique_dim": "output size depends on the data",
    "_unique2": "output size depends on the data",
    "unique_consecutive": "output size depends on the data",
}

# The detector sees what passes through the dispatcher. Some ops read a device value on the host
# *inside* their CUDA implementation (ATen calls .item() / .cpu() / memcpy_and_sync below the
# dispatcher), so on a GPU the read itself is invisible. These are flagged by name on ANY device
# ("syncs on CUDA"), from ATen's source. op -> (where ATen reads on the host, when, checked in).
# "src": ATen revisions in the course's source index (main-branch snapshots, not release tags);
# "2.13": the installed 2.13.0's device-generic code, the host read seen by torch.profiler on CPU.
CUDA_KERNEL_SYNCS = {
    "bincount": ("cuda/SummaryOps.cu, _bincount_cuda_template: self.min() via .cpu(), self.max().item() size "
                 "the output", "always", "src"),
    "histc": ("cuda/SummaryOps.cu, _histc_cuda_template: self.min()/.max() via .cpu()",
              "when min == max (the default range 0, 0)", "src; 2.13 (CPU reads too)"),
    "equal": ("cuda/Equal.cpp, cuda_equal: eq(a, b).all().item()", "always (it returns a Python bool)", "src"),
    "allclose": ("TensorCompare.cpp, allclose: isclose(...).all().item()", "always (it returns a Python bool)",
                 "2.13"),
    "_linalg_check_errors": ("BatchLinearAlgebra.cpp, _linalg_check_errors: reads `info` on the host",
                             "linalg.inv/cholesky/solve...; the *_ex variants skip it", "2.13"),
    "nonzero": ("cuda/Nonzero.cu, nonzero_cuda_out_impl: at::cuda::memcpy_and_sync of the count",
                "always; nonzero_static does not", "src"),
    "repeat_interleave": ("Repeat.h, repeat_interleave_common: cumsum[-1].item() and a repeats >= 0 check",
                          "without output_size=", "src; 2.13"),
    "one_hot": ("Onehot.cpp, one_hot: self.max().item()", "without num_classes (with it, CUDA relies on "
                "scatter's device asserts; the two reads a CPU run shows are CPU-only checks)", "src; 2.13"),
    "index_put_ (bool mask)": ("IndexingUtils.h, expandTensors: nonzero() of the mask", "unless ATen makes it "
                               "masked_fill_: one mask, a one-element CPU value, no accumulate (TensorAdvancedIndexing"
                               ".cpp, _index_put_impl_), as for `x[mask] = 0`", "src; 2.13; 2.14.1"),
    "masked_fill (CUDA 0-dim value)": ("cuda/Indexing.cu, masked_fill__cuda(Tensor value): value.item()",
                                       "when the value tensor is on the GPU (a CPU one is read for free)", "src"),
}
# `x[mask] = scalar`, version by version: releases before 2.15 (2.13.0 and 2.14.1 run here, with torch.profiler
# showing masked_fill_ and no nonzero) dispatch index_put_ with a one-element CPU value (on a CUDA
# tensor THPVariable_setitem makes the value on the CPU), which _index_put_impl_ turns into masked_fill_ (no
# nonzero: present in every ATen revision read, c10::optional and std::optional eras alike); 2.15 dispatches
# masked_fill_ itself (commit aa78586, CI's newest leg). No sync on any of them; a GPU 0-dim value does sync.
# Checked and found NOT to read on the host (the catalogue's false alarms that must come out clean):
# bucketize/searchsorted (cuda/Bucketization.cu: one kernel), nonzero_static (Nonzero.cu: fill value,
# no copy back), multinomial (Distributions.cpp, multinomial_out: _assert_async on 2.13 and 2.14.1; older
# releases read its validity checks with .item()), masked_fill with a CPU scalar, topk, index_select.
_KERNEL_WHY = {op: f"syncs on CUDA: {src.split(':')[0]} reads a device value on the host ({when})"
               for op, (src, when, _checked) in CUDA_KERNEL_SYNCS.items()}
BLIND_SPOTS = (
    "it watches PyTorch's dispatcher on the device it runs on: host reads inside a CUDA kernel are flagged "
    "from ATen's source (syncs.CUDA_KERNEL_SYNCS), not observed",
    "on a CPU run it cannot tell which tensors will live on the GPU: masked_fill / x[mask] = v with a GPU "
    "0-dim value syncs, with a CPU one it does not",
    "C++ extensions, custom kernels and other libraries' syncs are not seen",
)

# --- the rules: does this dispatched op make the host wait? ---------------------------------

_HOST = "cpu"
DEVICE_TYPES = ("cuda", "meta")  # the CUDA view: tensors here live on the GPU (meta stands in for one on a CPU)
_INDEX_OPS = ("index", "index_put", "index_put_", "_index_put_impl_")
HOST_INDEX_WHY = ("the index tensor is on the host: ATen first copies it to the device with a blocking copy "
                  "(TensorAdvancedIndexing.cpp, make_info); keep indices on the device")


def on_device(t) -> bool:
    """In the CUDA view: a tensor that lives on the GPU (a CUDA tensor, or a meta one standing in for it)."""
    return isinstance(t, torch.Tensor) and t.device.type in DEVICE_TYPES


def _bool_index(name: str, args) -> bool:
    """`t[mask]` / `t[mask] = v`: aten.index / index_put with a boolean index (a nonzero inside)."""
    if name not in _INDEX_OPS or len(args) < 2:
        return False
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in (args[1] or ()))


def _becomes_masked_fill(args, kwargs) -> bool:
    """index_put_ that ATen turns into masked_fill_ (no nonzero, no sync): `_index_put_impl_`'s
    canDispatchToMaskedFill in TensorAdvancedIndexing.cpp. One boolean mask on self's device, a
    one-element value on the CPU, no accumulate. `x[mask] = 0` on a GPU tensor is this case: Python
    indexing makes the value a CPU tensor for CUDA tensors (THPVariable_setitem); on `meta` it makes it
    on meta, which stands in for the CPU value here."""
    self, indices, value = args[0], [i for i in (args[1] or ()) if i is not None], args[2] if len(args) > 2 else None
    if not isinstance(value, torch.Tensor):
        return False
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    on_host = value.device.type == _HOST or value.device.type == self.device.type == "meta"  # meta: as CUDA would
    return (not accumulate and isinstance(value, torch.Tensor) and value.numel() == 1
            and on_host and len(indices) == 1 and indices[0].device == self.device)


def dispatch_sync(name: str, args, kwargs, cuda_view: bool = False) -> tuple[str, str] | None:
    """(what, why) when this dispatched op makes the host wait for a GPU; else None.

    cuda_view=False: every tensor counts as if on a GPU (the detector's rule since lesson 06: a CPU run lists
    what would stall a GPU). cuda_view=True (`syncs.cuda_syncs`): only tensors on the device count (CUDA, or
    `meta` standing in for it). An op whose tensors are all on the host waits for nothing (x[j] with a CPU
    0-dim index reads host memory: TensorIndexing.h, handleDimInMultiDimIndexing, `tensor.item()` then
    select), and an index tensor on the host used on a device tensor is copied there first with a blocking
    copy (TensorAdvancedIndexing.cpp, make_info: `indice.to(self.device())`, non_blocking=False)."""
    if cuda_view:
        if not any(on_device(t) for t in tree_flatten((args, kwargs))[0]):
            return None
        if name in _INDEX_OPS and len(args) > 1 and on_device(args[0]):
            if any(isinstance(i, torch.Tensor) and not on_device(i) for i in (args[1] or ())):
                return f"aten.{name} (index on the host)", HOST_INDEX_WHY
    if name == "nonzero":
        return "aten.nonzero", "output size depends on the data; " + _KERNEL_WHY["nonzero"]
    if name in _SYNC_OPS:
        return f"aten.{name}", _SYNC_OPS[name]
    if name == "repeat_interleave":
        if args and isinstance(args[0], torch.Tensor) and kwargs.get("output_size") is None:
            return "aten.repeat_interleave", ("output size depends on the data (pass output_size= to avoid it); "
                                              + _KERNEL_WHY["repeat_interleave"])
        return None
    if _bool_index(name, args):
        if name == "index":
            return "aten.index (bool mask)", "output size depends on the data"
        if _becomes_masked_fill(args, kwargs):
            return None
        return f"aten.{name} (bool mask)", _KERNEL_WHY["index_put_ (bool mask)"]
    if name == "histc":
        lo = args[2] if len(args) > 2 else kwargs.get("min", 0)
        hi = args[3] if len(args) > 3 else kwargs.get("max", 0)
        return ("aten.histc", _KERNEL_WHY["histc"]) if lo == hi else None
    if name in ("masked_fill", "masked_fill_") and len(args) > 2 and isinstance(args[2], torch.Tensor) \
            and (on_device(args[2]) if cuda_view else args[2].device.type == "cuda"):
        return f"aten.{name} (GPU value tensor)", _KERNEL_WHY["masked_fill (CUDA 0-dim value)"]
    if name in ("bincount", "equal", "allclose", "_linalg_check_errors"):
        return f"aten.{name}", _KERNEL_WHY[name]
    return None
