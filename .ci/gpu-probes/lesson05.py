"""GPU probe for lesson 05 (issue 27): facts the course could not measure without a GPU. Prints them; exits 0.

    python .ci/gpu-probes/lesson05.py

1. A failed capture by hand (torch.cuda.graph of .item(), its inputs made and warmed up before): which stream is
   current after it, whether the next torch.randn raises, and whether graphs.recover_from_failed_capture undoes both
   (and the pool's memory). (2026-11-26, H200: with the inputs made inside the capture, their pageable copy failed
   first, cleanly: nothing was left behind.)
2. Seed 003 at width 512: eager, make_graphed_callables and the whole step captured, per kind (paired rounds), the
   gradient accumulations left eager, the AccumulateGrad stream warning (taught, not on stderr), and per graphed step
   the CUDA API calls
   the profiler sees (kernel launches, graph launches, event records, stream waits) and host time.
3. The kernel-bound shape: the replay alone and with the input copies, against eager, with the model's figures.
4. SGD with a device-tensor lr: foreach fails to capture; fused=True captures and lr.fill_ reaches the replay.
Each part is independent: an error is printed and the next part runs. About 20 s on an H100.
"""
from __future__ import annotations

import collections
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def part(title):
    def wrap(fn):
        def run():
            print(f"\n== {title}", flush=True)
            t0 = time.perf_counter()
            try:
                fn()
            except Exception:  # a probe reports, never stops
                print("ERROR:", traceback.format_exc(limit=4))
            print(f"   ({time.perf_counter() - t0:.1f} s)", flush=True)
        return run
    return wrap


@part("1. a failed capture by hand, and the clean-up")
def failed_capture():
    import torch
    from lessons_lib import graphs
    from lessons_lib.lesson05_cuda_graphs import on_gpu

    torch.cuda.empty_cache()
    reserved = torch.cuda.memory_reserved()
    print(on_gpu.failed_capture_demo("cuda"))
    torch.cuda.empty_cache()
    print(f"memory reserved before {reserved} B, after clean-up and empty_cache {torch.cuda.memory_reserved()} B")
    stream = torch.cuda.current_stream()
    cap, problem = graphs.try_capture(on_gpu.log_item, *on_gpu_inputs())
    print(f"try_capture: {problem}")
    print(f"after try_capture: same stream {torch.cuda.current_stream() == stream}; randn {randn_ok()}")


def on_gpu_inputs():
    from lessons_lib.lesson05_cuda_graphs.catalogue import _xy
    return _xy("cuda")


def randn_ok() -> str:
    import torch
    try:
        torch.randn(4, device="cuda")
        return "works"
    except RuntimeError as err:
        return f"raises {str(err).splitlines()[0][:100]}"


@part("2. seed 003 at width 512: eager, make_graphed_callables, whole step captured")
def seed_experiment():
    import torch
    from lessons_lib import timing
    from lessons_lib.lesson05_cuda_graphs import on_gpu

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = on_gpu.graphed_callables_ratio(512, device="cuda", max_time=4.0)
    if isinstance(r, str):
        print(r)
        return
    print(timing.table(list(r["timings"].values())))
    print(r["sentence"])
    print("left eager:", r["left_eager"])
    low, high, whole = on_gpu.graphed_band(r["params"], "cuda")
    print(f"band for the graphed ratio {low:.2f}-{high:.2f} (whole-step model {whole:.2f}); measured {r['ratio']}")
    print("taught (r['warned']):", r["warned"], "| leaked to stderr:", sorted({str(w.message)[:80] for w in seen}))
    for kind in ("Linear", "PseudoLinear"):
        x = torch.randn(64, 512, device="cuda", requires_grad=True)
        g = torch.randn(64, 512, device="cuda")
        m = torch.cuda.make_graphed_callables(on_gpu.seed_model(kind, 512, 4, "cuda"), (x,))
        for _ in range(3):
            m(x).backward(g)
        torch.cuda.synchronize()
        steps = 20
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            for _ in range(steps):
                m(x).backward(g)
            host = (time.perf_counter() - t0) / steps
            torch.cuda.synchronize()
        counts = collections.Counter()
        for e in prof.key_averages():
            for key in ("LaunchKernel", "GraphLaunch", "EventRecord", "StreamWaitEvent", "MemcpyAsync",
                        "EventCreate", "StreamSynchronize", "EventSynchronize"):
                if key in e.key and e.key.startswith(("cuda", "cu")):
                    counts[e.key] += e.count
        per_step = {k: round(v / steps, 1) for k, v in sorted(counts.items())}
        print(f"{kind} graphed: host {host * 1e6:.0f} µs a step (profiled); CUDA API calls a step: {per_step}")


@part("3. the kernel-bound shape: replay alone, and with the input copies")
def kernel_bound():
    from lessons_lib.lesson05_cuda_graphs import evidence, explore, on_gpu

    model = evidence.gpu_model(explore.KERNEL_BOUND)
    print(model)
    parts = on_gpu.graph_parts(explore.KERNEL_BOUND, "cuda", max_time=4.0)
    print(parts)
    print(f"replay ratio values {[round(v, 3) for v in parts.replay.values]}; with copies "
          f"{[round(v, 3) for v in parts.with_copies.values]}; copies model {parts.copies_model:.3f}")


@part("4. SGD with a learning rate that is a device tensor")
def tensor_lr():
    import torch
    from lessons_lib import graphs

    for options in ({}, {"fused": True}):
        p = torch.nn.Parameter(torch.ones(8, device="cuda"))
        p.grad = torch.ones(8, device="cuda")
        lr = torch.tensor(0.1, device="cuda")
        opt = torch.optim.SGD([p], lr=lr, **options)
        try:
            cap = graphs.capture(lambda: opt.step(), copy_inputs=False)
        except RuntimeError as err:
            print(f"SGD{options}: capture failed: {str(graphs._root_cause(err)).splitlines()[0][:100]}; "
                  f"randn after it {randn_ok()}")
            continue
        lr.fill_(0.5)
        before = p.detach().clone()
        cap.replay()
        print(f"SGD{options}: captured; after lr.fill_(0.5) a replay moved p by {(before - p.detach())[0].item():.3f}")


def main() -> int:
    try:
        import torch
    except ImportError:
        print("needs torch")
        return 0
    if not torch.cuda.is_available() or getattr(torch.cuda, "_course_simulated", None):
        print("needs CUDA: lesson 05's probe measures a real GPU")
        return 0
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    for fn in (failed_capture, seed_experiment, kernel_bound, tensor_lr):
        fn()
    return 0


if __name__ == "__main__":
    sys.exit(main())
