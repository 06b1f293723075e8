"""Lesson 06's exercise checker (exercise.py)."""
import pytest
import torch

from lessons_lib.lesson06_data_movement import exercise


def _solution(*pieces):
    return torch.cat([p / p.abs().amax().clamp_min(1e-6) for p in pieces])


def _preallocate_solution(*pieces):
    out = pieces[0].new_empty(sum(p.shape[0] for p in pieces), pieces[0].shape[1])
    start = 0
    for p in pieces:
        out[start:start + p.shape[0]] = p / p.abs().amax().clamp_min(1e-6)
        start += p.shape[0]
    return out


def _sync_once(*pieces):  # one sync for the whole batch: allowed (it does not grow with n)
    scales = torch.stack([p.abs().amax() for p in pieces]).clamp_min(1e-6)
    if not bool(torch.isfinite(scales).all()):
        raise ValueError("a piece holds inf or NaN")
    return torch.cat([p / s for p, s in zip(pieces, scales)])


def test_checker_fails_the_starter_on_syncs_and_bytes_not_correctness():
    v = exercise.check_exercise(exercise.exercise_starter)
    assert [ok for _n, ok, _d in v.checks[:3]] == [True, False, False]
    assert "scale = p.abs().max().item()" in v.checks[1][2]
    assert not v.passed


@pytest.mark.parametrize("fn", [_solution, _preallocate_solution, _sync_once])
def test_checker_passes_correct_rewrites(fn):
    v = exercise.check_exercise(fn)
    assert v.passed, str(v)


@pytest.mark.parametrize("fn, failing", [
    (lambda *p: torch.cat(p), "matches the float64"),  # forgot the scaling
    (lambda *p: torch.cat(p)[:1], "runs and returns"),
    (lambda *p: 1 / 0, "runs and returns"),
    (lambda *p: torch.cat([q / 0 for q in p]), "matches the float64"),  # inf
    (lambda *p: [q.div_(q.abs().max()) for q in p][0], "runs and returns"),  # writes into its inputs
    ("not a function", "is a function"),
])
def test_checker_turns_wrong_code_into_a_failed_line(fn, failing):
    v = exercise.check_exercise(fn)
    assert not v.passed
    assert any(not ok and name.startswith(failing) for name, ok, _d in v.checks), str(v)
