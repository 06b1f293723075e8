"""Lesson 00's demos: sizes checked first, the wrong way next to the harness, verdicts by the noise rule."""
import pytest

from lessons_lib import timing
from lessons_lib.display import show_source
from lessons_lib.lesson00_timing import demos, exercise


@pytest.mark.parametrize("kw", [{"n": 0}, {"n": 2.5}, {"n": -3}, {"min_run_time": 0}, {"min_run_time": "1"}])
def test_demo_sizes_are_checked_before_anything_runs(kw):
    with pytest.raises(ValueError):
        demos.demo_single_run("cpu", **kw)


def test_cache_demo_rotates_through_twice_the_cache_or_the_cap():
    from lessons_lib.device import last_level_cache_bytes

    assert demos.sizes("cpu").rotate_bytes >= min(2 * last_level_cache_bytes("cpu"), demos.ROTATE_CAP)


# --- the demos and the record command ----------------------------------------------------------


def test_demo_no_sync_on_cpu_agrees_because_cpu_ops_are_synchronous():
    d = demos.demo_no_sync("cpu", n=128, min_run_time=0.05)
    assert d.wrong.method.startswith("WRONG")
    assert d.honest.device == "cpu"
    assert d.wrong.median > 0
    assert d.honest.median > 0


def test_demo_random_data_is_decided_by_paired_rounds():
    # Which side is slower is a timing: it is a recorded target (explore.targets), not a unit test. Here:
    # both sides went through the noise rule's paired rounds, and the verdict says a ratio or
    # "not decided".
    from lessons_lib import noise

    d = demos.demo_random_data("cpu", rows=512, width=64, min_run_time=0.02)
    assert d.wrong.method.startswith("WRONG") and not d.honest.method.startswith("WRONG")
    assert len(d.paired.values) >= noise.MIN_ROUNDS and all(v > 0 for v in d.paired.values)
    assert d.as_dict()["paired_ratios"] == d.paired.values
    v = d.verdict()
    assert ("not decided on this run" in v) != d.paired.decided


def test_demo_verdicts_go_through_the_noise_rule():
    def t(median, iqr, label="x"):
        return timing.Timing(label, median, iqr, [median] * 8, 1, "m", "cpu")

    steady = demos.Demo("k", "m", {}, t(2.0, 0.0), t(1.0, 0.01))
    assert steady.verdict().startswith("the wrong way reports 2×")
    assert demos.Demo("k", "m", {}, t(1.05, 0.0), t(1.0, 0.01)).verdict().startswith("the two agree")
    noisy = demos.Demo("k", "m", {}, t(2.0, 0.0), t(1.0, 0.9))
    assert "not decided on this run" in noisy.verdict()


def test_demo_first_call_runs_in_a_fresh_process():
    d = demos.demo_first_call("cpu", n=128, min_run_time=0.02)
    assert d.wrong.method == "WRONG: one cold call"
    assert d.wrong.median > 0
    assert d.honest.median > 0
    assert len(d.honest.samples) >= timing.MIN_SAMPLES


def test_show_source_and_sizes():
    code = show_source(exercise.broken_benchmark)
    assert "def broken_benchmark(fn, sync" in code.data
    s = demos.sizes("cpu")
    assert s.matmul <= 1024
    assert s.rotate_bytes >= 32 * s.cache_bytes and s.rotate_bytes <= max(demos.ROTATE_CAP, 64 * 2**20)
