"""Simulated CUDA tensors: device `cuda:0`, values kept on the CPU, memory counted like a GPU's.

A `SimulatedCudaTensor` wraps an ordinary CPU tensor (its `inner`) and reports `cuda:0` as its
device. Every aten op on it runs on the inner tensors and its tensor results are wrapped again,
so results are real numbers and the library's checks against float64 references still hold.
Past `VALUE_LIMIT` bytes a result keeps only its shape (a `meta` inner): big allocations are
counted without using host memory, and reading their values raises `SimulationError`.

The allocator model (`ALLOCATOR`) counts the bytes of live storages the way the CUDA caching
allocator reports them (blocks rounded to 512 bytes; reserved memory kept until `empty_cache`)
and raises torch's own `OutOfMemoryError` *before* an op that would pass the card's capacity.
Workspaces inside an op are not modelled.

Tensors get onto the simulated device through torch's ordinary paths: factory functions and
`.to("cuda")` reach the CUDA dispatch key, where this module registers `empty`, `empty_strided`
and `copy_` kernels and a fallback for everything else.
"""
from __future__ import annotations

import contextlib
import weakref

import torch
from torch.utils import _pytree as pytree

DEVICE = torch.device("cuda", 0)
VALUE_LIMIT = 256 * 2**20  # bytes: above this, a simulated tensor keeps its shape but no values
BLOCK = 512  # the caching allocator rounds every block up to 512 bytes
SEGMENT = 2 * 2**20  # ... and reserves memory from the driver in 2 MiB segments (small blocks)

# Ops that read values on the host: impossible for a shape-only tensor, and forbidden while a
# CUDA graph is being captured.
READS_VALUES = {"_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "_unique2", "unique_dim",
                "unique_consecutive", "equal"}
# Ops that accept CPU tensors next to CUDA ones on a real GPU (copies, CPU index tensors).
MIXED_DEVICES_OK = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "index", "index_put",
                    "index_put_", "_index_put_impl_", "set_", "lift_fresh", "lift_fresh_copy", "_has_compatible_shallow_copy_type"}


class SimulationError(RuntimeError):
    """Something the simulated GPU cannot do (it says what), as opposed to a bug it found."""


def _round(n: int, to: int) -> int:
    # int(): a storage made while tracing with symbolic shapes (torch.compile, dynamic=True) has a SymInt size;
    # summed into `allocated` it left every later OOM message failing to format (SymFloat)
    return -(-int(n) // to) * to


class Allocator:
    """Bytes held by live simulated storages, with the counters torch.cuda reports."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.allocated = self.peak = self.reserved = self.peak_reserved = 0
        self.ooms = 0
        self.captures_underway: list = []
        self.pool_uses: dict = {}
        self._bytes: dict[int, int] = {}
        self._refs: dict[int, int] = {}

    def need(self, nbytes: int) -> None:
        """Raise CUDA's out-of-memory error if `nbytes` more would not fit."""
        want = _round(nbytes, BLOCK)
        if self.allocated + want > self.capacity:
            self.ooms += 1
            gib = 2**30
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {want / gib:.2f} GiB. GPU 0 has a total capacity of "
                f"{self.capacity / gib:.2f} GiB of which {(self.capacity - self.allocated) / gib:.2f} GiB is free. "
                f"Of the allocated memory {self.allocated / gib:.2f} GiB is allocated by PyTorch. "
                "(simulated GPU)")

    def adopt(self, key: int, nbytes: int) -> None:
        if key in self._refs:
            self._refs[key] += 1
            return
        self.need(nbytes)
        self._refs[key], self._bytes[key] = 1, _round(nbytes, BLOCK)
        self.allocated += self._bytes[key]
        self.peak = max(self.peak, self.allocated)
        self.reserved = max(self.reserved, _round(self.allocated, SEGMENT))
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def release(self, key: int) -> None:
        refs = self._refs.get(key)
        if refs is None:
            return
        if refs > 1:
            self._refs[key] = refs - 1
            return
        del self._refs[key]
        self.allocated -= self._bytes.pop(key)

    def empty_cache(self) -> None:
        self.reserved = _round(self.allocated, SEGMENT)

    # Graph capture's private pools, as CUDACachingAllocator counts them: a capture allocates to its pool
    # from beginAllocateToPool to endAllocateToPool (`captures_underway`); releasePool drops one use. While
    # any capture is under way the real allocator defers event processing (record_stream's blocks).
    # Only the bookkeeping is modelled, not which blocks belong to which pool.
    def begin_pool(self, pool) -> None:
        if pool in self.captures_underway:
            raise RuntimeError("beginAllocateToPool: already recording to mempool_id (simulated GPU)")
        self.pool_uses[pool] = self.pool_uses.get(pool, 0) + 1
        self.captures_underway.append(pool)

    def end_pool(self, pool) -> None:
        if pool not in self.captures_underway:
            raise RuntimeError("endAllocatePool: not currently recording to mempool_id (simulated GPU)")
        self.captures_underway.remove(pool)

    def release_pool(self, pool) -> None:
        uses = self.pool_uses.get(pool, 0) - 1
        if uses < 0:
            raise RuntimeError("releasePool: the pool has no use left to release (simulated GPU)")
        self.pool_uses[pool] = uses
        if uses == 0:
            del self.pool_uses[pool]


ALLOCATOR = Allocator(capacity=0)  # runtime.activate() sets the capacity from the profile


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _held(inner: torch.Tensor) -> torch.Tensor:
    """Count `inner`'s storage as allocated until this reference to it dies. (The finalizer sits on
    the inner tensor, not on the wrapper: torch refuses to swap tensors that have weak references,
    and nn.Module.to() swaps parameters.)"""
    key = _storage_key(inner)
    ALLOCATOR.adopt(key, inner.untyped_storage().nbytes())
    weakref.finalize(inner, ALLOCATOR.release, key)
    return inner


class SimulatedCudaTensor(torch.Tensor):
    """A tensor on the simulated `cuda:0`; its values live in `self.inner` (CPU, or meta if large)."""

    inner: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, inner: torch.Tensor, requires_grad: bool = False):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(), dtype=inner.dtype,
            layout=inner.layout, device=DEVICE, requires_grad=requires_grad)

    def __init__(self, inner: torch.Tensor, requires_grad: bool = False):
        self.inner = _held(inner)

    def __repr__(self, *, tensor_contents=None) -> str:
        if self.inner.is_meta:
            return f"tensor(..., size={tuple(self.shape)}, device='cuda:0', dtype={self.dtype})  # simulated, shape only"
        body = repr(self.inner.detach())
        return body[:-1] + ", device='cuda:0')" if body.endswith(")") else body

    # Traceable wrapper subclass: nn.Module.to("cuda") then swaps parameters in place.
    def __tensor_flatten__(self):
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner_tensors, ctx, outer_size, outer_stride):
        return SimulatedCudaTensor(inner_tensors["inner"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return run(func, args, kwargs or {})


def _is_cuda(x) -> bool:
    return (isinstance(x, torch.device) and x.type == "cuda") or (isinstance(x, str) and x.startswith("cuda"))


# Set by runtime while a CUDA graph is being captured: (graph, list of recorded calls).
capturing: list = []
# Per capture under way (parallel to `capturing`): True once an op the capture refuses has run. CUDA then
# marks the capture invalidated, and cudaStreamEndCapture fails (runtime.CUDAGraph.capture_end).
invalidated: list = []
# The default CUDA generator's capture flag, as torch 2.9 to 2.12 keep it (CUDAGeneratorState::capturing_,
# aten/src/ATen/cuda/CUDAGeneratorImpl.cpp): capture_begin's prologue sets it, only a capture_end that
# succeeds clears it (its epilogue), and a random op outside capture while it is set raises.
generator_capturing = [False]


def _seeded(func) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())


def refuse_in_capture(what: str) -> RuntimeError:
    """What CUDA answers an op that capture refuses; the capture is invalidated from then on."""
    if invalidated:
        invalidated[-1] = True
    return RuntimeError(f"CUDA error: operation not permitted when stream is capturing ({what}; simulated GPU)")


def run(func, args: tuple, kwargs: dict):
    """One aten op with simulated CUDA tensors among its arguments (or a factory asking for cuda)."""
    name = func.overloadpacket.__name__
    leaves = pytree.tree_leaves((args, kwargs))
    sims = [x for x in leaves if isinstance(x, SimulatedCudaTensor)]
    for x in leaves:
        if isinstance(x, torch.Tensor) and not isinstance(x, SimulatedCudaTensor) and x.device.type == "cuda":
            raise SimulationError(f"{func}: got a cuda tensor of type {type(x).__name__} that the simulated GPU did "
                                  "not make (a subclass with its own dispatch cannot be simulated).")
    if name not in MIXED_DEVICES_OK:
        for x in leaves:
            if isinstance(x, torch.Tensor) and not isinstance(x, SimulatedCudaTensor) and x.dim() > 0 and sims:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"cuda:0 and {x.device}! (in {func}; simulated GPU)")
    to_host = name == "_to_copy" and kwargs.get("device") is not None and torch.device(kwargs["device"]).type == "cpu"
    if capturing and (to_host or name in READS_VALUES):
        raise refuse_in_capture(f"{func} makes the host wait for a value")
    if not capturing and generator_capturing[0] and _seeded(func):
        raise RuntimeError("Offset increment outside graph capture encountered unexpectedly. (simulated GPU: a "
                           "failed capture left the default CUDA generator in capture mode, as torch 2.9-2.12 do)")
    shape_only = any(x.inner.is_meta for x in sims)
    if not to_host and name not in READS_VALUES:
        new = _new_bytes(func, args, kwargs)
        ALLOCATOR.need(new)
        shape_only = shape_only or new > VALUE_LIMIT
    if shape_only and (to_host or name in READS_VALUES):
        raise SimulationError(f"{func} reads the values of a simulated tensor larger than {VALUE_LIMIT >> 20} MiB; "
                              "the simulation keeps only the shape of tensors that large.")
    target = torch.device("meta") if shape_only else torch.device("cpu")
    if shape_only:
        for x in sims:  # once a tensor meets a shape-only one, it is shape-only too
            if not x.inner.is_meta:
                x.inner = _held(x.inner.to("meta"))

    def unwrap(x):
        if isinstance(x, SimulatedCudaTensor):
            return x.inner
        if isinstance(x, torch.Tensor) and shape_only and not x.is_meta:
            return x.to("meta")
        if _is_cuda(x):
            return target
        return x

    out = func(*pytree.tree_map(unwrap, args), **pytree.tree_map(unwrap, kwargs))
    if to_host:
        return out
    same = {id(x.inner): x for x in sims}
    same.update({id(x): x for x in leaves if isinstance(x, torch.Tensor) and not isinstance(x, SimulatedCudaTensor)})

    def wrap(x):
        if isinstance(x, torch.Tensor):
            found = same.get(id(x))
            return found if found is not None else SimulatedCudaTensor(x)
        return x

    result = pytree.tree_map(wrap, out)
    if capturing:
        capturing[-1].append((func, args, kwargs, result))
    return result


def _meta_like(x):
    if isinstance(x, SimulatedCudaTensor):
        x = x.inner
    if isinstance(x, torch.Tensor):
        return x if x.is_meta else torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
    if _is_cuda(x):
        return torch.device("meta")
    return x


def _new_bytes(func, args, kwargs) -> int:
    """Bytes of the new storages `func` would allocate, found by running it on meta first."""
    if func.is_view or func.overloadpacket.__name__.endswith("_"):
        return 0
    margs, mkwargs = pytree.tree_map(_meta_like, args), pytree.tree_map(_meta_like, kwargs)
    try:
        out = func(*margs, **mkwargs)
    except Exception:  # no meta kernel, or data-dependent: counted when the result is wrapped
        return 0
    seen = {_storage_key(x) for x in pytree.tree_leaves((margs, mkwargs)) if isinstance(x, torch.Tensor)}
    total = 0
    for x in pytree.tree_leaves(out):
        if isinstance(x, torch.Tensor) and _storage_key(x) not in seen:
            seen.add(_storage_key(x))
            total += x.untyped_storage().nbytes()
    return total


# --- the CUDA dispatch key: how tensors get onto the simulated device ----------------------

def _new_inner(nbytes: int, make) -> torch.Tensor:
    ALLOCATOR.need(nbytes)
    return make("meta" if nbytes > VALUE_LIMIT else "cpu")


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    meta = torch.empty(size, dtype=dtype, device="meta", memory_format=memory_format)
    inner = _new_inner(meta.untyped_storage().nbytes(),
                       lambda d: torch.empty(size, dtype=dtype, device=d, memory_format=memory_format))
    return SimulatedCudaTensor(inner)


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    meta = torch.empty_strided(size, stride, dtype=dtype, device="meta")
    inner = _new_inner(meta.untyped_storage().nbytes(), lambda d: torch.empty_strided(size, stride, dtype=dtype, device=d))
    return SimulatedCudaTensor(inner)


def _copy(dst, src, non_blocking=False):
    # Reached where torch's C++ excludes Python dispatch (torch.tensor(data, device="cuda")).
    (dst.inner if isinstance(dst, SimulatedCudaTensor) else dst).copy_(
        src.inner if isinstance(src, SimulatedCudaTensor) else src)
    return dst


def _fallback(op, *args, **kwargs):
    for x in pytree.tree_leaves((args, kwargs)):
        if isinstance(x, torch.Tensor) and x.device.type == "cuda" and not isinstance(x, SimulatedCudaTensor):
            raise SimulationError(f"{op}: a cuda tensor of type {type(x).__name__} reached the simulated GPU "
                                  "without its values (nn.Parameter.data swapped by hand?).")
    return run(op, args, kwargs)


_libraries: list = []


def register() -> None:
    """Install the CUDA-key kernels (once per process; torch keeps them until exit)."""
    if _libraries:
        return
    aten = torch.library.Library("aten", "IMPL")
    aten.impl("empty.memory_format", _empty, "CUDA")
    aten.impl("empty_strided", _empty_strided, "CUDA")
    aten.impl("copy_", _copy, "CUDA")
    everything = torch.library.Library("_", "IMPL")
    everything.fallback(_fallback, "CUDA")
    _libraries.extend([aten, everything])


@contextlib.contextmanager
def capture(record: list):
    """Record every simulated op run inside (runtime's CUDA graph capture). Yields whether the capture
    was invalidated, read after the block: [False] until an op the capture refuses runs."""
    capturing.append(record)
    invalidated.append(False)
    state = [False]
    try:
        yield state
    finally:
        capturing.pop()
        state[0] = invalidated.pop()
