"""Lesson 00's compare: every wrong timer next to the harness on your own function."""
import pytest
import torch

from lessons_lib.lesson00_timing import compare_timers


def test_compare_rejects_a_non_function():
    with pytest.raises(ValueError, match="needs a function"):
        compare_timers.compare(torch.randn(3))


def test_compare_decides_each_ratio_over_rounds(one_thread):
    a = torch.randn(32, 32)
    c = compare_timers.compare(torch.mm, a, a, min_run_time=0.005, rounds=3, max_time=3)
    assert [t.label for t in c.timings] == ["first call", "no sync", "single run", "mean incl. cold start",
                                            "one CPU thread", "harness"]
    assert list(c.ratios) == ["first call", "no sync", "single run", "mean incl. cold start", "one CPU thread"]
    assert c.rounds >= 3
    assert all(len(r.values) == c.rounds for k, r in c.ratios.items() if k != "first call")
    for line, r in zip(c.verdicts(), c.ratios.values()):
        assert ("not decided on this run" in line) != r.decided


@pytest.mark.skipif(not getattr(torch.cuda, "_course_simulated", None),
                    reason="needs the simulated GPU: -p tests.simgpu --simulate-gpu=t4")
def test_compare_times_a_closure_on_the_device_it_is_given(one_thread):
    a = torch.randn(16, 16, device="cuda")
    c = compare_timers.compare(lambda: a @ a, min_run_time=0.005, rounds=3, max_time=2, device="cuda")
    assert {t.device for t in c.timings} == {"cuda"}
