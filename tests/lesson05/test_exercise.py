"""Lesson 05 (CUDA graphs, seed 003): the exercise's checker (exercise.py): the starter, a rewrite, broken code, a
hang, NaN, a clobbered input; on a GPU, a real capture."""
import pytest
import torch

from lessons_lib.lesson05_cuda_graphs import catalogue, exercise
from .helpers import CUDA, _solution


# --- exercise ----------------------------------------------------------------------------------------
def _checks(v):
    return {name: ok for name, ok, _d in v.checks}


def test_the_starter_is_correct_but_not_graph_safe():
    v = exercise.check_exercise(exercise.exercise_starter)
    checks = _checks(v)
    assert checks["loss and gradients match float64 at 3 shapes"] is True
    assert checks["graph_check finds nothing that capture would refuse or freeze"] is False
    assert not v.passed


def test_the_starters_hazards_are_named_in_the_verdict():
    text = str(exercise.check_exercise(exercise.exercise_starter))
    assert "bool mask" in text and "item" in text


def test_a_graph_safe_rewrite_passes():
    assert exercise.check_exercise(_solution).passed


def test_a_safe_but_wrong_rewrite_fails_on_correctness():
    def wrong(x, w, b, y):  # forgets the mask: every row counts
        loss = (x @ w + b - y).square().mean()
        return (loss, *torch.autograd.grad(loss, (w, b)))

    assert _checks(exercise.check_exercise(wrong))["loss and gradients match float64 at 3 shapes"] is False


@pytest.mark.parametrize("bad", [lambda *a: 1 / 0, lambda *a: None, "not a function"])
def test_broken_code_becomes_a_verdict_line(bad):
    v = exercise.check_exercise(bad)
    assert not v.passed and "Traceback" not in str(v)


def test_a_hang_and_nan_become_verdict_lines(monkeypatch):
    from lessons_lib import grading

    monkeypatch.setattr(grading, "READER_TIME_LIMIT", 0.5)

    def hangs(*_a):
        while True:
            pass

    def nan(x, w, b, y):
        return torch.tensor(float("nan")), torch.zeros_like(w), torch.zeros_like(b)

    assert "stopped" in str(exercise.check_exercise(hangs))
    assert "NaN or inf" in str(exercise.check_exercise(nan))


def test_graph_check_lets_a_checkers_time_limit_through():
    from lessons_lib import graphs, grading

    def stopped(x, w):
        raise grading.TimeLimit("still running")

    with pytest.raises(grading.TimeLimit):
        graphs.graph_check(stopped, *catalogue._xy("cpu"))


def test_the_reference_is_computed_before_the_readers_code_runs():
    def clobbers(x, w, b, y):
        out = _solution(x, w, b, y)
        y.zero_()
        return out

    assert not exercise.check_exercise(clobbers).passed


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_the_exercise_checker_captures_on_a_gpu_and_explains_a_failed_capture():
    assert exercise.check_exercise(_solution).passed
    text = str(exercise.check_exercise(exercise.exercise_starter))
    assert f"✗ [GPU] {exercise.GPU_CHECK}" in text and "Traceback" not in text
    assert (torch.ones(2, device="cuda") * 2).sum().item() == 4.0  # the CUDA context is still usable
