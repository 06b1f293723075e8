"""The generic lesson machinery: validation at the door, correctness that cannot be fooled,
stop, the time estimate, and freeing memory after an OOM."""
import dataclasses
import functools
import math
import types

import pytest
import torch
import torch.utils.benchmark as tbench

from lessons_lib import device, grading, roofline, timing
from lessons_lib.lesson import (CALIBRATION_CALL, Calibration, Lesson, Param, Stopped, Variant, _schedule,
                                crossover, harness_seconds)


def _toy(**kw):
    return Lesson(
        key="toy", title="toy",
        params=[Param("n", "n", cpu=8, gpu=8, lo=1, hi=1 << 20)],
        variants=[Variant("mm", lambda a, b: a @ b), Variant("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b))],
        make_inputs=lambda p, d, dt: (torch.randn(p["n"], p["n"], device=d, dtype=dt),
                                      torch.randn(p["n"], p["n"], device=d, dtype=dt)),
        peak_bytes=lambda p, dt: 3 * p["n"] ** 2 * 4,
        reduction=lambda p: p["n"], baseline="mm", **kw,
    )


@pytest.fixture
def no_alloc(monkeypatch):
    toy = _toy()
    monkeypatch.setattr(toy, "make_inputs", lambda *a: pytest.fail("allocated before refusing"))
    return toy


# --- correctness that cannot be fooled -----------------------------------------------------------
def test_nan_fails_the_correctness_check():
    toy = _toy()
    toy.variants.append(Variant("nan", lambda a, b: (a @ b) * float("nan")))
    rows = {r.variant: r for r in toy.check_correct([{"n": 5}], seed=1)}
    assert rows["nan"].ok is False


def test_inf_fails_the_correctness_check():
    toy = _toy()
    toy.variants.append(Variant("inf", lambda a, b: (a @ b) / 0.0))
    rows = {r.variant: r for r in toy.check_correct([{"n": 5}], seed=1)}
    assert rows["inf"].ok is False


def test_a_variant_that_overwrites_its_input_cannot_fool_the_next_one():
    toy = _toy()
    toy.variants.insert(0, Variant("vandal", lambda a, b: a.zero_() @ b))
    rows = {r.variant: r for r in toy.check_correct([{"n": 5}], seed=1)}
    assert rows["vandal"].ok is False


def test_the_others_still_pass_after_a_vandal():
    toy = _toy()
    toy.variants.insert(0, Variant("vandal", lambda a, b: a.zero_() @ b))
    rows = {r.variant: r for r in toy.check_correct([{"n": 5}], seed=1)}
    assert rows["einsum"].ok is True


def test_rows_are_named():
    row = _toy().check_correct([{"n": 5}], seed=1)[0]
    assert (row.variant, row.params["n"], row.ok) == ("mm", 5, True)


def test_rel_error_is_inf_for_a_wrong_shape():
    assert grading.rel_error(torch.ones(2, 3), torch.ones(3, 2)) == math.inf


# --- validation at the door ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.complex64, "float8", None, 3])
def test_bad_dtypes_are_refused(no_alloc, dtype):
    with pytest.raises(ValueError, match="dtype"):
        no_alloc.run({"n": 4}, "cpu", dtype)


@pytest.mark.parametrize("dev", ["meta", "mps", "gpu0", 3])
def test_bad_devices_are_refused(no_alloc, dev):
    with pytest.raises(ValueError, match="device|cpu"):
        no_alloc.run({"n": 4}, dev)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_refused(no_alloc):
    with pytest.raises(ValueError, match="no CUDA GPU"):
        no_alloc.run({"n": 4}, "cuda")


@pytest.mark.parametrize("method", ["work", "traces", "work_table"])
def test_meta_analyses_check_parameter_names(method):
    with pytest.raises(ValueError, match="Unknown parameter"):
        getattr(_toy(), method)({"nn": 4})


@pytest.mark.parametrize("method", ["work", "traces", "work_table"])
def test_meta_analyses_refuse_zero_sizes(method):
    with pytest.raises(ValueError, match="between"):
        getattr(_toy(), method)({"n": 0})


def test_meta_analyses_allow_shapes_too_big_to_allocate():
    assert _toy().work({"n": 1 << 20})["mm"].flops == 2 * (1 << 20) ** 3


def test_one_variant_name_as_a_string_is_one_name():
    run = _toy().run({"n": 4}, "cpu", variants="einsum", min_run_time=0.01)
    assert list(run.timings) == ["einsum"]


def test_unknown_variant_is_refused(no_alloc):
    with pytest.raises(ValueError, match="No variant"):
        no_alloc.run({"n": 4}, "cpu", variants=["einsum", "fast"])


@pytest.mark.parametrize("values", [[], "48", None])
def test_sweep_refuses_bad_values(no_alloc, values):
    with pytest.raises(ValueError):
        no_alloc.sweep("n", values, device="cpu")


def test_sweep_refuses_an_unknown_parameter(no_alloc):
    with pytest.raises(ValueError, match="no parameter"):
        no_alloc.sweep("m", [1, 2], device="cpu")


@pytest.mark.parametrize("t", ["fast", 0, -1.0, float("nan")])
def test_min_run_time_must_be_a_positive_number(no_alloc, t):
    with pytest.raises(ValueError, match="min_run_time"):
        no_alloc.run({"n": 4}, "cpu", min_run_time=t)


# --- stop, estimate, prepare ---------------------------------------------------------------------
def test_stop_raises_before_the_next_variant():
    calls = []

    def stop():
        calls.append(1)
        return len(calls) > 1

    with pytest.raises(Stopped):
        _toy().run({"n": 4}, "cpu", min_run_time=0.01, stop=stop)


def test_estimate_grows_with_the_number_of_points():
    toy = _toy()
    one = toy.estimate_seconds({"n": 64}, "cpu", min_run_time=0.1)
    assert toy.estimate_seconds({"n": 64}, "cpu", min_run_time=0.1, points=4) == pytest.approx(4 * one)


def test_estimate_covers_the_minimum_run_time_of_each_variant():
    assert _toy().estimate_seconds({"n": 64}, "cpu", min_run_time=0.1) >= 0.2


def test_prepare_runs_outside_the_clock_and_is_reported():
    toy = _toy()
    toy.variants[1] = Variant("einsum", toy.variants[1].fn, prepare=lambda fn, *inputs: fn)
    run = toy.run({"n": 4}, "cpu", min_run_time=0.01)
    assert set(run.prepare_seconds) == {"einsum"}


# --- the explorer's estimate: the harness's schedule and the calibration, on scripted timings -----------
class _Clock:
    """A fake clock: each read costs `overhead` (what torch's Timer measures as its own), a call `per_call`."""

    def __init__(self, overhead: float):
        self.t, self.overhead = 0.0, overhead

    def __call__(self) -> float:
        t = self.t
        self.t += self.overhead
        return t


@pytest.mark.parametrize("max_time", [None, 10.0])
@pytest.mark.parametrize("per_call", [1e-6, 4.3e-5, 4.3e-4, 5e-3, 0.05, 0.6, 3.0])
def test_the_harness_schedule_is_what_measure_does_call_by_call(monkeypatch, per_call, max_time):
    # timing.measure and torch's Timer run on a scripted clock: block-size search, blocks, the samples
    # added up to MIN_SAMPLES after Timer.timeit's own warm-up, max_time's stop after two samples
    clock = _Clock(overhead=3e-7)
    monkeypatch.setattr(timing, "tbench", types.SimpleNamespace(Timer=functools.partial(tbench.Timer, timer=clock)))
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=clock))

    def call():
        clock.t += per_call

    timing.measure(call, min_run_time=0.1, max_time=max_time)
    assert clock.t == pytest.approx(_schedule(per_call, 0.1, max_time, 3e-7), rel=0.01)


def test_near_the_block_size_threshold_the_estimate_is_within_2x_of_either_schedule():
    # torch picks the block from one timed block and one measured overhead: a call whose block of 100 is
    # near 1e4 overheads gets 100 or 1000 calls a block, 0.11 s or 0.4 s here; the estimate is between
    lo, hi = (_schedule(4.3e-5, 0.1, None, ovh) for ovh in (2e-7, 6e-7))
    assert hi > 3 * lo
    est = harness_seconds(4.3e-5, 0.1, overhead=4e-7)
    assert lo < est < hi and est / lo < 2 and hi / est < 2
    # clear of the threshold, the schedule itself
    assert harness_seconds(5e-3, 0.1, overhead=3e-7) == pytest.approx(_schedule(5e-3, 0.1, None, 3e-7))


def _scripted(toy, monkeypatch, seconds):
    """toy's calls take seconds(shape) (no metrics, inputs free); returns the list of shapes timed."""
    timed = []

    def time_once(name, shape, dev, dtype):
        timed.append(shape["n"])
        return seconds(shape), 0.0, 0.0

    monkeypatch.setattr(toy, "_time_once", time_once)
    return timed


def _floor(toy, n, name="mm"):
    return roofline.measure_peaks(torch.device("cpu")).floor(toy.work({"n": n})[name])


def test_calibration_times_the_asked_shape_when_a_call_there_is_predicted_cheap(monkeypatch):
    # a call that grows faster than its floor (cache, page faults, barriers): predicted 0.05 s by the
    # floor's ratio from the first shape, it takes 0.15 s, and the calibration has it
    toy, big = _toy(), 4096
    chain = toy.calibration_shapes({"n": big}, device="cpu", variants=["mm"])["mm"]
    assert len(chain) > 1 and chain[-1]["n"] == big
    k = 0.05 / _floor(toy, big)
    timed = _scripted(toy, monkeypatch, lambda s: k * _floor(toy, s["n"]) * (3 if s["n"] == big else 1))
    cal = toy.calibrate({"n": big}, "cpu", variants=["mm"])
    assert timed == [chain[0]["n"], big]
    [(shape, floor, call)] = cal.points["mm"]
    assert shape["n"] == big and call == pytest.approx(0.15)
    assert toy.predict(cal, {"n": big}, ["mm"], min_run_time=0.1) == pytest.approx(
        harness_seconds(0.15, 0.1, overhead=cal.timer_overhead))


def test_calibration_walks_up_only_to_calls_predicted_under_the_limit(monkeypatch):
    # calls proportional to the floor, 1 s at the asked shape: timed at the first shape, then at the
    # largest predicted under CALIBRATION_CALL, never at the asked one
    toy, big = _toy(), 4096
    chain = toy.calibration_shapes({"n": big}, device="cpu", variants=["mm"])["mm"]
    k = 1.0 / _floor(toy, big)
    timed = _scripted(toy, monkeypatch, lambda s: k * _floor(toy, s["n"]))
    toy.calibrate({"n": big}, "cpu", variants=["mm"])
    cheap = [s["n"] for s in chain if k * _floor(toy, s["n"]) <= CALIBRATION_CALL]
    assert big not in timed and timed == list(dict.fromkeys([chain[0]["n"], max(cheap)]))


def test_a_shared_cache_times_each_shape_once(monkeypatch):
    toy = _toy()
    timed = _scripted(toy, monkeypatch, lambda s: 1e-4)
    cache = {}
    for _ in range(2):
        toy.calibrate({"n": 16}, "cpu", cache=cache)
    assert timed == [16, 16]  # once per variant


def test_the_prediction_makes_the_inputs_once():
    # Lesson.run makes the inputs once for all its variants; metrics run once per variant
    toy = _toy()
    pk = roofline.measure_peaks(torch.device("cpu"))
    shape = {"n": 8}
    points = {n: [(shape, pk.floor(toy.work(shape)[n]), 1e-3)] for n in ("mm", "einsum")}
    bare = Calibration(points, torch.float32, "cpu", {"mm": 0.0, "einsum": 0.0}, {"mm": 0.0, "einsum": 0.0}, pk, 3e-7)
    full = dataclasses.replace(bare, metric_s={"mm": 0.5, "einsum": 0.5}, inputs_s={"mm": 2.0, "einsum": 2.0})
    assert toy.predict(full, shape, min_run_time=0.1) - toy.predict(bare, shape, min_run_time=0.1) == \
        pytest.approx(2.0 + 2 * 0.5)


# --- OOM: refused, freed, and the kernel goes on --------------------------------------------------
def test_oom_guard_frees_the_failed_steps_tensors():
    import weakref

    refs = []

    def step():
        big = torch.ones(1000)
        refs.append(weakref.ref(big))
        oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        raise oom("CUDA out of memory (simulated)")

    with pytest.raises(device.DoesNotFit) as info:
        with device.oom_guard("cpu"):
            step()
    assert refs[0]() is None, "the OOM's traceback kept the failed step's tensor alive"
    assert info.value.__suppress_context__


# --- moved from test_toolkit.py: one input tensor passed twice ------------------------------------
# --- a tiny lesson to drive the generic machinery --------------------------------------------
def _toy_shared_inputs():
    return Lesson(
        key="toy", title="toy",
        params=[Param("n", "n", cpu=8, gpu=8, lo=1, hi=1 << 20)],
        variants=[Variant("mm", lambda a, b: a @ b), Variant("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b))],
        make_inputs=lambda p, d, dt: (torch.randn(p["n"], p["n"], device=d, dtype=dt),) * 2,
        peak_bytes=lambda p, dt: 3 * p["n"] ** 2 * 4,
        reduction=lambda p: p["n"], baseline="mm",
    )


def test_lesson_check_correct_flags_a_wrong_variant():
    toy = _toy_shared_inputs()
    assert all(r[4] for r in toy.check_correct([{"n": 5}, {"n": 8}], seed=1))
    toy.variants.append(Variant("wrong", lambda a, b: a @ b + 1e-3))
    report = toy.correctness_report(toy.check_correct([{"n": 5}], seed=1))
    assert report.startswith("✗")
    assert "wrong" in report


def test_lesson_check_refuses_bad_input_before_allocating(monkeypatch):
    toy = _toy_shared_inputs()
    monkeypatch.setattr(toy, "make_inputs", lambda *a: pytest.fail("allocated"))
    for bad, msg in (({"n": 0}, "between"), ({"n": 2.5}, "whole number"), ({"m": 3}, "Unknown"),
                     ({"n": 1 << 20}, "needs about")):
        with pytest.raises(ValueError, match=msg):
            toy.run(bad, "cpu")


def test_crossover():
    assert crossover([1, 2, 4, 8], [1, 2, 3, 9], [2, 3, 4, 5]) == 8
    assert crossover([1, 2], [1, 1], [2, 2]) is None


# --- issue 28 §2: a run and a sweep say what runs next (the explorer's status) ----------------------------
def test_run_and_sweep_tell_what_they_do_next():
    toy = _toy()
    toy.variants[0] = dataclasses.replace(toy.variants[0], prepare=lambda fn, *inputs: fn)
    said = []
    toy.run({"n": 4}, "cpu", min_run_time=0.01, on_phase=said.append)
    assert said == ["making the inputs", "preparing mm (tuning or compiling: not in its bar)",
                    "measuring mm (1 of 2)", "measuring einsum (2 of 2)"]
    said.clear()
    toy.sweep("n", [2, 4], min_run_time=0.01, progress=False, on_phase=said.append)
    assert said[-1] == "point 2 of 2, n=4: measuring einsum (2 of 2)"


def test_calibration_names_each_variant_it_times():
    said = []
    _toy().calibrate({"n": 8}, "cpu", on_phase=said.append)
    assert said == ["timing a few calls of mm (1 of 2) at n=8", "timing a few calls of einsum (2 of 2) at n=8"]


def test_a_lesson_declares_its_variants_order_for_recorded_figures():
    from lessons_lib import results

    dataclasses.replace(_toy(), key="toy order")  # a Lesson built (as a lesson module builds it) declares it
    assert results.in_order("toy order", ["einsum", "mm", "other"]) == ["mm", "einsum", "other"]


def test_the_correctness_verdict_counts_in_words():
    # display.count: it printed "at 1 shapes" and "✗ 1 mismatches"
    from lessons_lib.lesson import Check

    toy = _toy()
    assert toy.correctness_report([Check("mm", {"n": 8}, 0.0, 1e-3, True), Check("einsum", {"n": 8}, 0.0, 1e-3, True)]) \
        == "✓ all 2 variants match the float64 reference at 1 shape: einsum, mm"
    assert toy.correctness_report([Check("mm", {"n": 8}, 0.0, 1e-3, True)]).startswith("✓ the variant matches")
    assert toy.correctness_report([Check("mm", {"n": 8}, 1.0, 1e-3, False)]).startswith("✗ 1 mismatch:\n")
