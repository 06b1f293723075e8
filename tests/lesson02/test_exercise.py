"""Lesson 02's exercise checker (exercise.py)."""
import torch

from lessons_lib.lesson02_autograd_memory import exercise


# --- exercise -------------------------------------------------------------------------------------
def _solution(x, W):
    B, T, _ = x.shape
    G, D, _ = W.shape
    return torch.einsum("btgi,gio->btgo", x.view(B, T, G, D), W)


def test_the_exercise_checker_fails_the_starter_and_passes_a_solution():
    starter = exercise.check_exercise(exercise.exercise_starter)
    assert not starter.passed
    assert [ok for _n, ok, _d in starter.on_every_machine().checks] == [True, False, False]
    assert exercise.check_exercise(_solution).on_every_machine().passed  # the [GPU] line is a claim test's

    def checkpointed_starter(x, W):  # saves nothing new, but backward rebuilds the copy
        return torch.utils.checkpoint.checkpoint(exercise.exercise_starter, x, W, use_reentrant=False)

    v = exercise.check_exercise(checkpointed_starter)
    assert [ok for _n, ok, _d in v.on_every_machine().checks] == [True, True, False]
    assert not exercise.check_exercise(lambda x, W: _solution(x, W).transpose(1, 2)).passed  # wrong shape
    assert not exercise.check_exercise(lambda x, W: _solution(x, W.transpose(1, 2))).passed  # wrong values
    broken = exercise.check_exercise(lambda x, W: 1 / 0)
    assert not broken.passed
    assert "ZeroDivisionError" in str(broken)

