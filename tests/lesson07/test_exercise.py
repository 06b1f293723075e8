"""The capstone's checker: device-independent verdict lines, one per pitfall; anything the reader does becomes a line."""
import torch

from lessons_lib.lesson07_capstone import exercise as E
from lessons_lib.lesson07_capstone import model as M

PITFALLS = 8
SMALL = dict(C=64, H=4, E=4)  # experts of 16 features: no other GEMM of the checker's run is 16 x 16


def _model(fixed):
    torch.manual_seed(0)
    return M.Model(fixed, **SMALL)


def _lines(v):
    return [(name, ok) for name, ok, _ in v.on_every_machine().checks]


def test_checker_sees_every_pitfall_in_the_starter_and_none_in_the_reference():
    model, train = E.exercise_starter()
    assert model.fixed == frozenset() and train is M.slow_train
    slow = _lines(E.check_exercise(_model(False), train))
    fixed = _lines(E.check_exercise(_model(True), M.fixed_train))
    assert len(slow) == len(fixed) == 1 + PITFALLS
    assert slow[0][1] and fixed[0][1]  # both learn the original's numbers
    assert not any(ok for _, ok in slow[1:])
    assert all(ok for _, ok in fixed[1:])


def test_each_fix_clears_its_own_line_in_any_order():
    names = {"gemm": "broadcast matmul", "grouped": "loop of small Linears", "fused": "elementwise chains",
             "saved": "attention matrix kept"}
    for fix, line in names.items():
        v = E.check_exercise(_model({fix}), M.slow_train)
        cleared = [name for name, ok in _lines(v)[1:] if ok]
        assert len(cleared) == 1 and line in cleared[0], (fix, cleared)
    v = E.check_exercise(_model(False), M.fixed_train)
    cleared = [name for name, ok in _lines(v)[1:] if ok]
    assert len(cleared) == 4 and all("lesson 06" in c or "optimizer" in c for c in cleared)


def test_checker_counts_host_syncs_as_cuda_does():
    """x[idx] with the indices on the host copies them to the device with a blocking copy: the loop that
    indexed the batch in one op with a CPU index still syncs twice a step on a GPU (the sync detector's CUDA
    view), and the checker names the line."""
    def cpu_indices(model, x, y, steps=20, batch=32, lr=1e-2):
        opt = M.fixed_optimizer(model, lr)
        losses, outs = torch.empty(steps, device=x.device), []
        for s, idx in enumerate(M.batches(len(x), steps, batch)):  # the order left on the host
            xb, yb = x[idx], y[idx]
            out = model(xb)
            loss = torch.nn.functional.cross_entropy(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses[s] = loss.detach()
            outs.append(out.detach())
        return losses, torch.cat(outs)

    v = E.check_exercise(_model(True), cpu_indices)
    line = next(c for c in v.checks if c[0].startswith("host syncs"))
    assert not line[1] and "2.0 host syncs per step" in line[2] and "x[idx], y[idx]" in line[2]


def test_checker_turns_an_error_into_a_verdict_line():
    v = E.check_exercise(_model(True), lambda *a, **k: 1 / 0)
    assert not v.passed
    assert "ZeroDivisionError" in str(v)


def test_checker_catches_wrong_numbers_and_wrong_arguments():
    def wrong(model, x, y, steps=20, batch=32, lr=1e-2):
        return M.fixed_train(model, x, y, steps, batch, lr=10 * lr)
    v = E.check_exercise(_model(True), wrong)
    assert not v.checks[0][1] and "relative error" in v.checks[0][2]
    assert "lesson Model" in str(E.check_exercise(torch.nn.Linear(2, 2), M.slow_train))
    assert not E.check_exercise(_model(True), "fixed_train").passed
    assert "return (losses, outputs)" in str(E.check_exercise(_model(True), lambda *a, **k: 3))
