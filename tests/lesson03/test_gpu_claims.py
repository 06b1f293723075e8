"""Lesson 03 (many small Linear layers in parallel, forum seed 002): the GPU claims, and the CPU-run parts of the GPU and precision code (evidence.py)."""

import pytest
import torch

from lessons_lib import roofline
from lessons_lib import grouped_linear as GL
from lessons_lib import lesson03_grouped_linear as L
from lessons_lib.lesson03_grouped_linear import evidence, lessons
from .helpers import SMALL


# --- GPU claims -------------------------------------------------------------------------------------------
# 1. The best training step is near its roofline model (evidence.step_model). The roofline counts the same FLOPs
# for the loop, the Conv1d and the batched GEMMs (they do the same maths), so it cannot say which is fastest; it
# can say how close to its floor the best should get. At the thread's shape (batch 8, 100 groups of 100, length
# 512: 4096 rows) a step is 3 batched GEMMs of 8.2 GFLOP (24.6 GFLOP: 0.37 ms at an H100's or H200's 67 TFLOP/s
# fp32) plus elementwise ops, and the course's own trace (on meta) gives 1.5 GiB moved for the channels-first
# matmul, 2.6 GiB for bmm and einsum: 0.34-0.58 ms at an H200's 4.8 TB/s, 0.49-0.84 ms at an H100's 3.35 TB/s.
# The step sits at the ridge (memory ≈ compute), not in the compute-bound regime the first bar assumed (compute
# floor / 40% GEMM efficiency × 1.15 = 1.05 ms; the H200 measured 1.19 ms). The model charges each kernel, one
# after another, its FLOPs at 50% of the fp32 peak (K = N = 100 is a short inner loop) plus its bytes at 80% of
# the bandwidth: 1.16 ms on an H200, 1.35 ms on an H100 (channels-first matmul, the leanest). The bar is that
# model × GPU_MARGIN (1.25, for the efficiencies being guesses): 1.45 ms on an H200, 1.69 ms on an H100.
# Sanity check, measured: the H200 run of 2026-11-26 (claim tests alone) gave 1.19 ms for the best step,
# 3% above the model and 0.82 of the bar. test_the_bar_follows_from_the_roofline_model keeps both true.
GPU_MARGIN = 1.25
H200_MEASURED_BEST_S = 1.19e-3  # measured (H200, torch 2.11, 2026-11-26): a sanity check of the model, not a bar
# 2. The Conv1d bar (≥ 1.5×) is not from the roofline, it is the thread's: 1924 ms / 1263 ms = 1.52×, reported; it
# asserts that the reported gap reproduces, i.e. that cuDNN's grouped kernels for 100 groups of 100 run at under
# 2/3 of the batched GEMM's efficiency. cuDNN runs float32 convolutions in TF32 by default (the GEMMs run in full
# float32), which can only speed the Conv1d up: the gap measured here is a lower bound on the fp32-to-fp32 gap.
# 3. auto against the forum's variants on a sweep: see its docstring.
AUTO_BAR = 1.10
SWEEP_SIZES = [16, 32, 64, 100, 128]
FORUM_VARIANTS = ["loop (SlowGroups)", "grouped Conv1d", "matmul, channels first", "vmap"]


def _bar(peaks) -> float:
    """The claim's bar on these peaks: the leanest batched strategy's modelled step × GPU_MARGIN (seconds)."""
    return GPU_MARGIN * min(m["model"] for m in evidence.step_model(peaks).values())


def test_the_bar_follows_from_the_roofline_model():
    for gpu in ("A100", "H100", "H200"):
        leanest = evidence.step_model(gpu)["matmul, channels first"]
        assert 0.5 <= leanest["memory"] / leanest["compute"] <= 2, f"{gpu}: the step is no longer at the ridge"
        assert _bar(gpu) <= 4 * leanest["floor"], f"{gpu}: the bar is {_bar(gpu) / leanest['floor']:.1f}x the floor"
    assert H200_MEASURED_BEST_S <= _bar("H200"), "the model no longer supports what the H200 measured: re-derive"
    assert _bar("H100") > _bar("H200")  # the same compute, less bandwidth


def _gpu_train_medians(variants):
    lesson = L.with_variants(L.TRAIN_LESSON, auto=True)
    run = lesson.run(lessons.THREAD_SHAPE, "cuda", variants=variants, min_run_time=0.3)
    return {n: t.median for n, t in run.timings.items()}, run


@pytest.mark.gpu
def test_gpu_best_training_step_is_near_its_roofline_model():
    meds, _run = _gpu_train_medians(list(evidence.STEP_VARIANTS))
    peaks = roofline.datasheet(torch.cuda.get_device_name(), torch.float32, tf32=False) or \
        roofline.measure_peaks("cuda")
    assert min(meds.values()) <= _bar(peaks), meds


@pytest.mark.gpu
def test_gpu_best_training_step_beats_grouped_conv1d_by_the_reported_gap():
    meds, _ = _gpu_train_medians(["grouped Conv1d", "bmm, rows first", "matmul, channels first", "einsum", "vmap"])
    best = min(v for n, v in meds.items() if n != "grouped Conv1d")
    assert meds["grouped Conv1d"] / best >= 1.5


@pytest.mark.gpu
def test_gpu_auto_is_never_decided_slower_than_the_forum_variants_on_a_sweep():
    """What it guarantees: at every group size of the sweep (100 groups, the thread's batch and length), the noise
    rule's paired rounds (alternating order, the median of the per-round ratios) never decide GroupedLinear(auto)'s
    training step more than 10% slower than the fastest forum variant there, and they decide at all points but
    one. auto runs one of the strategies the forum variants are, chosen once by tuning: 10% is what a choice
    between near-ties may cost. A single pass of medians flipped this test between two runs on the H200."""
    from lessons_lib import noise
    from lessons_lib.lesson03_grouped_linear.lessons import AUTO

    lesson = L.with_variants(L.TRAIN_LESSON, auto=True)
    slower, undecided = [], []
    for size in SWEEP_SIZES:
        p = {**lessons.THREAD_SHAPE, "group_size": size}
        lesson.run(p, "cuda", variants=[AUTO], min_run_time=0.01)  # tunes this shape outside the rounds' budget
        cmp = noise.compare_lesson(lesson, p, "cuda", variants=[AUTO, *FORUM_VARIANTS], rounds=5, max_rounds=9,
                                   min_run_time=0.02, max_time=3.0, pairs=[(AUTO, n) for n in FORUM_VARIANTS])
        best = min(FORUM_VARIANTS, key=cmp.median)
        r = cmp.ratio(AUTO, best)
        line = f"group size {size}: auto / {best} = {r.median:.2f} (IQR {r.low:.2f}-{r.high:.2f})"
        if not r.decided:
            undecided.append(line)
        elif r.median > AUTO_BAR:
            slower.append(line)
    assert not slower, "\n".join(slower)
    assert len(undecided) <= 1, "\n".join(undecided)


def test_reported_figures_match_the_reference_file():
    from lessons_lib import results

    recs = results.for_lesson(L.KEY, kinds="reported")
    assert len(recs) == 1 and recs[0].lessons[L.KEY]["reported"]["totals_s"] == {
        "batched matmul (reply's MultichannelLinear)": 1.263, "grouped Conv1d": 1.924}
    assert recs[0].lessons[L.KEY]["reported"]["totals_s"] == {
        k: v for k, v in lessons.THREAD_REPORTED.items()}


def test_cuda_branches_where_cuda_is_available():
    """Runs on a GPU and under the simulated one (-p tests.simgpu): tuning, checks and reports on "cuda"."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA here (run with -p tests.simgpu --simulate-gpu=t4)")
    layer = GL.GroupedLinear(4, 8, 8, dim=1, device="cuda")
    x = torch.randn(2, 32, 5, device="cuda", requires_grad=True)
    layer(x).sum().backward()
    assert x.grad.shape == x.shape and "cuda" in layer.explain()
    rows = L.TRAIN_LESSON.check_correct([SMALL], device="cuda", seed=0)
    assert [r.variant for r in rows if not r.ok] == []
    assert "grouped_mm forward on cuda" in L.grouped_mm_report("cuda")
    assert "on cuda" in L.conv_backend(SMALL, "cuda") or "could not ask" in L.conv_backend(SMALL, "cuda")
    with pytest.raises(ValueError):
        L.explorer("cuda").run(groups=4096, group_size=16, batch=4096, length=65536)


def test_reproduce_runs_mixed_precision_and_refuses_fp16_autocast_on_a_cpu(one_thread):
    t, _models = L.reproduce("cpu", SMALL, min_run_time=0.01, max_time=0.2, amp="bfloat16")
    assert len(t["forward"]) == 3
    with pytest.raises(ValueError, match="bfloat16"):
        L.reproduce("cpu", SMALL, amp="float16")
    assert f"input {SMALL['batch']}×" in L.conv_backend(SMALL, "cpu")  # probed with the real input's shape


def test_precision_model_halves_the_batched_floors_and_knows_the_t4_has_no_bf16():
    text = L.precision_model({"batch": 1, "groups": 4, "group_size": 16, "length": 8}, gpus=("T4", "H100"),
                             variants=("grouped Conv1d", "bmm, rows first"))
    t4 = [line for line in text.splitlines() if line.startswith("T4")]
    assert t4 and all(line.rstrip().endswith("no hardware") for line in t4)
    assert "a model, not a measurement" in text
