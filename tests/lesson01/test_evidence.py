"""Lesson 01's mechanism (evidence.py and the lesson's traces): the weight copy, the GEMMs, the bytes."""
import pytest
import torch

from lessons_lib import roofline, trace
from lessons_lib.lesson01_broadcast_matmul import evidence, explore, variants

from .helpers import SEED, WEIGHT_COPY, WEIGHT_COPY_BYTES


@pytest.fixture(scope="module")
def seed_traces():
    return explore.LESSON.traces(SEED)  # on meta: nothing allocated



# --- the mechanism: op traces -------------------------------------------------------------------
@pytest.mark.parametrize("dev", ["meta", "cpu"])
def test_trace_finds_the_weight_copy_and_the_batch_156_bmm(dev):
    x, weight, bias = variants.make_inputs(SEED, torch.device(dev), torch.float32)
    t = trace.trace_ops(variants.broadcast_matmul, x, weight, bias)
    copies = [op for op in t.named("clone") if op.out_shapes[0] == WEIGHT_COPY]
    assert len(copies) == 1
    assert copies[0].alloc_bytes == WEIGHT_COPY_BYTES == evidence.thread_weight_copy_bytes()
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
    table = explore.LESSON.work_table(SEED)
    assert "1 (batch 156)" in table
    assert "12 (batch 1)" in table


def test_one_input_means_no_copy():
    t = explore.LESSON.traces({**SEED, "num_inputs": 1})["broadcast matmul"]
    assert t.copies == []
    assert t.gemms[0].gemm == (12, 16, 512, 512)



def test_stacked_bmm_source_says_the_bias_is_copied_not_fused():
    # baddbmm's structured meta function copies `self` into the output when beta != 0, for every
    # backend (common_checks_baddbmm_bmm in aten/src/ATen/native/LinearAlgebra.cpp); the trace sees it.
    doc = variants.stacked_bmm.__doc__
    assert "bias fused" not in doc and "copies the expanded bias" in doc
    t = explore.LESSON.traces(variants.THREAD_SHAPE)["stacked bmm"]
    (gemm,) = t.gemms
    assert gemm.name == "baddbmm" and t.copied_bytes == 12 * 13 * 16 * 512 * 4  # the bias, expanded to the output


def test_the_one_input_reading_follows_the_regimes_it_prints():
    # Cell 33 said both variants are overhead-bound on a T4 and an H100 while cell 34 printed the T4's broadcast
    # matmul memory-bound: the sentence now comes with the regimes it reads, per source.
    import torch

    from lessons_lib import roofline
    from lessons_lib.lesson01_broadcast_matmul import evidence

    sources = [(g, roofline.datasheet(g, torch.float32, tf32=False)) for g in ("T4", "H100")]
    sources.append(("compute-heavy", roofline.Peaks(1e9, 1e12, 1e-9, "test")))  # FLOPs dominate both
    t4, h100, slow = evidence.one_input_floors(512, sources).splitlines()
    assert "broadcast matmul" in t4 and "(memory-bound" in t4 and "one bound each: the loop's floor is the higher" in t4
    assert h100.count("(overhead-bound)") == 2 and "both overhead-bound: the loop's 25 launches against 2" in h100
    assert slow.count("compute-bound") == 2 and "neither is overhead-bound" in slow
