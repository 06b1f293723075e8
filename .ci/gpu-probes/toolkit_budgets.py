"""Does max_time bound the toolkit's timings on a GPU? (< 30 s on an H100; prints, never raises; "needs CUDA" elsewhere.)

On the H200 (2026-11-26-b) a 3 s noise.compare_lesson in lesson 03's sweep claim ran past a 60 s test timeout, and
`record --quick` for 03 past its 25 s cap twice: blocked_autorange grew its block 10x past min_run_time (the
Timer's overhead rule wants a block of 1e4 synchronizations, ~0.1-0.2 s on a GPU), and compare_lesson gave its
rounds no limit. Since then timing.measure starts a block only when the calls timed before it say it ends in
time, and compare / compare_lesson give each measurement its share of what is left. Printed, for each case: the
budget, the wall time it took, and what the measurement kept (samples x calls, or rounds and whether the noise
rule's minimum fitted). Expected: wall time <= budget + one call + a few ms.
1. timing.measure of GPU calls from ~20 us to ~5 ms (a matmul of growing size), max_time 0.3 s.
2. noise.compare of three of those, max_time 1.5 s.
3. noise.compare_lesson on lesson 03's training step at the thread's shape, its forum variants, max_time 3 s
   (the claim test's call at group size 32, without GroupedLinear(auto) and its tuning).
"""
import time

import torch
from _probe import require_cuda, step  # .ci/gpu-probes/_probe.py (the probe's own folder is on sys.path)

require_cuda()


def main():
    from lessons_lib import noise, timing

    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    mats = {n: torch.randn(n, n, device=dev) for n in (256, 1024, 2048, 4096)}

    def measures():
        for n, a in mats.items():
            t0 = time.perf_counter()
            t = timing.measure(torch.mm, a, a, max_time=0.3, device=dev, label=f"mm {n}")
            took = time.perf_counter() - t0
            print(f"1. mm {n}: {timing.fmt_time(t.median)} a call; budget 0.3 s, took {took:.3f} s; "
                  f"{len(t.samples)} samples x {t.calls_per_sample} calls")

    def compares():
        fns = {f"mm {n}": (lambda a=a: torch.mm(a, a)) for n, a in list(mats.items())[:3]}
        t0 = time.perf_counter()
        cmp = noise.compare(fns, max_time=1.5, device=dev)
        print(f"2. compare: budget 1.5 s, took {time.perf_counter() - t0:.3f} s; "
              f"{len(next(iter(cmp.rounds.values())))} rounds; lacking: {cmp.lacking or '-'}")
        print(f"   {cmp.say_fastest('{name} is fastest, {r:.2f}x ahead of {runner_up}')}")

    def lesson03():
        from lessons_lib.lesson03_grouped_linear import crossover, lessons as L03

        lesson = L03.TRAIN_LESSON
        p = {**lesson.defaults(dev), "group_size": 32}
        names = list(crossover.FORUM_VARIANTS)
        t0 = time.perf_counter()
        cmp = noise.compare_lesson(lesson, p, dev, variants=names, rounds=5, max_rounds=9, min_run_time=0.02,
                                   max_time=3.0)
        print(f"3. compare_lesson (lesson 03 training step, {p}): budget 3 s, took {time.perf_counter() - t0:.2f} s; "
              f"{len(cmp.rounds[names[0]])} rounds of {names}; lacking: {cmp.lacking or '-'}")

    step(1, "measure", measures)
    step(2, "compare", compares)
    step(3, "compare_lesson", lesson03)


if __name__ == "__main__":
    main()
