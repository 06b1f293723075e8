"""Lesson 00's GPU claim tests (skipped without CUDA by tests/conftest.py)."""
import pytest
import torch

from lessons_lib.lesson00_timing import demos, exercise
from lessons_lib import timing

from .helpers import no_sync, solution


# --- GPU claim tests (skipped without CUDA by conftest.py) ------------------------------------


@pytest.mark.gpu
def test_gpu_no_sync_reports_the_launches_not_the_kernels():
    a = torch.randn(8192, 8192, device="cuda")
    wrong = timing.wrong_no_sync(torch.mm, a, a, repeats=10)
    honest = timing.measure(torch.mm, a, a)
    assert wrong.median * 5 <= honest.median, (wrong, honest)


@pytest.mark.gpu
def test_gpu_first_call_reports_more_than_the_harness():
    d = demos.demo_first_call("cuda", n=4096)
    assert d.wrong.median > d.honest.median, str(d)


@pytest.mark.gpu
def test_gpu_checker_agrees_with_the_harness_on_a_real_kernel():
    v = exercise.check_exercise(solution)
    assert v.passed, str(v)
    assert v.checks[-1][1] is True, str(v)
    v = exercise.check_exercise(no_sync)
    assert v.checks[-1][1] is False, str(v)
