"""Lesson 03 (many small Linear layers in parallel, forum seed 002): the GPU claims, and the CPU-run parts of the GPU and precision code (evidence.py)."""

import pytest
import torch

from lessons_lib import roofline, timing
from lessons_lib import grouped_linear as GL
from lessons_lib import lesson03_grouped_linear as L
from lessons_lib.lesson03_grouped_linear import crossover, evidence, lessons
from .helpers import SMALL
from .. import claims


# --- GPU claims -------------------------------------------------------------------------------------------
# 1. Every batched strategy's training step lands where microbenchmarks predict (step_model.py). BEFORE any step is
# timed, the test measures on this GPU each GEMM shape of the steps alone and a large copy (step_model.predict), and
# predicts each step as its kernels one after another. Bar (prediction): each measured step within PREDICTION_MARGIN
# (1.3×) of its prediction, either way, for what the model leaves out (the gaps between kernels, a GEMM's operand
# layout in backward, L2 reuse). The H200 (2026-11-26) with the datasheet form of the model, whose two efficiencies
# are that run's GEMM and copy microbenchmarks (call1-probes.log lines 11-12), not its steps: channels-first matmul
# 1.335 ms measured against 1.451 ms (0.92), bmm rows first 2.095 against 1.806 ms (1.16). Not claimed: "near its
# floor". The best step ran at 3.6× its roofline floor (0.367 ms), and the bar of the claim this one replaces, 1.25×
# a model FITTED to that same H200 step, stood at 4.7× the floor.
PREDICTION_MARGIN = 1.3
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


def test_the_step_model_is_fixed_by_microbenchmarks_not_by_the_steps():
    from lessons_lib.lesson03_grouped_linear import step_model as SM

    m = SM.H200_MEASURED  # the efficiencies follow from the GEMM and the copy alone
    assert SM.GEMM_EFFICIENCY == pytest.approx(2 * 800 * 100 * 100 * 512 / (m["gemm_ms"] * 1e-3) / 67e12)
    assert SM.MEMORY_EFFICIENCY == pytest.approx(m["copy_gbs"] / 4800)
    assert SM.GEMM_EFFICIENCY == pytest.approx(m["gemm_peak_share"], abs=0.005)
    for gpu in ("A100", "H100", "H200"):
        leanest = evidence.step_model(gpu)["matmul, channels first"]
        assert 0.5 <= leanest["memory"] / leanest["compute"] <= 2, f"{gpu}: the step is no longer at the ridge"
        assert leanest["model"] >= 2 * leanest["floor"], f"{gpu}: the model is near the floor: claim that instead"
    # the model's error on the last H200 run (measured / model), stated in the claim and in .ci/gpu-runs/CLAIMS.md
    errors = SM.h200_errors()
    assert errors == pytest.approx({"matmul, channels first": 0.92, "bmm, rows first": 1.16}, abs=0.01)
    assert all(1 / PREDICTION_MARGIN <= e <= PREDICTION_MARGIN for e in errors.values())


def _gpu_train_medians(variants):
    lesson = L.with_variants(L.TRAIN_LESSON, auto=True)
    run = lesson.run(lessons.THREAD_SHAPE, "cuda", variants=variants, min_run_time=0.1)  # 0.3: 8.5 s on the H200
    return {n: t.median for n, t in run.timings.items()}, run


@pytest.mark.gpu
def test_gpu_each_batched_step_lands_within_its_microbenchmark_prediction():
    from lessons_lib.lesson03_grouped_linear import step_model as SM

    pred = SM.predict("cuda")  # the GEMMs and the copy, measured before any step is timed
    meds, _run = _gpu_train_medians(list(SM.STEP_VARIANTS))
    floor = min(m["floor"] for m in evidence.step_model(roofline.measure_peaks("cuda")).values())
    lines = [f"{n} {timing.fmt_time(meds[n])} against {timing.fmt_time(p)}: {claims.ratio_words(meds[n], p)}"
             for n, p in pred["steps"].items()]
    text = "; ".join(lines) + (f" (GEMMs measured alone: {len(pred['gemms'])} shapes; copy "
                               f"{pred['bandwidth'] / 1e9:,.0f} GB/s); the best at "
                               f"{min(meds.values()) / floor:.1f}× the roofline floor")
    claims.report("lesson 03, each batched training step at the thread's shape", "prediction", text)
    off = [line for n, line in zip(pred["steps"], lines)
           if not 1 / PREDICTION_MARGIN <= meds[n] / pred["steps"][n] <= PREDICTION_MARGIN]
    assert not off, f"outside {PREDICTION_MARGIN}× of the prediction: {off}"


@pytest.mark.gpu
def test_gpu_best_training_step_beats_grouped_conv1d_by_the_reported_gap():
    meds, _ = _gpu_train_medians(["grouped Conv1d", "bmm, rows first", "matmul, channels first", "einsum", "vmap"])
    best = min(v for n, v in meds.items() if n != "grouped Conv1d")
    claims.report("lesson 03, the grouped Conv1d's step over the best batched step", "reported",
                  f"{meds['grouped Conv1d'] / best:.1f}× against the thread's 1.52× (bar 1.5×; the H200 measured "
                  "13× in the probe, cuDNN in TF32)")
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
    claims.report("lesson 03, auto against the forum's variants on a sweep", "tolerance", "; ".join(lines))
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
