"""Lesson 03 (many small Linear layers in parallel, forum seed 002): the exercise's checker (exercise.py)."""

import pytest
import torch

from lessons_lib import grading
from lessons_lib import lesson03_grouped_linear as L
from lessons_lib.lesson03_grouped_linear import exercise


# --- the exercise ------------------------------------------------------------------------------------------

def _solution(x, weight, bias):
    N, C, Lx = x.shape
    K = weight.shape[1]
    G = C // K
    O = weight.shape[0] // G
    y = torch.matmul(weight.view(G, O, K), x.view(N, G, K, Lx)) + bias.view(G, O, 1)
    return y.view(N, G * O, Lx)


def test_checker_passes_the_batched_form():
    v = L.check_exercise(_solution)
    assert v.passed, str(v)


def test_checker_fails_the_starter_on_the_trace_not_on_correctness():
    text = str(L.check_exercise(L.exercise_starter))
    assert "✓ output and gradients match float64" in text
    assert "✗ runs exactly one GEMM (found 0 and 1 convolution)" in text


def test_checker_fails_the_loop_on_gemms_and_the_cat():
    text = str(L.check_exercise(exercise.exercise_loop))
    assert "✗ runs exactly one GEMM (found 16" in text
    assert "✗ copies no activations" in text and "cat 8×128×512" in text and "`return torch.cat(" in text


def test_checker_fails_a_copy_of_the_activations_and_names_the_line_that_made_it():
    """It named "clone of 16x32x8x128x1" for an einsum whose permute + reshape the reader never wrote as such."""
    def with_copy(x, weight, bias):
        x2 = x.transpose(1, 2).contiguous().transpose(1, 2)
        return _solution(x2, weight, bias)

    def with_einsum(x, weight, bias):
        N, C, Lx = x.shape
        K = weight.shape[1]
        G, O = C // K, weight.shape[0] // (C // K)
        y = torch.einsum("gok,ngkl->ngol", weight.view(G, O, K), x.view(N, G, K, Lx)) + bias.view(G, O, 1)
        return y.reshape(N, G * O, Lx)

    text = str(L.check_exercise(with_copy))
    assert "✗ copies no activations" in text and "`x2 = x.transpose(1, 2).contiguous().transpose(1, 2)` copies" in text
    assert "2× what the GEMM itself reads of x" in text  # what it costs
    text = str(L.check_exercise(with_einsum))
    assert "✗ copies no activations" in text and '`y = torch.einsum("gok,ngkl->ngol"' in text and "clone" in text


class _DoubledGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.clone()

    @staticmethod
    def backward(ctx, g):
        return 2 * g


@pytest.mark.parametrize("fn, expected", [
    (lambda x, w, b: _solution(x, w.view(-1, w.shape[1], 1).flip(0), b), "the output is off (relative error"),
    (lambda x, w, b: _solution(x, w, _DoubledGrad.apply(b)), "the output matches, but the gradient of bias does not"),
    (lambda x, w, b: _solution(x, w.detach(), b), "weight got no gradient"),
])
def test_a_wrong_answer_is_told_whether_the_output_or_which_gradient_is_off(fn, expected):
    """It said only "worst relative error 1.5e+00": not output or gradient, nor where to look."""
    text = str(L.check_exercise(fn))
    assert expected in text and "✗" in text


@pytest.mark.parametrize("fn, expected", [
    (lambda x, w, b: torch.zeros(3), "output shape (3,)"),
    (lambda x, w, b: _solution(x, w, b).detach(), "not part of the autograd graph"),
    (lambda x, w, b: _solution(x, w, b) * float("nan"), "NaN, inf or a wrong shape"),
    (lambda x, w, b: 1 / 0, "ZeroDivisionError"),
    ("not a function", "pass the function itself"),
])
def test_checker_turns_wrong_code_into_a_verdict_line(fn, expected):
    v = L.check_exercise(fn)
    assert not v.passed and expected in str(v)


def test_checker_stops_a_runaway_function(monkeypatch):
    monkeypatch.setattr(grading, "READER_TIME_LIMIT", 0.3)

    def forever(x, w, b):
        while True:
            pass

    assert "stopped" in str(L.check_exercise(forever))


def test_checker_notices_writes_into_the_inputs():
    def overwrites(x, weight, bias):
        with torch.no_grad():
            weight.mul_(2)
        return _solution(x, weight / 2, bias)

    assert "changed input 1 in place" in str(L.check_exercise(overwrites))


# --- the [GPU] speed line: paired rounds (grading.speed_check), run small on a CPU here ---------------------
TINY = (2, 8, 8, 8, 16)  # N, G, K, O, L


@pytest.mark.parametrize("fn, baseline", [(exercise.exercise_loop, exercise.exercise_loop),
                                          (L.exercise_starter, L.exercise_starter)])
def test_the_speed_line_never_calls_code_faster_than_itself(fn, baseline, one_thread):
    """The line used to time each side once: on the H200 lesson 01's untouched starter scored 2.0x against
    itself. Here a function against itself, twice: never a pass (~1.0x, or not decided)."""
    for _ in range(2):
        name, ok, detail = exercise.gpu_speed_check(fn, "cpu", TINY, max_time=1.0, baseline=baseline)
        assert ok is False and name == exercise.SPEED_LINE, detail


def test_the_speed_line_turns_a_crash_while_timed_into_its_detail():
    def crashes(x, w, b):
        raise RuntimeError("boom")

    _name, ok, detail = exercise.gpu_speed_check(crashes, "cpu", TINY, max_time=0.5)
    assert ok is False and "RuntimeError: boom" in detail
