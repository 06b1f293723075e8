"""The waterfall, graph_check, the shipped step and the GPU model (no clock in any assertion)."""
import torch

from lessons_lib.lesson07_capstone import fixes as X
from lessons_lib.lesson07_capstone import gpu as G
from lessons_lib.lesson07_capstone import model as M
from lessons_lib.trace import trace_ops

SMALL = dict(C=32, H=4, E=4, T=6, batch=8)


def test_stages_are_cumulative_in_the_given_order():
    assert [n for n, _ in X.stages()] == ["original", *(f"+ {f}" for f in M.FIXES)]
    assert X.stages(["loop", "gemm"])[-1] == ("+ gemm", frozenset({"loop", "gemm"}))


def test_waterfall_measures_every_stage_and_speaks_through_the_noise_rule():
    w = X.waterfall(dims=SMALL, max_time=3.0)
    assert w.names == [n for n, _ in X.stages()] and w.steps == 2
    assert all(w.per_step(n) > 0 for n in w.names)
    lines = w.sentences()  # one a fix, one for all, and one more when the time limit left too few rounds
    assert len(lines) == len(w.names) + bool(w.cmp.lacking)
    for line in lines[:len(w.names)]:  # a ratio or the noise rule's sentence, never a bare assertion
        assert "faster" in line or "slower" in line or "not decided" in line or "no faster" in line
    assert w.peaks["original"] > w.peaks[w.names[-1]]  # the fixed step's peak is lower (bytes: no clock)
    assert "optimizer built once" in str(w.table())
    w.plot()


def test_a_waterfall_cut_short_says_once_which_max_time_fits():
    """Issue 34: every row said 'the time limit (6 s) left room for 1 of the 3 paired rounds … give it more time'
    and the student saw no argument to raise. Too few rounds: the rows say so briefly and one line names
    max_time with a value that fits the noise rule's minimum at the run's own pace (no clock asserted: the
    value is checked against the comparison's own seconds and rounds)."""
    import math
    import re

    from lessons_lib import noise

    w = X.waterfall(dims=SMALL, max_time=1e-3)  # room for one round at most
    assert w.cmp.lacking
    lines = w.sentences()
    assert all("see the last line" in line for line in lines[:-1])
    last = lines[-1]
    assert last.startswith("Not decided on this run: ") and w.cmp.lacking in last
    need = int(re.search(r"L\.waterfall\(device, max_time=(\d+)\)$", last).group(1))
    pace = w.cmp.seconds / len(w.cmp.rounds[w.names[0]])
    assert need >= noise.MIN_ROUNDS * pace and need % 5 == 0 and need <= 5 * math.ceil(2 * noise.MIN_ROUNDS * pace / 5)
    assert "max_time" not in "".join(w.sentences()[:-1]) and w.more_time() in last


def test_an_optimizer_passed_in_lives_across_calls():
    """The waterfall times steady-state steps: with the optimizer passed (as it does), a second call makes no
    momentum buffers (SGD's first step clones each gradient on a CPU; fused SGD allocates them) and updates them."""
    for fixed, first_step_op in ((False, "clone"), (True, "empty_like")):
        torch.manual_seed(0)
        model = M.Model(fixed, SMALL["C"], SMALL["H"], SMALL["E"])
        x, y = M.make_data(n=SMALL["batch"], T=SMALL["T"])
        opt = M.optimizer(model)
        first = trace_ops(M.train, model, x, y, 1, SMALL["batch"], opt=opt)
        again = trace_ops(M.train, model, x, y, 1, SMALL["batch"], opt=opt)
        n_params = len(list(model.parameters()))
        assert len(first.named(first_step_op)) - len(again.named(first_step_op)) >= n_params
        assert len(opt.state) == n_params


def test_graph_check_on_the_fixed_step_names_the_float_lr_only_for_foreach():
    reports = G.graph_reports(dims=SMALL)
    foreach, fused = reports.values()
    assert foreach.kinds == ["frozen Python value"]
    assert fused.kinds == []  # fused SGD, lr a 0-dim tensor on the parameters' device
    words = G.graph_words(foreach)
    assert len(words) == len(foreach.hazards) and "scheduler" in words[0]
    assert G.graph_words(fused)[0].startswith("no hazard seen")


def test_cuda_graphs_say_why_not_on_a_cpu_and_the_model_stands_in():
    cmp, why = G.shipped_comparison("cpu")
    assert cmp is None and "CUDA" in why
    assert G.graphed_agreement("cpu") is None
    m = G.gpu_model()
    assert set(m) == {"T4", "A100", "H100"}
    for r in m.values():
        assert r["original"] > 3 * r["fixed"] and r["original"] > 5 * r["fixed, one CUDA graph"]
    G.gpu_model_figure(m)


def test_the_gpu_model_counts_what_launches_on_a_gpu():
    """x[j] with a CPU index reads host memory (no kernel); SGD is foreach on CUDA; the graph is one launch and
    REPLAY_EXTRA copies a step. The old count (every op dispatched on meta) took 452 ops for the original."""
    w = G.gpu_work(SMALL, steps=2)
    orig, fixed, graph = (w[k] for k in ("original", "fixed", "fixed, one CUDA graph"))
    assert orig[0].launches == orig[1] and fixed[0].launches == fixed[1]
    assert graph[0].launches == 2 * (1 + G.REPLAY_EXTRA) and graph[1] > fixed[1]  # set_to_none=False: zero_ + add_
    d = dict(SMALL)
    with torch.device("meta"):
        slow = M.Model(False, d["C"], d["H"], d["E"])
    from lessons_lib.trace import meta_reads

    with meta_reads():
        every_op = trace_ops(M.train, slow, torch.empty(16, 6, 8, device="meta"),
                             torch.empty(16, dtype=torch.long, device="meta"), 2, 8)
    assert len(every_op.compute_ops) > orig[1] + 2 * 2 * SMALL["batch"]  # the host reads x[j], y[j] at least
    try:
        G.gpu_model(["nosuch"])
    except ValueError as err:
        assert "nosuch" in str(err)
    else:
        raise AssertionError("an unknown GPU must be refused")


def test_bad_arguments_are_refused_before_anything_runs():
    import pytest

    with pytest.raises(ValueError, match="steps=0"):
        X.waterfall(steps=0)
    with pytest.raises(ValueError, match="No datasheet for GPU 'nosuch'"):
        G.gpu_model(gpus=["nosuch"])
