"""Lesson 00 (timing honestly): the harness, the wrong timers, the simulated GPU, the checker."""
import json
import math
import statistics
import time

import pytest
import torch

from lessons_lib import lesson00_exercise as E
from lessons_lib import lesson00_timing as L
from lessons_lib import timing




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


# --- the harness and the wrong timers -------------------------------------------------------


def test_harness_median_of_a_known_duration():
    # What cannot vary with load: a sleep never ends early, and the samples are per call, so they
    # cannot add up to more than the wall time spent. (How close to 5 ms it lands is load's business.)
    t0 = time.perf_counter()
    t = timing.measure(time.sleep, 0.005, label="sleep 5 ms", min_run_time=0.05)
    wall = time.perf_counter() - t0
    assert t.median >= 0.005
    assert t.iqr >= 0
    assert len(t.samples) >= timing.MIN_SAMPLES
    assert sum(t.samples) * t.calls_per_sample <= wall


def test_wrong_one_thread_times_with_one_thread(monkeypatch):
    seen = []
    real_timer = timing.tbench.Timer

    def spy(*args, **kwargs):
        seen.append(kwargs.get("num_threads"))
        return real_timer(*args, **kwargs)

    monkeypatch.setattr(timing.tbench, "Timer", spy)
    a = torch.randn(64, 64)
    wrong = timing.wrong_one_thread(torch.mm, a, a, min_run_time=0.01)
    honest = timing.measure(torch.mm, a, a, min_run_time=0.01)
    assert seen == [1, torch.get_num_threads()]
    assert wrong.method.startswith("WRONG: ")
    assert wrong.method.endswith("(1 thread)")
    assert "WRONG" not in honest.method


def test_timer_default_is_one_thread():
    import inspect

    import torch.utils.benchmark as tb

    assert inspect.signature(tb.Timer).parameters["num_threads"].default == 1


# --- seed 000's sync inside one variant, on the pretend GPU ------------------------------------


def test_the_wrong_way_times_the_launches_of_the_variant_without_sync():
    # Trap 1 on a manual clock: exact, whatever the load. 20 calls without a sync cost the host
    # 20 launches; with a sync inside, 20 × (launch + kernel + sync).
    from lessons_lib.launch_queue import ManualClock

    clock = ManualClock()
    gpu = L.SimulatedGPU(launch_cost=L.SIM_LAUNCH, sync_cost=L.SIM_SYNC, clock=clock)
    syncs_inside, no_sync = L.thread000_variants(gpu, L.SIM_KERNEL)
    for fn, per_call in ((no_sync, L.SIM_LAUNCH), (syncs_inside, L.SIM_LAUNCH + L.SIM_KERNEL + L.SIM_SYNC)):
        gpu.synchronize()
        t0 = clock.now()
        for _ in range(20):
            fn()
        assert clock.now() - t0 == pytest.approx(20 * per_call)


def test_the_wall_clock_demo_never_reports_less_than_the_rules_allow():
    # Lower bounds only (noise adds time, never removes it); the rankings are recorded targets.
    r = L.demo_sync_in_one_variant(min_run_time=0.02)
    assert r["no sync · wrong"].median >= L.SIM_LAUNCH
    assert r["syncs inside · wrong"].median >= L.SIM_LAUNCH + L.SIM_KERNEL + L.SIM_SYNC
    assert r["no sync · harness"].median >= 0.95 * L.SIM_KERNEL
    assert r["syncs inside · harness"].median >= L.SIM_LAUNCH + L.SIM_KERNEL + L.SIM_SYNC
    assert all(t.method.startswith("WRONG") == k.endswith("wrong") for k, t in r.items())


def test_trap_three_bills_the_queued_work_to_the_variant_timed_next():
    from lessons_lib.launch_queue import ManualClock

    true = L.ORDER_CALLS * L.ORDER_LAUNCHES * L.ORDER_KERNEL
    queued = L.ORDER_QUEUE * L.ORDER_KERNEL
    r = L.demo_order("no sync", clock=ManualClock())
    assert r.totals["no sync"] == pytest.approx(true - queued)
    assert r.totals["syncs inside"] == pytest.approx(true + queued)
    assert r.totals["syncs inside"] / r.totals["no sync"] == pytest.approx(L.order_model_ratio())
    fair = L.demo_order("no sync", final_sync=True, clock=ManualClock())  # the harness's sync: no billing
    assert fair.totals == pytest.approx({"no sync": true, "syncs inside": true})
    with pytest.raises(ValueError, match="first"):
        L.demo_order("loop")


def test_the_thread_s_two_totals_are_one_cost_and_a_queue_of_about_1024_launches():
    rows = L.thread000_queue()
    assert len(rows) == 2  # K. Frank's torch 1.10 run and his nightly run
    assert L.thread000_launches_per_call() == 4  # two copies, the bmm, the bias add
    for q in rows:
        for reported, predicted in zip(q.reported, q.predicted):
            assert predicted == pytest.approx(reported, rel=0.01), q.lines()
        assert 1000 <= q.queued_calls * q.launches_per_call <= 1050


def test_sim_verdicts_say_a_ratio_or_not_decided():
    from lessons_lib import noise

    decided = {"wrong": noise.Estimate([5.0, 5.1, 5.2]), "harness": noise.Ratio([1.3, 1.3, 1.31]),
               "order": noise.Estimate([2.0, 2.0, 2.1])}
    lines = L.sim_verdicts(decided)
    assert "5.1× faster" in lines[0] and "1.30×" in lines[1] and "2.00×" in lines[2]
    noisy = {k: noise.Estimate([1.0, 3.0, 9.0]) for k in ("wrong", "order")}
    noisy["harness"] = noise.Ratio([1.0, 3.0, 9.0])
    assert all("not decided on this run" in line for line in L.sim_verdicts(noisy))


def test_the_model_leaves_the_device_idle_only_with_a_sync_inside():
    lines = L.sync_timeline(calls=4)
    assert (len(lines["syncs inside"].gaps), len(lines["no sync"].gaps)) == (3, 0)


def test_implicit_syncs_are_found_with_their_lines():
    found = L.host_syncs(L.implicit_syncs_example, torch.ones(8))
    assert [s.where.split("(")[0].split(" ")[0] for s in found] == ["print", "if", "kept", "return"]


@pytest.mark.parametrize("kw", [{"n": 0}, {"n": 2.5}, {"n": -3}, {"min_run_time": 0}, {"min_run_time": "1"}])
def test_demo_sizes_are_checked_before_anything_runs(kw):
    with pytest.raises(ValueError):
        L.demo_single_run("cpu", **kw)


def test_cache_demo_rotates_through_twice_the_cache_or_the_cap():
    from lessons_lib.device import last_level_cache_bytes

    assert L.sizes("cpu").rotate_bytes >= min(2 * last_level_cache_bytes("cpu"), L.ROTATE_CAP)



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
    for _ in range(2):
        v = L.check_exercise(L.broken_benchmark)
        assert not v.passed
        assert _without_gpu_line(str(v)) == _without_gpu_line(BROKEN_VERDICT)


def test_solution_passes():
    # The machine-independent lines. The [GPU] line times a real matmul against the harness: a timing,
    # so a claim test's business (under the simulated GPU it computes on a busy CPU).
    v = L.check_exercise(solution)
    assert [ok for _n, ok, _d in v.on_every_machine().checks] == [True, True, True], str(v)


def test_the_harness_itself_passes_when_it_waits():
    # Warm-up and the sync make the cold and asynchronous lines pass on any machine. The outlier line
    # depends on how many calls the Timer puts in a block (it sizes blocks from a timed calibration, so
    # from the load): a block that holds a 100 ms outlier averages it in. So only its direction is
    # asserted: the harness never reports too little (noise adds time).
    v = L.check_exercise(lambda fn, sync: timing.measure(lambda: (fn(), sync()), min_run_time=0.1).median)
    lines = {name.split(":")[0]: (ok, detail) for name, ok, detail in v.on_every_machine().checks}
    assert lines["cold start"][0] and lines["asynchronous"][0], str(v)
    assert lines["rare outliers"][0] or "too much" in lines["rare outliers"][1], str(v)


@pytest.mark.parametrize("bench, fails", [
    (first_call_only, "cold start"),
    (no_sync, "asynchronous"),
    (mean_not_median, "rare outliers"),
])
def test_each_mistake_fails_exactly_its_own_check(bench, fails):
    # The machine-independent lines only: the [GPU] line's outcome is a claim test's business.
    v = L.check_exercise(bench)
    failed = [name.split(":")[0] for name, ok, _d in v.on_every_machine().checks if ok is False]
    if bench is no_sync:  # reports too little by design; noise can only add to it, never rescue it
        assert failed == [fails], str(v)
    else:  # one call, or a mean, is at the mercy of noise: other lines may fail too, but only by reporting too much
        assert fails in failed, str(v)
        others = [(n, d) for n, ok, d in v.on_every_machine().checks if ok is False and not n.startswith(fails)]
        assert all("too much" in d for _n, d in others), str(v)
    assert not v.passed


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
    v = L.check_exercise(solution)
    assert [ok for _n, ok, _d in v.on_every_machine().checks] == [True, True, True], str(v)
    v = L.check_exercise(L.broken_benchmark)
    failed = {name.split(":")[0]: d for name, ok, d in v.on_every_machine().checks if ok is False}
    assert set(failed) == {"cold start", "rare outliers", "asynchronous"}, str(v)
    assert "too little" in failed["asynchronous"]


def test_grading_reads_noise_as_added_time_only():
    assert E._grade_one("cold", E.STEADY * 1.2, served=E.STEADY) == (True, "")
    assert E._grade_one("cold", E.STEADY * 1.6, served=E.STEADY)[0] is False
    assert E._grade_one("cold", E.STEADY * 1.6, served=E.STEADY * 1.5) == (True, "")  # the machine served it
    ok, advice = E._grade_one("async", E.STEADY * 0.5, served=E.STEADY * 2)  # never rescued by noise
    assert not ok and "too little" in advice
    assert "milliseconds" in E._grade_one("cold", E.STEADY * 1000, served=E.STEADY)[1]


def test_checker_explains_units_errors_and_wrong_arguments():
    v = L.check_exercise(in_milliseconds)
    assert all("milliseconds" in d for _n, ok, d in v.on_every_machine().checks if ok is False)
    assert not v.passed
    v = L.check_exercise(lambda fn, sync: 1 / 0)
    assert all("ZeroDivisionError" in d for _n, ok, d in v.checks if ok is False)  # the [GPU] line too
    assert not v.passed
    v = L.check_exercise(lambda fn, sync: None)
    assert not v.passed
    with pytest.raises(ValueError, match="function itself"):
        L.check_exercise(0.005)


def test_checker_stops_a_benchmark_that_never_ends():
    def forever(fn, sync):
        while True:
            fn()

    v = L.check_exercise(forever)
    assert all("more than" in d for _n, ok, d in v.checks if ok is False)  # calls capped, on a GPU too
    assert sum(ok is False for _n, ok, _d in v.on_every_machine().checks) == 3
    if torch.cuda.is_available():  # the real-matmul line is capped the same way, so it cannot hang
        assert v.checks[-1][1] is False, str(v)


# --- the demos and the record command ----------------------------------------------------------


def test_demo_no_sync_on_cpu_agrees_because_cpu_ops_are_synchronous():
    d = L.demo_no_sync("cpu", n=128, min_run_time=0.05)
    assert d.wrong.method.startswith("WRONG")
    assert d.honest.device == "cpu"
    assert d.wrong.median > 0
    assert d.honest.median > 0


def test_demo_random_data_is_decided_by_paired_rounds():
    # Which side is slower is a timing: it is a recorded target (L.targets), not a unit test. Here:
    # both sides went through the noise rule's paired rounds, and the verdict says a ratio or
    # "not decided".
    from lessons_lib import noise

    d = L.demo_random_data("cpu", rows=512, width=64, min_run_time=0.02)
    assert d.wrong.method.startswith("WRONG") and not d.honest.method.startswith("WRONG")
    assert len(d.paired.values) >= noise.MIN_ROUNDS and all(v > 0 for v in d.paired.values)
    assert d.as_dict()["paired_ratios"] == d.paired.values
    v = d.verdict()
    assert ("not decided on this run" in v) != d.paired.decided


def test_demo_verdicts_go_through_the_noise_rule():
    def t(median, iqr, label="x"):
        return timing.Timing(label, median, iqr, [median] * 8, 1, "m", "cpu")

    steady = L.Demo("k", "m", {}, t(2.0, 0.0), t(1.0, 0.01))
    assert steady.verdict().startswith("the wrong way reports 2×")
    assert L.Demo("k", "m", {}, t(1.05, 0.0), t(1.0, 0.01)).verdict().startswith("the two agree")
    noisy = L.Demo("k", "m", {}, t(2.0, 0.0), t(1.0, 0.9))
    assert "not decided on this run" in noisy.verdict()


def test_targets_judge_the_recorded_comparisons():
    section = {"demos": {"data_in_timed_region": {"paired_ratios": [3.0, 4.0, 5.0], "wrong": {"median": 1},
                                                   "honest": {"median": 1}}},
               "sim": {"wrong": [5.0, 5.2, 4.9], "harness": [1.3, 1.31, 1.29], "order": [1.2, 1.3, 1.25]}}
    got = {t["name"]: t for t in L.targets("cpu", section)}
    assert len(got) == 4
    assert [t["ok"] for t in got.values()] == [True, True, True, False]  # the order bar is 1.5
    assert all(isinstance(t["value"], float) and t["bar"] for t in got.values())


def test_demo_first_call_runs_in_a_fresh_process():
    d = L.demo_first_call("cpu", n=128, min_run_time=0.02)
    assert d.wrong.method == "WRONG: one cold call"
    assert d.wrong.median > 0
    assert d.honest.median > 0
    assert len(d.honest.samples) >= timing.MIN_SAMPLES


@pytest.mark.slow
def test_record_quick_returns_the_documented_keys():
    rec = L.record(torch.device("cpu"), quick=True)
    json.dumps(rec)  # goes into the recorded-results JSON as it is
    assert rec["quick"] is True
    assert rec["device"] == "cpu"
    assert set(rec["sizes"]) == {"matmul", "rows", "width", "cache_bytes", "rotate_bytes"}
    assert set(rec["demos"]) == {"no_sync", "first_call", "data_in_timed_region", "single_run",
                                 "mean_with_cold_start", "one_thread", "hot_cache"}
    for key, d in rec["demos"].items():
        assert d["shape"]
        assert d["mistake"]
        for side in ("wrong", "honest"):
            t = d[side]
            assert t["median"] > 0, (key, side)
            assert math.isfinite(t["median"]), (key, side)
            assert t["iqr"] >= 0, (key, side)
            assert t["samples"] >= 1
            assert t["method"]
        assert d["wrong"]["method"].startswith("WRONG"), key
        assert not d["honest"]["method"].startswith("WRONG"), key
    assert set(rec["sim"]) == {"wrong", "harness", "order"}
    assert all(len(v) >= 1 and all(x > 0 for x in v) for v in rec["sim"].values())
    assert {t["name"][:2] for t in L.targets("cpu", rec)} == {"00"}


def test_show_source_and_sizes():
    code = L.show_source(L.broken_benchmark)
    assert "def broken_benchmark(fn, sync" in code.data
    s = L.sizes("cpu")
    assert s.matmul <= 1024
    assert s.rotate_bytes >= 32 * s.cache_bytes and s.rotate_bytes <= max(L.ROTATE_CAP, 64 * 2**20)


def test_compare_rejects_a_non_function():
    with pytest.raises(ValueError, match="needs a function"):
        L.compare(torch.randn(3))


def test_compare_decides_each_ratio_over_rounds(one_thread):
    a = torch.randn(32, 32)
    c = L.compare(torch.mm, a, a, min_run_time=0.005, rounds=3, max_time=3)
    assert [t.label for t in c.timings] == ["first call", "no sync", "single run", "mean incl. cold start",
                                            "one CPU thread", "harness"]
    assert list(c.ratios) == ["first call", "no sync", "single run", "mean incl. cold start", "one CPU thread"]
    assert c.rounds >= 3
    assert all(len(r.values) == c.rounds for k, r in c.ratios.items() if k != "first call")
    for line, r in zip(c.verdicts(), c.ratios.values()):
        assert ("not decided on this run" in line) != r.decided


# --- GPU claim tests (skipped without CUDA by conftest.py) ------------------------------------


@pytest.mark.gpu
def test_gpu_no_sync_reports_the_launches_not_the_kernels():
    a = torch.randn(8192, 8192, device="cuda")
    wrong = timing.wrong_no_sync(torch.mm, a, a, repeats=10)
    honest = timing.measure(torch.mm, a, a)
    assert wrong.median * 5 <= honest.median, (wrong, honest)


@pytest.mark.gpu
def test_gpu_first_call_reports_more_than_the_harness():
    d = L.demo_first_call("cuda", n=4096)
    assert d.wrong.median > d.honest.median, str(d)


@pytest.mark.gpu
def test_gpu_checker_agrees_with_the_harness_on_a_real_kernel():
    v = L.check_exercise(solution)
    assert v.passed, str(v)
    assert v.checks[-1][1] is True, str(v)
    v = L.check_exercise(no_sync)
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


def test_recorded_gpu_summary_says_each_ratio_through_the_noise_rule(monkeypatch):
    from lessons_lib import results

    section = {"demos": {
        "steady": {"wrong": {"label": "w", "median": 2.0, "iqr": 0.0}, "honest": {"label": "h", "median": 1.0, "iqr": 0.01}},
        "noisy": {"wrong": {"label": "w", "median": 2.0, "iqr": 0.0}, "honest": {"label": "h", "median": 1.0, "iqr": 0.9}},
        "paired": {"wrong": {"label": "w", "median": 3.0, "iqr": 0.0}, "honest": {"label": "h", "median": 1.0, "iqr": 0.0},
                   "paired_ratios": [3.0, 3.1, 2.9]}}}
    rec = results.Recorded({"name": "NVIDIA T4", "kind": "cuda", "kind_of_figures": "measured", "torch": "2.13.0",
                            "date": "2026-11-24"}, {L.KEY: section})
    monkeypatch.setattr(results, "for_lesson", lambda *a, **k: [rec])
    lines = L.recorded_gpu_summary().splitlines()
    assert "(2×)" in lines[1] and "not decided on this run" in lines[2] and "(3×)" in lines[3]
