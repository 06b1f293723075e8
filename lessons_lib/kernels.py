"""Which GPU kernels one call launches, asked of the profiler (CUDA only).

`kernels(fn, *args)` lists the kernels, memcpys and memsets on the GPU timeline; None on a CPU, or
where this torch's profiler cannot see CUDA (`profiler_sees_cuda`). Split from trace.py (issue 21),
which re-exports both names.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten


def profiler_sees_cuda() -> bool:
    """Whether this torch's profiler can record GPU kernels (a CPU-only build cannot)."""
    from torch.profiler import ProfilerActivity, supported_activities

    return ProfilerActivity.CUDA in supported_activities()


def kernels(fn, *args, warmup: int = 1, **kwargs) -> list[str] | None:
    """Names of the GPU kernels one call of `fn` launches, or None when not on CUDA or when the
    profiler cannot see CUDA (`profiler_sees_cuda`).

    Warm-up runs first so that one-time work (cuBLAS handles, autotuning) is not counted.
    """
    tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
    if not tensors or tensors[0].device.type != "cuda" or not profiler_sees_cuda():
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
