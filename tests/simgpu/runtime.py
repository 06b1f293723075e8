"""The `torch.cuda` functions the course calls, answered for a simulated GPU profile.

Availability and properties come from the profile (profiles.py); memory counters from the
allocator model (tensors.ALLOCATOR); events and streams from a one-stream model where every op
has already finished when it returns (the values are computed on the CPU), so `elapsed_time` is
the CPU's wall clock between two records. CUDA graphs are simulated by recording the ops run
during capture and running them again on replay, on the same tensors: static inputs, outputs
overwritten by each replay, and host syncs refused during capture behave as on a GPU. A refused op
invalidates the capture, and capture_end then fails leaving what torch 2.9-2.12 leave (CUDAGraph): the
pool still allocating, the default generator in capture mode, and (torch.cuda.graph) the side stream current.

Nothing here is a measurement of a GPU. The course never reports a number produced under it.
"""
from __future__ import annotations

import itertools
import time
import types

import torch
import torch.cuda
import torch.cuda.graphs
from torch.utils import _pytree as pytree

from . import tensors
from .profiles import Profile

PROFILE: Profile | None = None
SYNCS = [0]  # torch.cuda.synchronize() calls, for tests that count them


def _check_device(device=None) -> None:
    if device is None:
        return
    index = device if isinstance(device, int) else torch.device(device).index
    if isinstance(device, (str, torch.device)) and torch.device(device).type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {device}")
    if index not in (None, 0):
        raise AssertionError(f"Invalid device id {index}: the simulated machine has one GPU (cuda:0)")


def _properties(device=None):
    _check_device(device)
    p = PROFILE
    return types.SimpleNamespace(
        name=p.shown_name, major=p.capability[0], minor=p.capability[1], total_memory=p.total_memory,
        multi_processor_count=p.sm_count, L2_cache_size=p.l2_cache_bytes, is_integrated=False, warp_size=32,
        max_threads_per_multi_processor=2048 if p.capability[0] >= 8 else 1024, is_multi_gpu_board=False)


def synchronize(device=None) -> None:
    _check_device(device)
    if tensors.capturing:
        raise tensors.refuse_in_capture("torch.cuda.synchronize()")
    SYNCS[0] += 1


class Event:
    """torch.cuda.Event: records the wall clock; every op has finished by the time it is recorded."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 external: bool = False):
        self.enable_timing, self._at = enable_timing, None

    def record(self, stream=None) -> None:
        self._at = time.perf_counter()

    def synchronize(self) -> None:
        if tensors.capturing:
            raise tensors.refuse_in_capture("Event.synchronize()")

    def query(self) -> bool:
        return True

    def wait(self, stream=None) -> None:
        pass

    def elapsed_time(self, end: "Event") -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._at is None or end._at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end._at - self._at) * 1e3


class Stream:
    """torch.cuda.Stream on the one simulated queue: ordering is trivially kept. Which stream is current is
    tracked (torch.cuda.stream, set_stream), since code that fails halfway can leave a side stream current."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        _check_device(device)
        self.device = torch.device("cuda", 0)
        self.priority = priority

    def synchronize(self) -> None:
        synchronize()

    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def __enter__(self):
        self._ctx = StreamContext(self)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


_DEFAULT_STREAM = None
_CURRENT_STREAM: list = [None]  # None: the default stream


def default_stream(device=None) -> Stream:
    global _DEFAULT_STREAM
    _check_device(device)
    _DEFAULT_STREAM = _DEFAULT_STREAM or Stream()
    return _DEFAULT_STREAM


def current_stream(device=None) -> Stream:
    _check_device(device)
    return _CURRENT_STREAM[0] or default_stream()


def set_stream(s) -> None:
    if s is not None:
        _CURRENT_STREAM[0] = s


class StreamContext:
    """torch.cuda.stream(s): s is current inside, the previous stream again after (torch.cuda.StreamContext)."""

    def __init__(self, s):
        self.stream, self._before = s, None

    def __enter__(self):
        self._before = current_stream()
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        set_stream(self._before)
        return False


def stream(s=None) -> StreamContext:
    return StreamContext(s)


class CUDAGraph:
    """torch.cuda.CUDAGraph, simulated: capture records the ops; replay runs them again in place.

    Capture also does the bookkeeping of aten/src/ATen/cuda/CUDAGraph.cpp (torch 2.9 to 2.12) that a failed
    capture leaves behind: capture_begin starts allocating to a private pool and sets the default
    generator's capture flag (its prologue); capture_end, when an op the capture refused ran
    (cudaStreamEndCapture fails: the capture was invalidated), raises before it ends the pool's
    allocation and before the generator's epilogue clears the flag. A successful capture_end does both."""

    def __init__(self, keep_graph: bool = False):
        self._ops: list | None = None
        self._recording: list | None = None
        self._ctx = None
        self._invalidated = None
        self._pool = None

    def capture_begin(self, pool=None, capture_error_mode: str = "global", **kwargs) -> None:
        if self._ops is not None:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph (simulated GPU)")
        self._pool = tuple(pool) if pool else ("private pool", id(self))
        tensors.ALLOCATOR.begin_pool(self._pool)
        tensors.generator_capturing[0] = True  # CUDAGeneratorState::capture_prologue
        self._recording = []
        self._ctx = tensors.capture(self._recording)
        self._invalidated = self._ctx.__enter__()

    def capture_end(self) -> None:
        self._ctx.__exit__(None, None, None)  # cudaStreamEndCapture ends capture mode, failed or not
        recording, self._recording, self._ctx = self._recording, None, None
        if self._invalidated[0]:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture (simulated GPU)")
        tensors.ALLOCATOR.end_pool(self._pool)
        tensors.generator_capturing[0] = False  # CUDAGeneratorState::capture_epilogue
        self._ops = recording

    def replay(self) -> None:
        if self._ops is None:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture (simulated GPU)")
        for func, args, kwargs, result in self._ops:
            inner = pytree.tree_map(lambda x: x.inner if isinstance(x, tensors.SimulatedCudaTensor) else
                                    (torch.device("cpu") if tensors._is_cuda(x) else x), (args, kwargs))
            fresh = func(*inner[0], **inner[1])
            for new, old in zip(pytree.tree_leaves(fresh), pytree.tree_leaves(result)):
                if isinstance(old, tensors.SimulatedCudaTensor) and new is not old.inner:
                    old.inner.copy_(new)

    def reset(self) -> None:
        if self._ops is not None:  # CUDAGraph::reset releases the pool of a capture that ended
            tensors.ALLOCATOR.release_pool(self._pool)
        self._ops = None

    def pool(self):
        return self._pool or (id(self), 0)

    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, path: str) -> None:
        pass


def _is_capturing() -> bool:
    return bool(tensors.capturing)


_POOL_IDS = itertools.count(1)  # graph_pool_handle: (0, n), as CUDAGraph.cpp numbers user pools


def _memory_stats(device=None) -> dict:
    a = tensors.ALLOCATOR
    return {"allocated_bytes.all.current": a.allocated, "allocated_bytes.all.peak": a.peak,
            "reserved_bytes.all.current": a.reserved, "reserved_bytes.all.peak": a.peak_reserved,
            "num_ooms": a.ooms}


def _reset_peak(device=None) -> None:
    _check_device(device)
    a = tensors.ALLOCATOR
    a.peak, a.peak_reserved = a.allocated, a.reserved


def _calls(profile: Profile) -> dict:
    a = tensors.ALLOCATOR
    return {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "is_initialized": lambda: True, "_lazy_init": lambda: None, "init": lambda: None,
        "set_device": _check_device, "get_device_name": lambda device=None: _properties(device).name,
        "get_device_capability": lambda device=None: (_properties(device).major, _properties(device).minor),
        "get_device_properties": _properties,
        "is_bf16_supported": lambda including_emulation=True: profile.capability[0] >= 8 or including_emulation,
        "synchronize": synchronize, "Event": Event, "Stream": Stream, "current_stream": current_stream,
        "default_stream": default_stream, "stream": stream, "set_stream": set_stream, "CUDAGraph": CUDAGraph,
        "is_current_stream_capturing": _is_capturing,
        "graph_pool_handle": lambda: (0, next(_POOL_IDS)),
        "memory_allocated": lambda device=None: a.allocated, "max_memory_allocated": lambda device=None: a.peak,
        "memory_reserved": lambda device=None: a.reserved, "max_memory_reserved": lambda device=None: a.peak_reserved,
        "reset_peak_memory_stats": _reset_peak, "reset_max_memory_allocated": _reset_peak,
        "empty_cache": lambda: a.empty_cache(), "memory_stats": _memory_stats,
        "mem_get_info": lambda device=None: (a.capacity - a.reserved, a.capacity),
        "manual_seed": lambda seed: None, "manual_seed_all": lambda seed: None, "seed": lambda: None,
        "seed_all": lambda: None,
        # Random numbers on the simulated device come from the CPU generator (values live on the CPU);
        # Dynamo saves and restores the CUDA generator's state around every frame it compiles.
        "get_rng_state": lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
        "set_rng_state": lambda new_state, device="cuda": None,
        "get_rng_state_all": lambda: [torch.zeros(16, dtype=torch.uint8)],
        "set_rng_state_all": lambda new_states: None,
    }


def _c_functions() -> dict:
    """The few torch._C CUDA entry points that torch's own Python code calls directly (Dynamo asks
    for the current device; torch.cuda.graph empties the pinned-host cache): a CPU-only build lacks
    them, and the simulated machine has one device and no pinned-host cache to empty. Not
    `_cuda_getDeviceCount`: torch takes its presence to mean a CUDA build (`torch.cuda._is_compiled`)
    and would then import CUDA-only symbols that a CPU build does not have."""
    return {"_cuda_getDevice": lambda: 0, "_host_emptyCache": lambda: None}


def _pool_functions() -> dict:
    """The allocator's pool entry points (torch.cuda.memory's use_mem_pool calls them); a CPU-only build
    holds placeholders that raise, so these replace them."""
    a = tensors.ALLOCATOR
    return {"_cuda_endAllocateToPool": lambda device, pool: a.end_pool(tuple(pool)),
            "_cuda_releasePool": lambda device, pool: a.release_pool(tuple(pool))}


def activate(profile: Profile) -> None:
    """Make this process see one simulated GPU with `profile` (for the rest of the process)."""
    global PROFILE
    PROFILE = profile
    tensors.ALLOCATOR.capacity = profile.total_memory
    tensors.register()
    for name, value in _calls(profile).items():
        setattr(torch.cuda, name, value)
    for name, value in _c_functions().items():
        if not hasattr(torch._C, name):
            setattr(torch._C, name, value)
    for name, value in _pool_functions().items():
        if isinstance(getattr(torch._C, name, type), type):  # absent, or torch.cuda.memory's placeholder class
            setattr(torch._C, name, value)
    torch.cuda.memory.memory_allocated = torch.cuda.memory_allocated
    torch.cuda.graphs.graph_pool_handle = torch.cuda.graph_pool_handle
    torch.cuda.graphs._cuda_isCurrentStreamCapturing = _is_capturing
    torch.cuda.graphs.is_current_stream_capturing = _is_capturing
    # A function of its own: Dynamo registers a handler per function object and refuses the same one twice.
    torch.accelerator.synchronize = lambda device=None: synchronize(device)
    torch.cuda._course_simulated = profile.key  # what tests check to know they run under simulation
