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
