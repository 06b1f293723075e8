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


def mean_not_median(fn, sync, warmup=1, repeats=25):
    # A mean over calls 1..25, which hold two of the rare outliers (calls 1 and 4): 2.5x the ordinary call,
    # a mistake the checker must see even on a busy machine, whose late-ending waits inflate the honest
    # median it compares with (a mean over calls 3..67, 1.6x, passed there under load ~6)
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - t0) / repeats


def in_milliseconds(fn, sync):
    return solution(fn, sync) * 1e3
