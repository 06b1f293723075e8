from lessons_lib.lesson07_capstone import exercise as E
from lessons_lib.lesson07_capstone import model as M


def test_checker_sees_every_pitfall_in_the_starter_and_none_in_the_reference():
    slow = E.check(M.Model(False), M.slow_train)
    fixed = E.check(M.Model(True), M.fixed_train)
    assert len(slow) == len(fixed) == 5
    assert all(line.startswith("✗ remains") for line in slow)
    assert all(line.startswith("✓ fixed") for line in fixed)


def test_checker_turns_an_error_into_a_verdict_line():
    out = E.check(M.Model(True), lambda *a, **k: 1 / 0)
    assert out == ["✗ the training loop raised ZeroDivisionError: division by zero"]
