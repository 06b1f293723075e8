"""Lesson 01's exercise checker (exercise.py)."""
import pytest
import torch

from lessons_lib import grading
from lessons_lib.lesson01_broadcast_matmul import exercise


# --- the exercise checker ---------------------------------------------------------------------
SIM = getattr(torch.cuda, "_course_simulated", None)
SMALL = (4, 32, 64, 4, 16)  # B, T, D, H, Dh: the speed line's shape in these tests (the GPU's is 64, 256, 1024, 16, 64)


@pytest.fixture(autouse=True)
def _small_gpu_timing(monkeypatch):
    """These tests read the checker's machine-independent lines. Under the simulated GPU its [GPU] speed line
    would time the starter at the GPU's shape (1.3 GiB of copies a call) on the CPU: it runs at SMALL, one
    second, instead (the same code path; the gpu claim tests time the real shape on a real GPU)."""
    real = exercise.speed_check
    monkeypatch.setattr(exercise, "speed_check",
                        lambda fn, device, shape=SMALL, max_time=1.0: real(fn, device, shape, max_time=max_time))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not SIM, reason="needs the simulated GPU: -p tests.simgpu --simulate-gpu=t4"))])
def test_the_starter_checked_against_itself_is_never_called_faster(device):
    # On the H200 the untouched starter scored "✓ at least 1.3× faster than the starter (2.0×)": each side was
    # timed once. Paired rounds cannot call it faster than itself (no time is asserted: only that it fails).
    name, ok, detail = exercise.speed_check(exercise.exercise_starter, device, SMALL, max_time=1.5)
    assert name == f"at least {exercise.GPU_SPEEDUP_BAR}× faster than the starter"
    assert ok is False, detail
    assert "paired rounds" in detail or detail.startswith("not decided on this run"), detail
    assert "float32 GEMMs in" in detail  # which precision the GEMMs ran in


def test_the_speed_line_runs_a_solution_and_reports_a_crash_as_its_detail():
    _name, ok, detail = exercise.speed_check(lambda x, W: torch.einsum("btd,hed->bhte", x, W), "cpu", SMALL,
                                             max_time=1.0)
    assert isinstance(ok, bool) and ("paired rounds" in detail or "not decided" in detail), detail
    _name, ok, detail = exercise.speed_check(lambda x, W: x @ W, "cpu", SMALL, max_time=1.0)
    assert ok is False and detail.startswith("timing raised RuntimeError"), detail


def _folded(x, W):
    B, T, D = x.shape
    H, Dh, _ = W.shape
    return (x.reshape(B * T, D) @ W.reshape(H * Dh, D).T).view(B, T, H, Dh).permute(0, 2, 1, 3)


def _checks(verdict):
    return {name.split(" (")[0]: ok for name, ok, _detail in verdict.checks}


def test_checker_fails_the_starter_on_copies_not_correctness():
    v = exercise.check_exercise(exercise.exercise_starter)
    assert not v.passed
    assert "Not yet" in str(v)
    c = _checks(v)
    assert c["matches the float64 reference at 4 shapes"] is True
    assert c["copies nothing"] is False
    assert c["allocates only the output"] is False


@pytest.mark.parametrize("fn", [_folded, lambda x, W: torch.einsum("btd,hed->bhte", x, W)])
def test_checker_passes_a_correct_one_gemm_solution(fn):
    # Every machine-independent line; the [GPU] speed bar is test_gpu_exercise_solution_passes_the_speed_bar's.
    v = exercise.check_exercise(fn).on_every_machine()
    assert v.passed, str(v)
    assert "Passed" in str(v)


def _first_head_only(x, W):  # right shape, wrong values
    return (x @ W[0].T).unsqueeze(1).expand(-1, W.shape[0], -1, -1)


def test_checker_fails_wrong_values():
    assert _checks(exercise.check_exercise(_first_head_only))["matches the float64 reference at 4 shapes"] is False


def test_checker_fails_a_wrong_shape():
    v = exercise.check_exercise(lambda x, W: torch.einsum("btd,hed->bthe", x, W))  # (B, T, H, Dh)
    assert _checks(v)["runs and returns"] is False


def test_checker_reports_a_crash_as_a_line():
    v = exercise.check_exercise(lambda x, W: x @ W)  # D against Dh: a shape error
    assert "RuntimeError" in str(v)


def test_checker_fails_nan():
    # max(worst, nan) keeps the old value: a NaN output used to pass.
    def nan_out(x, W):
        out = _folded(x, W).clone()
        out[(0,) * out.dim()] = float("nan")
        return out

    assert _checks(exercise.check_exercise(nan_out))["matches the float64 reference at 4 shapes"] is False


def test_checker_catches_a_solution_that_overwrites_its_input():
    # The reference used to be computed after the call, from the overwritten input.
    def zero_everything(x, W):
        x.zero_()
        W.zero_()
        return torch.einsum("btd,hed->bhte", x, W)

    v = exercise.check_exercise(zero_everything)
    assert "changed input" in str(v)


def test_checker_accepts_a_correct_solution_that_reads_a_value():
    # .item() has no value on meta: the trace falls back to CPU instead of crashing the checker.
    def with_item(x, W):
        if W.new_ones(()).item() != 1.0:  # a value read: nothing to read on meta
            raise AssertionError("unreachable")
        return _folded(x, W)

    assert exercise.check_exercise(with_item).on_every_machine().passed


def test_checker_stops_an_endless_loop(monkeypatch):
    monkeypatch.setattr(grading, "READER_TIME_LIMIT", 0.5)

    def forever(x, W):
        while True:
            pass

    v = exercise.check_exercise(forever)
    assert "stopped" in str(v)


def test_checker_refuses_a_non_function():
    assert _checks(exercise.check_exercise("my_projection"))["is a function"] is False


def test_checker_fails_a_correct_loop_on_gemm_count():
    v = exercise.check_exercise(lambda x, W: torch.stack([x @ w.T for w in W], dim=1))
    c = _checks(v)
    assert not v.passed
    assert c["matches the float64 reference at 4 shapes"] is True
    assert c["launches exactly one GEMM"] is False

