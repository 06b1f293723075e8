"""Lesson 00's tests: benchmarks a reader might write (the exercise's and the GPU claims' inputs)."""
import statistics
import time


# --- benchmarks a reader might write ------------------------------------------------------


def solution(fn, sync, warmup=3, repeats=25):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def first_call_only(fn, sync):
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def no_sync(fn, sync, warmup=3, repeats=25):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    sync()
    return statistics.median(times)


def mean_not_median(fn, sync, warmup=3, repeats=25):
    # calls 3..27 include no outlier, so start where they do
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(repeats + 40):  # long enough to meet the rare outliers
        fn()
    sync()
    return (time.perf_counter() - t0) / (repeats + 40)


def in_milliseconds(fn, sync):
    return solution(fn, sync) * 1e3
