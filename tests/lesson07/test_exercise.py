"""The capstone's checker: device-independent verdict lines, one per pitfall; anything the reader does becomes a line."""
import torch

from lessons_lib.lesson07_capstone import exercise as E
from lessons_lib.lesson07_capstone import model as M

PITFALLS = 8


def _lines(v):
    return [(name, ok) for name, ok, _ in v.on_every_machine().checks]


def test_checker_sees_every_pitfall_in_the_starter_and_none_in_the_reference():
    model, train = E.exercise_starter()
    slow = _lines(E.check(model, train))
    fixed = _lines(E.check(M.Model(True), M.fixed_train))
    assert len(slow) == len(fixed) == 1 + PITFALLS
    assert slow[0][1] and fixed[0][1]  # both learn the original's numbers
    assert not any(ok for _, ok in slow[1:])
    assert all(ok for _, ok in fixed[1:])


def test_each_fix_clears_its_own_line_in_any_order():
    names = {"gemm": "broadcast matmul", "grouped": "loop of small Linears", "fused": "elementwise chains",
             "saved": "attention matrix kept"}
    for fix, line in names.items():
        v = E.check(M.Model({fix}), M.slow_train)
        cleared = [name for name, ok in _lines(v)[1:] if ok]
        assert len(cleared) == 1 and line in cleared[0], (fix, cleared)
    v = E.check(M.Model(False), M.fixed_train)
    cleared = [name for name, ok in _lines(v)[1:] if ok]
    assert len(cleared) == 4 and all("lesson 06" in c or "optimizer" in c for c in cleared)


def test_checker_turns_an_error_into_a_verdict_line():
    v = E.check(M.Model(True), lambda *a, **k: 1 / 0)
    assert not v.passed
    assert "ZeroDivisionError" in str(v)


def test_checker_catches_wrong_numbers_and_wrong_arguments():
    def wrong(model, x, y, steps=20, batch=32, lr=1e-2):
        return M.fixed_train(model, x, y, steps, batch, lr=10 * lr)
    v = E.check(M.Model(True), wrong)
    assert not v.checks[0][1] and "relative error" in v.checks[0][2]
    assert "not a lesson Model" in str(E.check(torch.nn.Linear(2, 2), M.slow_train)) or \
        "lesson Model" in str(E.check(torch.nn.Linear(2, 2), M.slow_train))
    assert not E.check(M.Model(True), "fixed_train").passed
    assert not E.check(M.Model(True), lambda *a, **k: 3).passed
