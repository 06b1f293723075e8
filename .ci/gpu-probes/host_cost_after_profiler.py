"""Does a torch.profiler session slow later host work in the same process? (< 30 s on an H100; prints, never
raises; "needs CUDA" elsewhere.)

Why: on the H200 (2026-11-26, second run) the claim tests, run in one process after lesson 04's tests (which call
torch.profiler through trace.kernels and compile with Inductor), timed lesson 01's einsum at 93.5 µs where the
record and notebook 01 gave 53.8 and 51.3 µs, and lesson 06's exercise solution at 2.27x its starter where the
model with the recorded host cost per op says 3.2x. Kineto leaves CUPTI attached after a session unless
TEARDOWN_CUPTI=1 (pytorch issue 144455). Measured here, in this order, in one process:
1. a one-element add, einsum at lesson 01's thread shape, and lesson 06's exercise (solution over starter, paired
   rounds), with nothing profiled yet;
2. the same after one trace.kernels call (a torch.profiler session);
3. the same after an Inductor compile of lesson 04's PseudoLinear;
4. steps 1-2 again in a child process with TEARDOWN_CUPTI=1.
Expected if the profiler is the cause: 2 slower than 1 (einsum, the add), 4's second line like its first. Each line
also gives einsum's DEVICE time (lessons_lib.microbench.device_seconds: the host's launches hidden), what lesson
01's claim now tests against its floor: it should not move between the lines, whatever the host does.
Not run on a GPU yet (2026-11-27): listed for the next run.
"""
import os
import subprocess
import sys
import time

import torch

if not torch.cuda.is_available():
    print("needs CUDA")
    sys.exit(0)


def measure_all(label, with_exercise=True):
    from lessons_lib import microbench, timing
    from lessons_lib.lesson01_broadcast_matmul import variants as v01
    from lessons_lib.lesson06_data_movement import exercise as ex06

    dev = torch.device("cuda")
    one = torch.ones(1, device=dev)
    add = timing.measure(torch.add, one, one, min_run_time=0.2, device=dev).median
    inputs = v01.make_inputs(v01.THREAD_SHAPE, dev, torch.float32)
    einsum = timing.measure(v01.einsum, *inputs, min_run_time=0.3, device=dev).median
    queued = microbench.host_seconds(v01.einsum, *inputs, device=dev)
    on_device = microbench.device_seconds(v01.einsum, *inputs, device=dev, calls=20)
    line = (f"{label}: add {add * 1e6:.2f} µs, einsum {einsum * 1e6:.1f} µs (host {queued * 1e6:.1f} µs a call, "
            f"device {on_device * 1e6:.1f} µs)")
    if with_exercise:
        def solution(*pieces):
            return torch.cat([p / p.abs().amax().clamp_min(1e-6) for p in pieces])

        _n, ok, detail = ex06.speed_check(solution, dev, max_time=3.0)
        line += f"; 06 solution/starter {detail}"
    print(line, flush=True)


def step(what, fn):
    t = time.perf_counter()
    try:
        fn()
    except Exception as err:  # a fact to learn, not a failure of the probe
        print(f"{what}: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}")
    print(f"   ({time.perf_counter() - t:.1f} s)", flush=True)


def profile_once():
    from lessons_lib import trace

    x = torch.randn(1024, 1024, device="cuda")
    print("   kernels seen:", trace.kernels(torch.mul, x, x))


def compile_once():
    from lessons_lib.lesson04_launch_overhead import compiled

    cr = compiled.compile_and_compare({"width": 1024, "batch": 16384, "layers": 4}, "cuda", min_run_time=0.1)
    print("   ", str(cr).splitlines()[-1] if cr.compiled.ok else cr.compiled.problem)


def main():
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"TEARDOWN_CUPTI={os.environ.get('TEARDOWN_CUPTI')!r}", flush=True)
    if os.environ.get("COURSE_PROBE_CHILD"):
        step("1", lambda: measure_all("1. nothing profiled", with_exercise=False))
        step("2 (profile)", profile_once)
        step("2", lambda: measure_all("2. after one profiler session", with_exercise=False))
        return
    step("1", lambda: measure_all("1. nothing profiled"))
    step("2 (profile)", profile_once)
    step("2", lambda: measure_all("2. after one profiler session"))
    step("3 (compile)", compile_once)
    step("3", lambda: measure_all("3. after an Inductor compile", with_exercise=False))
    env = {**os.environ, "TEARDOWN_CUPTI": "1", "COURSE_PROBE_CHILD": "1"}
    print("4. a child process with TEARDOWN_CUPTI=1:", flush=True)
    step("4", lambda: subprocess.run([sys.executable, __file__], env=env, timeout=60, check=False))


if __name__ == "__main__":
    try:
        main()
    except Exception as err:  # never raise: the validation run reads what was printed
        print(f"probe stopped: {type(err).__name__}: {err}")
    sys.exit(0)
