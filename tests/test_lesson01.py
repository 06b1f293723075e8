"""Lesson 01 (broadcast matmul vs loop, forum seed 000): the claims its notebook makes, tested."""
import dataclasses

import matplotlib.figure
import matplotlib.pyplot as plt
import pytest
import torch

from lessons_lib import lesson01_broadcast_matmul as L
from lessons_lib import grading, roofline, trace
from lessons_lib.lesson import Variant

SEED = L.THREAD_SHAPE
ODD = {"num_modules": 7, "num_inputs": 5, "batch_size": 3, "embed_dims": 33}
WEIGHT_COPY = (12, 13, 512, 512)
WEIGHT_COPY_BYTES = 12 * 13 * 512 * 512 * 4  # 163,577,856 B: 156 MiB, about 164 MB


@pytest.fixture(scope="module")
def seed_traces():
    return L.LESSON.traces(SEED)  # on meta: nothing allocated


def _boom(*args, **kwargs):
    raise AssertionError("allocated inputs for a shape that should have been refused first")


def _on_meta(args, kwargs) -> bool:
    dev = kwargs.get("device", args[1] if len(args) > 1 and not isinstance(args[1], int) else None)
    return dev is not None and torch.device(dev).type == "meta"


@pytest.fixture
def no_allocation(monkeypatch):
    """Fail the test if the lesson makes inputs or torch draws a random tensor on a real device. Tensors
    on `meta` (shapes only: the op traces a floor estimate reads) allocate nothing and are let through.
    The machine's peaks (a small benchmark the floor needs, cached per process) are measured first."""
    from lessons_lib import roofline

    roofline.measure_peaks(torch.device("cpu"), torch.float32)
    real_inputs = L.LESSON.make_inputs

    def make_inputs(*args, **kwargs):
        if not _on_meta(args, kwargs):
            _boom()
        return real_inputs(*args, **kwargs)

    monkeypatch.setattr(L.LESSON, "make_inputs", make_inputs)
    for name in ("randn", "rand", "zeros", "ones"):
        real = getattr(torch, name)

        def guarded(*args, _real=real, **kwargs):
            if torch.device(kwargs.get("device") or "cpu").type != "meta":
                _boom()
            return _real(*args, **kwargs)

        monkeypatch.setattr(torch, name, guarded)


@pytest.fixture
def one_thread():
    """For tests that time things only to check plumbing: on a loaded CI machine, two CPU threads
    contending with other jobs can make a 0.1 ms matmul take a scheduler tick, 100 calls a sample."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- correctness -----------------------------------------------------------------------------
def test_every_variant_matches_float64_at_the_seed_and_odd_shapes():
    rows = L.LESSON.check_correct([SEED, ODD], seed=0)
    assert len(rows) == 2 * len(L.LESSON.variants) == 10
    assert [(name, err) for name, _shape, err, _tol, ok in rows if not ok] == []
    assert L.LESSON.correctness_report(rows).startswith("✓ all 5 variants match")


def test_default_and_declared_odd_shapes_pass():
    assert ODD in L.LESSON.odd_shapes
    rows = L.LESSON.check_correct(seed=1)
    assert rows
    assert all(ok for *_rest, ok in rows)


def test_the_correctness_check_flags_wrong_variants():
    def forgot_transpose(x, weight, bias):  # square weights, so the shapes still work
        return torch.stack([x @ w + b for w, b in zip(weight, bias)])

    def first_bias_only(x, weight, bias):
        return L.einsum(x, weight, bias[:1].expand_as(bias))

    wrong = dataclasses.replace(
        L.LESSON, variants=[*L.LESSON.variants, Variant("forgot transpose", forgot_transpose),
                            Variant("first bias only", first_bias_only)])
    rows = wrong.check_correct([SEED, ODD], seed=0)
    bad = {name for name, _s, _e, _t, ok in rows if not ok}
    assert bad == {"forgot transpose", "first bias only"}
    report = wrong.correctness_report(rows)
    assert report.startswith("✗ 4 mismatches")
    assert "forgot transpose at num_modules=7" in report


# --- the mechanism: op traces -------------------------------------------------------------------
@pytest.mark.parametrize("dev", ["meta", "cpu"])
def test_trace_finds_the_weight_copy_and_the_batch_156_bmm(dev):
    x, weight, bias = L.make_inputs(SEED, torch.device(dev), torch.float32)
    t = trace.trace_ops(L.broadcast_matmul, x, weight, bias)
    copies = [op for op in t.named("clone") if op.out_shapes[0] == WEIGHT_COPY]
    assert len(copies) == 1
    assert copies[0].alloc_bytes == WEIGHT_COPY_BYTES == L.thread_weight_copy_bytes()
    assert round(WEIGHT_COPY_BYTES / 1e6) == 164
    assert WEIGHT_COPY_BYTES // 2**20 == 156
    assert [(op.name, op.gemm) for op in t.gemms] == [("bmm", (156, 16, 512, 512))]  # batch, M, N, K
    # x is copied too (12×13×16×512), and the two expanded operands are all it copies
    assert sorted(op.out_shapes[0] for op in t.copies) == [(12, 13, 16, 512), WEIGHT_COPY]


def test_lesson_traces_are_on_meta_and_match(seed_traces):
    t = seed_traces["broadcast matmul"]
    assert max(op.alloc_bytes for op in t.copies) == WEIGHT_COPY_BYTES
    assert t.gemms[0].gemm == (156, 16, 512, 512)


@pytest.mark.parametrize("name, gemm", [
    ("einsum", ("bmm", (1, 208, 6144, 512))),
    ("folded mm", ("addmm", (1, 208, 6144, 512))),
    ("stacked bmm", ("baddbmm", (12, 208, 512, 512))),
])
def test_rewrites_copy_nothing_and_run_one_gemm(seed_traces, name, gemm):
    t = seed_traces[name]
    assert t.copies == []
    assert [(op.name, op.gemm) for op in t.gemms] == [gemm]
    out_bytes = 12 * 13 * 16 * 512 * 4
    assert all(op.alloc_bytes <= out_bytes for op in t.ops)  # nothing bigger than the output


def test_loop_runs_twelve_gemms_and_copies_no_weight(seed_traces):
    t = seed_traces["loop"]
    assert [(op.name, op.gemm) for op in t.gemms] == [("mm", (1, 208, 512, 512))] * 12
    assert [op.name for op in t.copies] == ["stack"]  # only the outputs are gathered
    assert t.copies[0].out_shapes[0] == (12, 13, 16, 512)


def test_same_flops_very_different_bytes(seed_traces):
    work = {n: roofline.Work.from_trace(t) for n, t in seed_traces.items()}
    assert len({w.flops for w in work.values()}) == 1
    assert work["einsum"].flops == 2 * 208 * 6144 * 512
    assert work["broadcast matmul"].bytes > 10 * work["einsum"].bytes
    table = L.LESSON.work_table(SEED)
    assert "1 (batch 156)" in table
    assert "12 (batch 1)" in table


def test_one_input_means_no_copy():
    t = L.LESSON.traces({**SEED, "num_inputs": 1})["broadcast matmul"]
    assert t.copies == []
    assert t.gemms[0].gemm == (12, 16, 512, 512)


# --- the explorer: refuses before allocating, runs small shapes ---------------------------------
def test_explorer_refuses_an_oversized_shape_without_allocating(no_allocation):
    ex = L.explorer("cpu")
    with pytest.raises(ValueError, match="Make a dimension smaller"):
        ex.run(embed_dims=8192, num_modules=256)
    with pytest.raises(ValueError, match="Make a dimension smaller"):  # a sweep checks every shape first
        ex.sweep("num_modules", [1, 256], embed_dims=8192)


@pytest.mark.parametrize("kwargs, message", [
    ({"embed_dims": 12.5}, "whole number"),
    ({"num_modules": True}, "whole number"),
    ({"embed_dims": "512"}, "whole number"),
    ({"embed_dims": 0}, "between 1 and 8192"),
    ({"num_modules": 257}, "between 1 and 256"),
    ({"heads": 4}, "Unknown parameter"),
    ({"dtype": "float64"}, "dtype must be one of"),
    ({"dtype": "fp16"}, "dtype must be one of"),
])
def test_explorer_rejects_invalid_input_with_a_sentence(no_allocation, kwargs, message):
    with pytest.raises(ValueError, match=message):
        L.explorer("cpu").run(**kwargs)


def test_explorer_rejects_cuda_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="no usable CUDA"):
        L.explorer("cpu").run(device="cuda", embed_dims=8)


def test_explorer_runs_a_small_shape_to_a_figure(one_thread):
    ex = L.explorer("cpu")
    ex.min_run_time = 0.01
    run, fig = ex.run(num_modules=2, num_inputs=3, batch_size=2, embed_dims=8)
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert set(run.timings) == {v.name for v in L.LESSON.variants}
        assert all(t.median > 0 for t in run.timings.values())
    finally:
        plt.close(fig)


# --- the exercise checker ---------------------------------------------------------------------
def _folded(x, W):
    B, T, D = x.shape
    H, Dh, _ = W.shape
    return (x.reshape(B * T, D) @ W.reshape(H * Dh, D).T).view(B, T, H, Dh).permute(0, 2, 1, 3)


def _checks(verdict):
    return {name.split(" (")[0]: ok for name, ok, _detail in verdict.checks}


def test_checker_fails_the_starter_on_copies_not_correctness():
    v = L.check_exercise(L.exercise_starter)
    assert not v.passed
    assert "Not yet" in str(v)
    c = _checks(v)
    assert c["matches the float64 reference at 4 shapes"] is True
    assert c["copies nothing"] is False
    assert c["allocates only the output"] is False


@pytest.mark.parametrize("fn", [_folded, lambda x, W: torch.einsum("btd,hed->bhte", x, W)])
def test_checker_passes_a_correct_one_gemm_solution(fn):
    # Every machine-independent line; the [GPU] speed bar is test_gpu_exercise_solution_passes_the_speed_bar's.
    v = L.check_exercise(fn).on_every_machine()
    assert v.passed, str(v)
    assert "Passed" in str(v)


def _first_head_only(x, W):  # right shape, wrong values
    return (x @ W[0].T).unsqueeze(1).expand(-1, W.shape[0], -1, -1)


def test_checker_fails_wrong_values():
    assert _checks(L.check_exercise(_first_head_only))["matches the float64 reference at 4 shapes"] is False


def test_checker_fails_a_wrong_shape():
    v = L.check_exercise(lambda x, W: torch.einsum("btd,hed->bthe", x, W))  # (B, T, H, Dh)
    assert _checks(v)["runs and returns"] is False


def test_checker_reports_a_crash_as_a_line():
    v = L.check_exercise(lambda x, W: x @ W)  # D against Dh: a shape error
    assert "RuntimeError" in str(v)


def test_checker_fails_nan():
    # max(worst, nan) keeps the old value: a NaN output used to pass.
    def nan_out(x, W):
        out = _folded(x, W).clone()
        out[(0,) * out.dim()] = float("nan")
        return out

    assert _checks(L.check_exercise(nan_out))["matches the float64 reference at 4 shapes"] is False


def test_checker_catches_a_solution_that_overwrites_its_input():
    # The reference used to be computed after the call, from the overwritten input.
    def zero_everything(x, W):
        x.zero_()
        W.zero_()
        return torch.einsum("btd,hed->bhte", x, W)

    v = L.check_exercise(zero_everything)
    assert "changed input" in str(v)


def test_checker_accepts_a_correct_solution_that_reads_a_value():
    # .item() has no value on meta: the trace falls back to CPU instead of crashing the checker.
    def with_item(x, W):
        if W.new_ones(()).item() != 1.0:  # a value read: nothing to read on meta
            raise AssertionError("unreachable")
        return _folded(x, W)

    assert L.check_exercise(with_item).on_every_machine().passed


def test_checker_stops_an_endless_loop(monkeypatch):
    monkeypatch.setattr(grading, "READER_TIME_LIMIT", 0.5)

    def forever(x, W):
        while True:
            pass

    v = L.check_exercise(forever)
    assert "stopped" in str(v)


def test_checker_refuses_a_non_function():
    assert _checks(L.check_exercise("my_projection"))["is a function"] is False


def test_checker_fails_a_correct_loop_on_gemm_count():
    v = L.check_exercise(lambda x, W: torch.stack([x @ w.T for w in W], dim=1))
    c = _checks(v)
    assert not v.passed
    assert c["matches the float64 reference at 4 shapes"] is True
    assert c["launches exactly one GEMM"] is False


# --- recorded results -------------------------------------------------------------------------
def test_record_quick_on_cpu(monkeypatch, one_thread):
    # record() times THREAD_SHAPE and sweeps around the CPU defaults; smaller features keep this test
    # fast on a busy CPU (the notebook times the real seed shape; record() does not depend on it).
    small = {**SEED, "embed_dims": 64}
    monkeypatch.setattr(L, "THREAD_SHAPE", small)
    monkeypatch.setattr(L.LESSON.param("embed_dims"), "cpu", 64)
    out = L.record(torch.device("cpu"), quick=True)
    head = out["headline"]
    assert head["params"] == small
    assert head["dtype"] == "float32"
    assert set(head["variants"]) == {v.name for v in L.LESSON.variants}
    assert head["peaks"]["flops"] > 0
    assert head["peaks"]["bandwidth"] > 0
    for row in head["variants"].values():
        assert row["median"] > 0
        assert row["floor"] > 0
        assert row["flops"] == 2 * 208 * (12 * 64) * 64
    assert out["sweeps"]
    for sweep in out["sweeps"].values():
        assert sweep["values"]
        for series in sweep["variants"].values():
            assert len(series["median"]) == len(sweep["values"])
            assert all(m > 0 for m in series["median"])


def test_stacked_bmm_source_says_the_bias_is_copied_not_fused():
    # baddbmm's structured meta function copies `self` into the output when beta != 0, for every
    # backend (common_checks_baddbmm_bmm in aten/src/ATen/native/LinearAlgebra.cpp); the trace sees it.
    doc = L.stacked_bmm.__doc__
    assert "bias fused" not in doc and "copies the expanded bias" in doc
    t = L.LESSON.traces(L.THREAD_SHAPE)["stacked bmm"]
    (gemm,) = t.gemms
    assert gemm.name == "baddbmm" and t.copied_bytes == 12 * 13 * 16 * 512 * 4  # the bias, expanded to the output
