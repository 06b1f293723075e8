"""The capstone's checker: device-independent verdict lines, one per pitfall, read from lessons_lib.diagnose;
anything the reader does becomes a line. Each wrong answer of issue 28 fails its line; the right one passes."""
import pytest
import torch
import torch.nn.functional as F

from lessons_lib.lesson07_capstone import exercise as E
from lessons_lib.lesson07_capstone import model as M

SMALL = dict(C=64, H=4, E=4)  # experts of 16 features: no other GEMM of the checker's run is 16 x 16
FIRST = 4  # lines before the pitfalls: your q, k, v projection, the numbers, every parameter's update, the inputs


def my_qkv(h, w, H):  # the reader's fix: one GEMM, then views
    B, T, C = h.shape
    return F.linear(h, w).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4).unbind(0)


def _model(fixed, qkv=my_qkv, **dims):
    torch.manual_seed(0)
    return M.Model(fixed, **{**SMALL, **dims}, qkv=qkv)


def _lines(v):
    return [(name, ok) for name, ok, _ in v.on_every_machine().checks]


def _line(v, start):
    return next(c for c in v.checks if c[0].startswith(start))


def test_checker_sees_every_pitfall_in_the_starter_and_none_in_the_reference():
    model, train = E.exercise_starter()
    assert model.fixed == frozenset() and train is M.slow_train
    slow = _lines(E.check_exercise(_model(False, E.qkv_starter), train))
    fixed = _lines(E.check_exercise(_model(True), M.fixed_train))
    assert len(slow) == len(fixed) == FIRST + len(E.LINES)
    assert all(ok for _, ok in slow[1:FIRST]) and all(ok for _, ok in fixed)  # both learn the original's numbers
    pitfalls, guards = slow[FIRST:-E.GUARDS], slow[-E.GUARDS:]
    assert not any(ok for _, ok in pitfalls) and all(ok for _, ok in guards)  # guards fail on wrong answers (below)
    # the starter's default SGD loops over the parameters on a CPU only (foreach on CUDA): a guard, not a pitfall
    assert [name.split(" (")[0] for name, _ in guards] == ["no optimizer looping over the parameters on CUDA",
                                                          "no graph kept alive across steps"]


def test_each_fix_clears_its_own_line_in_any_order():
    names = {"gemm": "broadcast matmul", "grouped": "loop of small Linears", "fused": "elementwise chains",
             "saved": "attention matrix kept"}
    for fix, line in names.items():
        v = E.check_exercise(_model({fix}, None), M.slow_train)
        cleared = [name for name, ok in _lines(v)[FIRST:-E.GUARDS] if ok]
        assert len(cleared) == 1 and line in cleared[0], (fix, cleared)
    v = E.check_exercise(_model(False, None), M.fixed_train)
    cleared = [name for name, ok in _lines(v)[FIRST:-E.GUARDS] if ok]
    assert len(cleared) == 3 and all("lesson 06" in c for c in cleared), cleared


def test_the_reader_writes_the_qkv_projection_and_the_checker_grades_it():
    assert "write my_qkv yourself" in _line(E.check_exercise(_model(True, None), M.fixed_train), "your q, k, v")[2]
    assert not _line(E.check_exercise(_model(True, M.qkv_one_gemm), M.fixed_train), "your q, k, v")[1]
    starter = _line(E.check_exercise(_model(True, E.qkv_starter), M.fixed_train), "your q, k, v")
    assert not starter[1] and "3 GEMMs" in starter[2]

    def three_linears(h, w, H):  # no broadcast, but three GEMMs where one does
        B, T, C = h.shape
        return [F.linear(h, wi).view(B, T, H, C // H).transpose(1, 2) for wi in w.chunk(3)]

    def wrong_heads(h, w, H):  # one GEMM, the heads split the wrong way
        B, T, C = h.shape
        return F.linear(h, w).view(B, T, H, 3, C // H).permute(3, 0, 2, 1, 4).unbind(0)

    assert "3 GEMMs" in _line(E.check_exercise(_model(True, three_linears), M.fixed_train), "your q, k, v")[2]
    v = E.check_exercise(_model(True, wrong_heads), M.fixed_train)
    assert not v.passed and "relative error" in _line(v, "your q, k, v")[2]


def test_a_wrong_qkv_is_the_first_line_and_the_lines_it_breaks_say_so():
    """Issue 34: a my_qkv that reshapes without transposing failed first on 'block.experts.15.weight: update off',
    sending the student to the experts. The part they wrote leads, says what is likely wrong, and the training
    lines it breaks point back to it."""
    def reshaped(h, w, H):  # one GEMM, then a reshape where the axes must move
        B, T, C = h.shape
        return F.linear(h, w).reshape(B, 3, H, T, C // H).unbind(1)

    v = E.check_exercise(_model({"grouped", "fused"}, reshaped), M.slow_train)
    first = v.checks[0]
    assert first[0].startswith("your q, k, v") and not first[1]
    assert "right shapes, other numbers" in first[2] and "permute or transpose" in first[2]
    for start in ("the same losses", "every parameter trains"):
        line = _line(v, start)
        assert not line[1] and "your q, k, v above differ" in line[2], line
    shapes = _line(E.check_exercise(_model(True, lambda h, w, H: (h, h, h)), M.fixed_train), "your q, k, v")
    assert "should be (B, H, T, D)" in shapes[2]


def test_checker_counts_host_syncs_as_cuda_does_and_names_the_lines():
    """x[idx] with the indices on the host copies them to the device with a blocking copy: the loop that
    indexed the batch in one op with a CPU index still syncs twice a step on a GPU, and the checker names the
    line (issue 28: '1.0 host syncs per step' named none)."""
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

    line = _line(E.check_exercise(_model(True), cpu_indices), "host syncs")
    assert not line[1] and "2 host syncs a step, 2 at: xb, yb = x[idx], y[idx]" in line[2]
    starter = _line(E.check_exercise(_model(False, E.qkv_starter), M.slow_train), "host syncs")[2]
    assert "5 host syncs a step" in starter and "2 at: loss = F.cross_entropy(out[mask], yb[mask])" in starter


# --- issue 28's wrong answers, each failing its line, and the right answer passing it ------------------------

def keeps_graphs(model, x, y, steps=20, batch=32, lr=1e-2, opt=None):
    opt = opt or M.fixed_optimizer(model, lr)
    losses, outs = [], []
    for idx in M.batches(len(x), steps, batch, device=x.device):
        out = model(x[idx])
        loss = F.cross_entropy(out, y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss)  # every step's graph, kept
        outs.append(out.detach())
    return torch.stack(losses), torch.cat(outs)


def keeps_graphs_in_a_list(model, x, y, steps=20, batch=32, lr=1e-2, opt=None):
    opt = opt or M.fixed_optimizer(model, lr)
    losses, outs = [], []
    for idx in M.batches(len(x), steps, batch, device=x.device):
        out = model(x[idx])
        loss = F.cross_entropy(out, y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss)  # the list returned holds every step's graph
        outs.append(out.detach())
    return losses, torch.cat(outs)


def foreach_false(model, x, y, steps=20, batch=32, lr=1e-2, opt=None):
    """The fixed loop with SGD asked to loop over the parameters, as it would on CUDA too."""
    opt = opt or torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, foreach=False)
    return M.fixed_train(model, x, y, steps, batch, lr, opt)


def zeroes_inputs(model, x, y, steps=20, batch=32, lr=1e-2, opt=None):
    out = M.fixed_train(model, x, y, steps, batch, lr, opt)
    x.zero_()
    y.zero_()
    return out


def sgd_by_hand_with_sub(model, x, y, steps=20, batch=32, lr=1e-2, opt=None):
    params = list(model.parameters())
    bufs = [None] * len(params)
    losses, outs = torch.empty(steps), []
    for s, idx in enumerate(M.batches(len(x), steps, batch, device=x.device)):
        out = model(x[idx])
        loss = F.cross_entropy(out, y[idx])
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for i, p in enumerate(params):
                bufs[i] = p.grad.clone() if bufs[i] is None else bufs[i] * 0.9 + p.grad
                p.sub_(lr * bufs[i])  # one op per parameter, and no add_
        losses[s] = loss.detach()
        outs.append(out.detach())
    return losses, torch.cat(outs)


def norm_with_pow(x, g, b, eps=1e-5):  # a hand-written norm without sqrt, rsqrt or tanh
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdim=True)
    return xc * (var + eps).pow(-0.5) * g + b


@pytest.mark.parametrize("wrong, line", [(keeps_graphs, "no graph kept alive"),
                                         (keeps_graphs_in_a_list, "no graph kept alive"),
                                         (zeroes_inputs, "leaves its inputs"),
                                         (sgd_by_hand_with_sub, "no optimizer looping"),
                                         (foreach_false, "no optimizer looping")])
def test_a_wrong_loop_fails_its_line_and_the_right_one_passes_it(wrong, line):
    bad = E.check_exercise(_model(True), wrong)
    assert not _line(bad, line)[1] and not bad.passed, str(bad)
    good = E.check_exercise(_model(True), M.fixed_train)
    assert _line(good, line)[1] and good.passed


def test_the_graph_kept_alive_is_measured_and_named():
    seen = _line(E.check_exercise(_model(True), keeps_graphs), "no graph kept alive")[2]
    assert "graph nodes from 2 steps" in seen and "at: return torch.stack(losses)" in seen
    listed = _line(E.check_exercise(_model(True), keeps_graphs_in_a_list), "no graph kept alive")[2]
    assert "2 tensors alive" in listed and "at: loss = F.cross_entropy(out, y[idx])" in listed


def test_the_inputs_are_named_when_changed():
    assert "x and y changed in place" in _line(E.check_exercise(_model(True), zeroes_inputs), "leaves its inputs")[2]


def test_a_hand_written_norm_is_found_by_what_it_does(monkeypatch):
    monkeypatch.setattr(M, "norm_by_hand", norm_with_pow)
    v = E.check_exercise(_model({"gemm", "grouped", "saved", "loop"}), M.fixed_train)
    seen = _line(v, "hand-written elementwise chains")
    assert not seen[1] and "norm_with_pow" in seen[2] and "(and 1 more)" in seen[2]  # the norm, and the GELU


def test_a_frozen_parameter_fails_though_the_outputs_stay_close():
    def frozen_norm(model, x, y, steps=20, batch=32, lr=1e-2, opt=None):
        model.block.norm.requires_grad_(False)
        return M.fixed_train(model, x, y, steps, batch, lr, opt)

    v = E.check_exercise(_model(True), frozen_norm)
    assert v.checks[0][1]  # 1.3e-5 in 3 steps: under the outputs' tolerance
    upd = _line(v, "every parameter trains")
    assert not upd[1] and "block.g" in upd[2] and not v.passed


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_a_correct_answer_passes_at_a_small_batch(batch):
    """The q, k, v gradients' 3-way stack was read as 'batch stacked sample by sample' at batch <= 3."""
    v = E.check_exercise(_model(True), M.fixed_train, batch=batch)
    assert v.passed, str(v)


def test_checker_turns_an_error_into_a_verdict_line():
    v = E.check_exercise(_model(True), lambda *a, **k: 1 / 0)
    assert not v.passed
    assert "ZeroDivisionError" in str(v)


@pytest.mark.parametrize("kw", [dict(T=-1), dict(batch=2.5), dict(batch=0), dict(T=True)])
def test_checker_arguments_out_of_range_are_a_verdict_not_an_exception(kw):
    v = E.check_exercise(_model(True), M.fixed_train, **kw)
    assert not v.passed and "whole number" in str(v)


def test_checker_catches_wrong_numbers_and_wrong_arguments():
    def wrong(model, x, y, steps=20, batch=32, lr=1e-2):
        return M.fixed_train(model, x, y, steps, batch, lr=10 * lr)
    v = E.check_exercise(_model(True), wrong)
    numbers = _line(v, "the same losses")
    assert not numbers[1] and "relative error" in numbers[2] and "q, k, v above" not in numbers[2]
    assert "lesson Model" in str(E.check_exercise(torch.nn.Linear(2, 2), M.slow_train))
    assert not E.check_exercise(_model(True), "fixed_train").passed
    assert "return (losses, outputs)" in str(E.check_exercise(_model(True), lambda *a, **k: 3))


def test_speed_false_leaves_the_gpu_line_out():
    assert not any(name.startswith(("[GPU]", "the training step")) for name, _, _ in
                   E.check_exercise(_model(True), M.fixed_train, speed=False).checks)
