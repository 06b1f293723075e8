"""Lesson 00's exercise: fake workloads of known duration and the checker that grades on them."""
import statistics
import time

import pytest
import torch

from lessons_lib import grading, timing
from lessons_lib.lesson00_timing import exercise as E

from .helpers import first_call_only, in_milliseconds, mean_not_median, no_sync, solution


def test_fake_workloads_take_their_stated_time():
    # The stated durations are fixed; the wall clock is only checked from below (load adds time).
    cold = E.FakeWorkload("cold")
    assert [cold.duration(i) for i in range(3)] == [E.SLOW, E.STEADY, E.STEADY]
    t0 = time.perf_counter()
    cold()
    assert time.perf_counter() - t0 >= E.SLOW
    out = E.FakeWorkload("outliers")
    assert {0, 2, 3} & E.OUTLIER_CALLS == set()
    assert {1, 4} <= E.OUTLIER_CALLS
    assert 0.02 < len(E.OUTLIER_CALLS) / E.MAX_CALLS < 0.06  # rare: about 1 call in 25
    assert [out.duration(i) for i in range(5)] == [E.STEADY, E.SLOW, E.STEADY, E.STEADY, E.SLOW]
    t0 = time.perf_counter()
    out()
    assert time.perf_counter() - t0 >= E.STEADY
    with pytest.raises(ValueError, match="kind"):
        E.FakeWorkload("warm")


# --- the exercise checker -------------------------------------------------------------------


BROKEN_VERDICT = """Exercise 00: an honest benchmark:
  ✗ cold start: first call 100 ms, then 5 ms a call (reports too much: warm up before you start the clock)
  ✗ rare outliers: 5 ms a call, about 1 call in 25 takes 100 ms (reports too much: take the median of many timed calls, not the mean or one call)
  ✗ asynchronous: each call queues 5 ms of work and returns at once (reports too little: call sync() before you stop the clock)
  – [GPU] agrees with timing.measure on a 4096×4096 matmul (no CUDA GPU here; the other checks do not depend on the machine)
Not yet: fix the ✗ lines and run the checker again."""


def _without_gpu_line(text: str) -> str:
    """The verdict without its [GPU] line (on a GPU it is a timing; nbval's sanitizer blanks it too)."""
    return "\n".join(line for line in text.splitlines() if "[GPU]" not in line)


def test_broken_benchmark_fails_with_a_deterministic_verdict():
    # the same on every machine, a GPU present or not: only the [GPU] line may differ
    # On a machine that serves each call as asked, word for word. On a busy one a mistake that only adds time
    # (cold start, rare outliers) may land where interruptions reach: that line says "not decided", never passes;
    # the asynchronous mistake reports too little, which no load can rescue.
    for _ in range(2):
        v = E.check_exercise(E.broken_benchmark)
        assert not v.passed
        got, want = (_without_gpu_line(t).splitlines() for t in (str(v), BROKEN_VERDICT))
        assert len(got) == len(want), str(v)
        for g, w in zip(got, want):
            busy = w.startswith(("  ✗ cold start:", "  ✗ rare outliers:")) and g.startswith(w.split("(")[0]) \
                and g.endswith(f"({E.NOT_DECIDED})")
            assert g == w or busy, str(v)


def test_solution_passes():
    # The machine-independent lines. The [GPU] line times a real matmul against the harness: a timing,
    # so a claim test's business (under the simulated GPU it computes on a busy CPU).
    v = E.check_exercise(solution)
    assert _honest(v), str(v)


def test_the_harness_itself_passes_when_it_waits():
    # Warm-up and the sync make the cold and asynchronous lines pass on any machine. The outlier line
    # depends on how many calls the Timer puts in a block (it sizes blocks from a timed calibration, so
    # from the load): a block that holds a 100 ms outlier averages it in. So only its direction is
    # asserted: the harness never reports too little (noise adds time).
    v = E.check_exercise(lambda fn, sync: timing.measure(lambda: (fn(), sync()), min_run_time=0.1).median)
    lines = {name.split(":")[0]: (ok, detail) for name, ok, detail in v.on_every_machine().checks}
    assert all(lines[k][0] or lines[k][1] == E.NOT_DECIDED for k in ("cold start", "asynchronous")), str(v)
    assert lines["rare outliers"][0] or "too much" in lines["rare outliers"][1] or \
        lines["rare outliers"][1] == E.NOT_DECIDED, str(v)


def test_the_harness_with_one_call_a_sample_passes_every_line():
    # The solution's form: block=1e-3 makes each sample one 5 ms call, so an outlier spoils one sample of
    # many, whatever the load (the default blocks hold 10 calls or more, and failed on a busy CI machine)
    v = E.check_exercise(lambda fn, sync: timing.measure(lambda: (fn(), sync()), min_run_time=0.1, block=1e-3).median)
    assert _honest(v), str(v)


@pytest.mark.parametrize("bench, fails", [
    (first_call_only, "cold start"),
    (no_sync, "asynchronous"),
    (mean_not_median, "rare outliers"),
])
def test_each_mistake_fails_exactly_its_own_check(bench, fails):
    # The machine-independent lines only: the [GPU] line's outcome is a claim test's business.
    v = E.check_exercise(bench)
    failed = [name.split(":")[0] for name, ok, _d in v.on_every_machine().checks if ok is False]
    assert fails in failed, str(v)  # never passed, busy or not
    others = [(n, d) for n, ok, d in v.on_every_machine().checks if ok is False and not n.startswith(fails)]
    if bench is no_sync:  # reports too little by design; noise can only add to it, never rescue it. Its other
        assert all(d == E.NOT_DECIDED for _n, d in others), str(v)  # lines are honest: at worst undecided
    else:  # one call, or a mean, is at the mercy of noise: other lines may fail too, but only by reporting too much
        assert all("too much" in d or d == E.NOT_DECIDED for _n, d in others), str(v)
    assert not v.passed


def _honest(v) -> bool:
    """An honest benchmark's lines: each passes, or says the machine was too busy to tell (never "too much")."""
    return all(ok or d == E.NOT_DECIDED for _n, ok, d in v.on_every_machine().checks)


def _a_busy_machine(monkeypatch, late=0.004):
    """Every wait of the fake workloads, and every sync of the pretend GPU, ends `late` seconds after
    its deadline: what a descheduled process sees on a loaded machine, made exact."""
    from lessons_lib import launch_queue

    real = launch_queue.wait_until

    def late_wait(deadline):
        real(deadline + late)

    monkeypatch.setattr(E, "wait_until", late_wait)
    monkeypatch.setattr(launch_queue.WallClock, "wait_until", staticmethod(late_wait))


def test_an_honest_benchmark_passes_on_a_busy_machine(monkeypatch):
    # 4 ms late on a 5 ms call is +80%: graded against the nominal time it failed; graded against what
    # the machine served, an honest benchmark passes and the mistakes still fail on their own lines.
    _a_busy_machine(monkeypatch)
    v = E.check_exercise(solution)
    assert _honest(v), str(v)
    v = E.check_exercise(E.broken_benchmark)
    failed = {name.split(":")[0]: d for name, ok, d in v.on_every_machine().checks if ok is False}
    assert set(failed) == {"cold start", "rare outliers", "asynchronous"}, str(v)
    assert "too little" in failed["asynchronous"]


def test_grading_reads_noise_as_added_time_only():
    assert E._grade_one("cold", E.STEADY * 1.2, served=E.STEADY) == (True, "")
    assert E._grade_one("cold", E.STEADY * 1.6, served=E.STEADY)[0] is False
    assert E._grade_one("cold", E.STEADY * 1.6, served=E.STEADY * 1.5) == (True, "")  # the machine served it
    # past what it served, within what interruptions add to a median of a few samples: not decided, never a pass
    assert E._grade_one("cold", E.STEADY * 2, served=E.STEADY, at_worst=E.STEADY * 3) == (False, E.NOT_DECIDED)
    assert "too much" in E._grade_one("cold", E.STEADY * 4, served=E.STEADY, at_worst=E.STEADY * 3)[1]
    ok, advice = E._grade_one("async", E.STEADY * 0.5, served=E.STEADY * 2)  # never rescued by noise
    assert not ok and "too little" in advice
    assert "milliseconds" in E._grade_one("cold", E.STEADY * 1000, served=E.STEADY)[1]


def test_checker_explains_units_errors_and_wrong_arguments():
    v = E.check_exercise(in_milliseconds)
    assert all("milliseconds" in d for _n, ok, d in v.on_every_machine().checks if ok is False)
    assert not v.passed
    v = E.check_exercise(lambda fn, sync: 1 / 0)
    assert all("ZeroDivisionError" in d for _n, ok, d in v.checks if ok is False)  # the [GPU] line too
    assert not v.passed
    v = E.check_exercise(lambda fn, sync: None)
    assert not v.passed
    with pytest.raises(ValueError, match="function itself"):
        E.check_exercise(0.005)


def test_checker_stops_a_benchmark_that_never_ends():
    def forever(fn, sync):
        while True:
            fn()

    v = E.check_exercise(forever)
    # Calls capped, on a GPU too. There (and under tests/simgpu, whose matmuls run on the CPU) a busy machine
    # may reach the time limit before MAX_CALLS real matmuls: stopped either way, never hung.
    assert all("more than" in d or (n.startswith(grading.GPU_TAG) and "still running after" in d)
               for n, ok, d in v.checks if ok is False), str(v)
    assert sum(ok is False for _n, ok, _d in v.on_every_machine().checks) == 3
    if torch.cuda.is_available():  # the real-matmul line is capped the same way, so it cannot hang
        assert v.checks[-1][1] is False, str(v)


def test_checker_stops_a_benchmark_that_never_returns(monkeypatch):
    monkeypatch.setattr(E, "WORKLOAD_TIME_LIMIT", 0.3)

    def forever(fn, sync):
        while True:
            pass

    v = E.check_exercise(forever)
    assert "endless loop" in str(v)


def test_starter_source_runs_as_pasted():
    namespace = {}
    exec(E.starter_source(), namespace)  # the notebook's editable cell: imports included
    assert callable(namespace["my_benchmark"])


# --- the [GPU] line: the reader's benchmark against the harness, in alternating rounds ---------------------
def _fixed_harness(monkeypatch, seconds):
    monkeypatch.setattr(E.timing, "measure", lambda *a, **k: timing.Timing("h", seconds, 0.0, [seconds], 1, "m", "cpu"))


def test_agreement_check_decides_from_rounds(monkeypatch):
    _fixed_harness(monkeypatch, 0.010)
    name, ok, detail = E.agreement_check(lambda fn, sync: 0.011, "cpu", n=8, max_time=5)
    assert name == "agrees with timing.measure on a 8×8 matmul" and ok is True and detail == ""
    assert E.agreement_check(lambda fn, sync: 0.002, "cpu", n=8)[1:] == (
        False, "reports too little: sync before you stop the clock")
    assert E.agreement_check(lambda fn, sync: 0.050, "cpu", n=8)[1:] == (
        False, "reports too much: warm up, and take the median")
    # one honest answer in a round, a wild one in the next: the rounds disagree, so nothing is decided
    answers = iter([0.010, 0.030, 0.004, 0.020, 0.006] * 3)
    _name, ok, detail = E.agreement_check(lambda fn, sync: next(answers), "cpu", n=8)
    assert ok is False and detail.startswith("not decided on this run"), detail


def test_agreement_check_turns_what_the_benchmark_does_into_the_detail(monkeypatch):
    _fixed_harness(monkeypatch, 0.010)
    assert E.agreement_check(lambda fn, sync: "fast", "cpu", n=8)[1:] == (
        False, "return the seconds per call as a positive number")
    assert E.agreement_check(lambda fn, sync: 1 / 0, "cpu", n=8)[2] == "your code raised ZeroDivisionError: division by zero"

    def too_many(fn, sync):
        while True:
            fn()

    assert "more than 1000 calls" in E.agreement_check(too_many, "cpu", n=8)[2]


def test_agreement_check_runs_the_real_harness_and_matmul():
    # No time is asserted (a timing on a busy machine): the line runs end to end and says ok or why not.
    name, ok, detail = E.agreement_check(solution, "cpu", n=64, max_time=3)
    assert isinstance(ok, bool) and (ok or detail), detail


def _descheduled(delay):
    """Benchmarks whose clock also sees `delay` seconds after each call (a loaded machine deschedules the
    process between fn() returning and the clock stopping): not in what the workload itself served."""
    from lessons_lib.launch_queue import wait_until

    def honest(fn, sync):
        for _ in range(3):
            fn()
        sync()
        times = []
        for _ in range(25):
            t0 = time.perf_counter()
            fn()
            sync()
            wait_until(time.perf_counter() + delay)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def mean_with_cold_start(fn, sync):
        times = []
        for _ in range(25):
            t0 = time.perf_counter()
            fn()
            sync()
            wait_until(time.perf_counter() + delay)
            times.append(time.perf_counter() - t0)
        return statistics.fmean(times)

    return honest, mean_with_cold_start


def test_the_verdict_does_not_rest_on_how_accurately_a_busy_machine_sleeps():
    # The 00 solution's nbval once failed under load: its clock saw time the workload's own waits did not.
    honest, mean = _descheduled(0.003)  # +60% on a 5 ms call
    v = E.check_exercise(honest)
    assert _honest(v), str(v)
    failed = {name.split(":")[0]: d for name, ok, d in E.check_exercise(mean).on_every_machine().checks if ok is False}
    assert {"cold start", "rare outliers"} <= set(failed), failed  # the mistakes are never passed, busy or not
    assert all(d == E.NOT_DECIDED for n, d in failed.items() if n not in ("cold start", "rare outliers")), failed


def test_a_block_timing_harness_on_a_descheduled_machine_is_not_called_too_slow():
    # Every tenth call descheduled for 30 ms: the median period is 5 ms, the mean 8 ms. A harness that times
    # blocks of calls reports about the mean, honestly; the bound allows it, and still fails a benchmark that
    # reports twice the mean (the cold start's 100 ms averaged in, say).
    w = E.FakeWorkload("cold")
    w.calls, t = 40, 0.0
    for i in range(40):
        w.starts.append(t)
        t += E.STEADY + (0.030 if i % 10 == 5 else 0.0)
    served = w.served_per_call()
    assert served == pytest.approx(0.008, rel=0.05)
    assert E._grade_one("async", 0.0078, served)[0]
    assert not E._grade_one("cold", 0.016, served)[0]
