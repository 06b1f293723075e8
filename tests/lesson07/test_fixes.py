"""The waterfall, graph_check and the GPU model (no clock in any assertion)."""
from lessons_lib.lesson07_capstone import fixes as X
from lessons_lib.lesson07_capstone import model as M

SMALL = dict(C=32, H=4, E=4, T=6, batch=8)


def test_stages_are_cumulative_in_the_given_order():
    assert [n for n, _ in X.stages()] == ["original", *(f"+ {f}" for f in M.FIXES)]
    assert X.stages(["loop", "gemm"])[-1] == ("+ gemm", frozenset({"loop", "gemm"}))


def test_waterfall_measures_every_stage_and_speaks_through_the_noise_rule():
    w = X.waterfall(dims=SMALL, max_time=3.0)
    assert w.names == [n for n, _ in X.stages()]
    assert all(w.per_step(n) > 0 for n in w.names)
    assert len(w.sentences()) == len(w.names)
    for line in w.sentences():  # a ratio or the noise rule's sentence, never a bare assertion
        assert "faster" in line or "slower" in line or "not decided" in line or "no faster" in line
    assert w.peaks["original"] > w.peaks[w.names[-1]]  # the fixed step's peak is lower (bytes: no clock)
    assert "stage" in str(w.table())
    w.plot()


def test_graph_check_on_the_fixed_step_finds_only_the_frozen_lr():
    r = X.graph_report(dims=SMALL)
    assert r.kinds == ["frozen Python value"]


def test_cuda_graphs_say_why_not_on_a_cpu_and_the_model_stands_in():
    cmp, why = X.graphed_step("cpu")
    assert cmp is None and "CUDA" in why
    m = X.gpu_model()
    assert set(m) == {"T4", "A100", "H100"}
    for r in m.values():
        assert r["original"] > 5 * r["fixed"] and r["fixed, one CUDA graph"] <= r["fixed"]
    X.gpu_model_figure(m)
