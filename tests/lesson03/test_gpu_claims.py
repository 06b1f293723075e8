"""Lesson 03 (many small Linear layers in parallel, forum seed 002): the GPU claims, and the CPU-run parts of the GPU and precision code (evidence.py)."""

import pytest
import torch

from lessons_lib import roofline
from lessons_lib import grouped_linear as GL
from lessons_lib import lesson03_grouped_linear as L
from lessons_lib.lesson03_grouped_linear import crossover, evidence, lessons
from .helpers import SMALL


# --- GPU claims -------------------------------------------------------------------------------------------
# 1. The best training step is near its roofline model (evidence.step_model). The roofline counts the same FLOPs
# for the loop, the Conv1d and the batched GEMMs (they do the same maths), so it cannot say which is fastest; it
# can say how close to its floor the best should get. At the thread's shape (batch 8, 100 groups of 100, length
# 512: 4096 rows) a step is 3 batched GEMMs of 8.2 GFLOP (24.6 GFLOP: 0.37 ms at an H100's or H200's 67 TFLOP/s
# fp32) plus elementwise ops, and the course's own trace (on meta) gives 1.5 GiB moved for the channels-first
# matmul, 2.6 GiB for bmm and einsum: the step sits at the ridge (memory ≈ compute). The model charges each kernel,
# one after another, its FLOPs at 40% of the fp32 peak plus its bytes at 75% of the bandwidth, both fitted to the
# H200 (evidence.H200_MEASURED, the GPU probe of 2026-11-26: that GEMM ran at 28% of the peak counting its FLOPs
# alone, 37% once its bytes are charged at the copy's measured 73%; 42% fitted over the whole step). The model:
# 1.37 ms on an H200, 1.57 ms on an H100 (channels-first matmul, the leanest); the bar is that × GPU_MARGIN (1.25:
# the efficiencies come from one GPU, one torch and one cuBLAS): 1.72 ms on an H200, 1.96 ms on an H100.
# Measured on the H200: 1.19 ms (claim tests alone, first run) and 1.335 ms (the probe, second run), 0.69 and 0.78
# of the bar. The first model (50% and 80%: 1.16 ms, bar 1.45 ms) passed the second run by only 9%, because it
# modelled that GEMM 21% fast. test_the_bar_follows_from_the_roofline_model keeps the measurements under the bar.
GPU_MARGIN = 1.25
H200_MEASURED_BEST_S = (1.19e-3, 1.335e-3)  # measured (H200, torch 2.11, 2026-11-26, two runs): checks, not bars
# 2. The Conv1d bar (≥ 1.5×) is not from the roofline, it is the thread's: 1924 ms / 1263 ms = 1.52×, reported; it
# asserts that the reported gap reproduces, i.e. that cuDNN's grouped kernels for 100 groups of 100 run at under
# 2/3 of the batched GEMM's efficiency. cuDNN runs float32 convolutions in TF32 by default (the GEMMs run in full
# float32), which can only speed the Conv1d up: the gap measured here is a lower bound on the fp32-to-fp32 gap.
# 3. auto against the forum's variants on a sweep: see its docstring. Sized on the H200 (2026-11-26): at the thread's
# shape the channels-first step and auto take 1.3 ms, vmap about 2.3 ms, the loop about 15 ms and the Conv1d 17 ms
# (the probe alone; the notebook, two at a time, gave twice that), and tuning a shape takes 1.8 s. Per size: tuning
# 1.8 s, a first pass of the five (11 calls each at min_run_time 1 ms: about 0.4 s), then rounds of auto, the
# stacked matmul and vmap (about 60 ms each) until decided, at most 3 s: about 3 s a size, 6 s at worst, so
# 9-18 s for three sizes. The first design (5 sizes, every variant in every round at min_run_time 20 ms: blocks of
# 20-200 ms on a GPU) ran past the validation run's 60 s per-test timeout.
AUTO_BAR = 1.10
SWEEP_SIZES = list(crossover.CLAIM_SIZES)  # a small size (memory-bound GEMMs), the thread's, a power of 2
SWEEP_MAX_TIME = 3.0


def _bar(peaks) -> float:
    """The claim's bar on these peaks: the leanest batched strategy's modelled step × GPU_MARGIN (seconds)."""
    return GPU_MARGIN * min(m["model"] for m in evidence.step_model(peaks).values())


def test_the_bar_follows_from_the_roofline_model():
    for gpu in ("A100", "H100", "H200"):
        leanest = evidence.step_model(gpu)["matmul, channels first"]
        assert 0.5 <= leanest["memory"] / leanest["compute"] <= 2, f"{gpu}: the step is no longer at the ridge"
        # The H200 measured the best step at 3.6x its floor: K = 100 GEMMs run far from the peak. 5x bounds the bar.
        assert _bar(gpu) <= 5 * leanest["floor"], f"{gpu}: the bar is {_bar(gpu) / leanest['floor']:.1f}x the floor"
    assert max(H200_MEASURED_BEST_S) <= _bar("H200"), "the model no longer supports what the H200 measured: re-derive"
    measured = evidence.H200_MEASURED["step_ms"]["matmul, channels first"] * 1e-3
    model = evidence.step_model("H200")["matmul, channels first"]["model"]
    assert 0.8 <= measured / model <= 1.2, "the model no longer fits the H200's measured step: re-fit its efficiencies"
    assert _bar("H100") > _bar("H200")  # the same compute, less bandwidth


def _gpu_train_medians(variants):
    lesson = L.with_variants(L.TRAIN_LESSON, auto=True)
    run = lesson.run(lessons.THREAD_SHAPE, "cuda", variants=variants, min_run_time=0.1)  # 0.3: 8.5 s on the H200
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
    """What it guarantees: at each group size of the sweep (32, 100 and 128, at 100 groups and the thread's batch and
    length), the noise rule's paired rounds never decide GroupedLinear(auto)'s training step more than 10% slower
    than the fastest of the forum's variants (the loop, the grouped Conv1d, the stacked matmul, vmap), and they
    decide at two sizes of three at least. A forum variant that a first pass decides 2× slower than another is not
    the fastest and is left out of the rounds (`crossover.auto_against_forum`). auto runs one of the strategies the
    forum variants are, chosen once by tuning: 10% is what a choice between near-ties may cost. A single pass of
    medians flipped this test between two runs on the H200."""
    points = crossover.auto_against_forum("cuda", SWEEP_SIZES, lessons.THREAD_SHAPE, min_run_time=1e-3,
                                          max_time=SWEEP_MAX_TIME)
    lines = [f"group size {p['group_size']}: auto / {p['best']} = {p['ratio'].median:.2f} (IQR {p['ratio'].low:.2f}-"
             f"{p['ratio'].high:.2f}, {p['rounds']} rounds; left out, slower: "
             f"{', '.join(f'{n} {r:.1f}x' for n, r in p['far'].items()) or 'none'}; tuning {p['tuning_s']:.1f} s, "
             f"{p['seconds']:.1f} s in all)" for p in points]
    slower = [line for p, line in zip(points, lines) if p["ratio"].decided and p["ratio"].median > AUTO_BAR]
    undecided = [line for p, line in zip(points, lines) if not p["ratio"].decided]
    assert not slower, "\n".join(lines)
    assert len(undecided) <= 1, "\n".join(lines)


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


def test_the_sweep_and_a_quick_record_take_their_cuda_path_where_cuda_is_available(monkeypatch):
    """Under the simulated GPU (-p tests.simgpu): the claim's sweep at a tiny shape, on "cuda"."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA here (run with -p tests.simgpu --simulate-gpu=t4)")
    from lessons_lib.grouped_linear import tuning as GL_tuning

    monkeypatch.setattr(GL_tuning, "TUNE_BUDGET_S", 0.1)
    GL_tuning.clear_cache()
    points = crossover.auto_against_forum("cuda", [4], {"batch": 1, "groups": 2, "length": 4}, max_time=0.2,
                                          max_rounds=3)
    # the path, not the verdict: on a busy machine 0.2 s may hold fewer rounds than the noise rule's minimum
    assert points[0]["best"] in crossover.FORUM_VARIANTS and points[0]["rounds"] >= 1
    assert any(key[0].startswith("cuda") for key in GL_tuning.cache())  # auto was tuned on the (simulated) GPU


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
