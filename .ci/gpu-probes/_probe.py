"""What the GPU probes share (not a probe: gpu-validate runs only the files whose names start with a letter).

Each probe prints facts and never raises: on a machine without CUDA it says "needs CUDA" and exits 0."""
import sys
import time


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        print("needs CUDA")
        sys.exit(0)


def step(i, what, fn):
    """Run one numbered part of a probe: an exception is a fact to print, and the part's seconds follow it."""
    t = time.perf_counter()
    try:
        fn()
    except Exception as err:  # a fact to learn, not a failure of the probe
        print(f"{i}. {what}: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}")
    print(f"   ({time.perf_counter() - t:.1f} s)")


def cuda_ms(fn, reps=7):
    """Wall time of one call of `fn` on the GPU in ms, host and device together (CUDA events around the call, the
    device awaited after it): the median of `reps` calls after one warm-up. For a call's DEVICE time alone, with
    the host's launches hidden, use lessons_lib.microbench.device_seconds."""
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]
