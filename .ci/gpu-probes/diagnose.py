"""GPU facts behind lessons_lib.diagnose (< 30 s on an H100; prints, never raises; "needs CUDA" elsewhere).

On lesson 07's original and fixed training loops at the GPU shape (2 steps a call, each optimizer built once and
warmed), on this GPU:
1. diagnose with device="cuda" (the step runs on the CUDA tensors, the sync detector's CUDA view of real device
   tensors; backward's ops come from autograd's device thread) against device=None (meta copies, the default): the
   kinds found, launches a step, host syncs a step. Expected: the same kinds and counts.
2. Kernels a step from torch.profiler against diagnose's launches a step (the model's kernels: trace.gpu_ops, a
   default optimizer's for loop merged as foreach).
3. Host syncs a step from torch.cuda.set_sync_debug_mode("warn") against diagnose's (expected 5 and 0).
4. The measured steady-state time a step (CUDA events, median of 5 calls) against diagnose's eager model for this
   GPU's datasheet (report.step["eager_s"]: a lower bound, so measured / model >= 1 is expected).
5. diagnose's own wall time on this machine for each run.
"""
import time
import warnings

import torch
from _probe import require_cuda, step  # .ci/gpu-probes/_probe.py (the probe's own folder is on sys.path)

require_cuda()


def main():
    import lessons_lib
    from lessons_lib import roofline
    from lessons_lib.lesson07_capstone import model as M

    dev = torch.device("cuda")
    name = torch.cuda.get_device_name()
    gpu = next((k for k in sorted(roofline.DATASHEET, key=len, reverse=True) if k.lower() in name.lower()), "H100")
    print(f"device: {name} (datasheet {gpu}), torch {torch.__version__}, CUDA {torch.version.cuda}")
    d = M.shape(dev)
    x, y = (t.to(dev) for t in M.make_data(n=2 * d["batch"], T=d["T"]))
    runs = {}
    for fixed in (False, True):
        torch.manual_seed(0)
        model = M.Model(fixed, d["C"], d["H"], d["E"]).to(dev)
        train = M.fixed_train if fixed else M.slow_train
        opt = M.optimizer(model)
        train(model, x, y, 1, d["batch"], opt=opt)
        runs["fixed" if fixed else "original"] = (model, train, opt)

    def one(stage):
        model, train, opt = runs[stage]
        call = lambda: train(model, x, y, 2, d["batch"], opt=opt)  # noqa: E731
        t = time.perf_counter()
        on_cuda = lessons_lib.diagnose(train, model, x, y, 2, d["batch"], opt=opt, device="cuda", gpu=gpu)
        t_cuda = time.perf_counter() - t
        t = time.perf_counter()
        on_meta = lessons_lib.diagnose(train, model, x, y, 2, d["batch"], opt=opt, gpu=gpu)
        t_meta = time.perf_counter() - t
        print(f"1. {stage}: device='cuda' ran on {on_cuda.ran_on} in {t_cuda:.1f} s, kinds {on_cuda.kinds}")
        print(f"   default ran on {on_meta.ran_on} in {t_meta:.1f} s, kinds {on_meta.kinds}")
        for key in ("launches", "syncs", "gemms", "copied", "saved_bytes"):
            print(f"   {key:12s} cuda {on_cuda.step[key]:>12.1f}   meta {on_meta.step[key]:>12.1f}")
        print(f"   host-sync lines (cuda): {[(f.where.text, f.numbers['per_step']) for f in on_cuda.of('host sync')]}")
        call()
        torch.cuda.synchronize()
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        launches = sum(e.count for e in prof.key_averages() if e.key in ("cudaLaunchKernel", "cuLaunchKernel",
                                                                           "cudaLaunchKernelExC", "cuLaunchKernelEx"))
        print(f"2. {stage}: kernel launches a step, profiler {launches / 2:.1f} against diagnose "
              f"{on_meta.step['launches']:.1f}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                call()
                torch.cuda.synchronize()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        synced = sum("synchroniz" in str(w.message) for w in caught)
        print(f"3. {stage}: host syncs a step, set_sync_debug_mode {synced / 2:.1f} against diagnose "
              f"{on_meta.step['syncs']:.1f}")
        times = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            call()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 2)
        ms = sorted(times)[2]
        model_ms = on_meta.step["eager_s"] * 1e3
        print(f"4. {stage}: measured {ms:.3f} ms a step, diagnose's model {model_ms:.3f} ms "
              f"(measured / model {ms / model_ms:.2f}; >= 1 expected of a lower bound)")

    for stage in ("original", "fixed"):
        step(stage, f"{stage}", lambda stage=stage: one(stage))


if __name__ == "__main__":
    main()
