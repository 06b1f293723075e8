"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): GPU claims (marked gpu, skipped without
CUDA). Bars: predictions from the roofline on datasheet peaks (the speed-ups at widths 160 and 8192, fusion's bytes
bound, the exercise's passes over a tensor), and counts of kernels; each prints its kind, its model's prediction and
the measurement (tests/claims.py). The table of every claim: .ci/gpu-runs/CLAIMS.md."""
import pytest
import torch

from lessons_lib import compiling, roofline, trace
from lessons_lib.lesson04_launch_overhead import compiled, explore, fusion, lessons, variants

from .. import claims


def _asymptote_model(width: int) -> float:
    """The roofline's Linear / PseudoLinear at `width` on this GPU's datasheet, fp32: slope · width."""
    return roofline.speedup_asymptote(roofline.datasheet(claims.datasheet_gpu(), torch.float32, tf32=False)) * width


# --- GPU claims (skipped without CUDA); each bar derived from the roofline --------------------------
@pytest.mark.gpu
def test_gpu_width_160_pseudolinear_is_less_than_2x_faster():
    # Roofline at batch B, width N, fp32 (e = 4 B): Linear is compute-bound, 2·B·N² / F; PseudoLinear
    # memory-bound, 2 ops each reading and writing B·N·e, so 4·B·N·e / BW. Their ratio is
    # N·BW / (2·e·F) = 160·BW / (8·F): 1.6 on an A100 (1.55 TB/s, 19.5 TFLOP/s), 1.0 on an H100 SXM,
    # less with TF32. The bar, 2×, is that prediction with 25 % margin; FLOPs alone would say 160×.
    dev = torch.device("cuda")
    p = {"width": 160, "batch": 32768, "layers": 4}
    model = _asymptote_model(160)
    run = lessons.LESSON.run(p, dev, variants=["Linear", "PseudoLinear"], min_run_time=0.5)
    ratio = run.timings["Linear"].median / run.timings["PseudoLinear"].median
    claims.report("lesson 04, Linear over PseudoLinear at width 160", "prediction",
                  f"{ratio:.2f}× against the roofline's {model:.2f}× ({claims.datasheet_gpu()} datasheet, fp32): "
                  f"{claims.ratio_words(ratio, model)}; bar < 2×")
    assert ratio < 2, f"PseudoLinear {ratio:.2f}× faster than Linear at width 160"


@pytest.mark.gpu
def test_gpu_compiled_chain_launches_one_kernel_where_eager_launches_four():
    # Two layers of x * w + b: eager launches mul, add, mul, add (4 kernels); Inductor fuses the
    # pointwise chain into one kernel that reads x once and writes the output once.
    dev = torch.device("cuda")
    inputs = lessons.make_inputs({"width": 1024, "batch": 4096, "layers": 2}, dev, torch.float32)
    eager = trace.kernels(variants.pseudo_linear, *inputs)
    c = compiling.compile_cold(variants.pseudo_linear, *inputs)
    assert c.ok, c.problem
    fused = trace.kernels(c.fn, *inputs)
    claims.report("lesson 04, kernels of two layers of x * w + b", "count",
                  f"eager {len(eager or [])}, compiled {len(fused or [])}; bar: 1 compiled, 3 or more eager")
    assert len(eager) >= 3, (eager, fused)
    assert len(fused) == 1, (eager, fused)


@pytest.mark.gpu
def test_gpu_pseudolinear_5x_faster_than_linear_at_width_8192():
    # Same roofline as above at N = 8192: 8192·BW / (8·F) is 80 on an A100 in fp32 and about 7 on an
    # H100 even with TF32 (495 TFLOP/s, 3.35 TB/s). The bar, 5×, leaves that worst case 30 % margin.
    dev = torch.device("cuda")
    p = {"width": 8192, "batch": 32768, "layers": 1}
    model = _asymptote_model(8192)
    run = lessons.LESSON.run(p, dev, variants=["Linear", "PseudoLinear"], min_run_time=0.5)
    ratio = run.timings["Linear"].median / run.timings["PseudoLinear"].median
    claims.report("lesson 04, Linear over PseudoLinear at width 8192", "prediction",
                  f"{ratio:.1f}× against the roofline's {model:.1f}× ({claims.datasheet_gpu()} datasheet, fp32): "
                  f"{claims.ratio_words(ratio, model)}; bar >= 5×")
    assert ratio >= 5, f"PseudoLinear only {ratio:.2f}× faster than Linear at width 8192"


@pytest.mark.gpu
def test_gpu_fusion_gain_is_within_the_bytes_bound():
    # On a GPU the caching allocator reuses its blocks (no page faults per call) and no OpenMP threads
    # wait for each other: what fusion saves is bytes, at most eager's bytes over one fused kernel's
    # (2·layers = 8 at 4 layers, from the traces). Bars: above 2× at a memory-bound shape (64 MiB
    # tensors), and at most the bytes bound with the targets' 25 % margin. The H200's second run measured 1.00×:
    # not the claim but the code, whose meta trace of the compiled function (Lesson.check_correct's TF32 question)
    # left Dynamo skipping its code object, so the "compiled" side ran eagerly (fixed in trace._Recorder; the first
    # run, before that trace, gave 8.38×). Bars unchanged.
    dev = torch.device("cuda")
    p = explore.MEMORY_BOUND["cuda"]
    cr = compiled.compile_and_compare(p, dev, min_run_time=0.5)
    assert cr.compiled.ok, cr.compiled.problem
    eager_b, fused_b = fusion.fusion_bytes(cr.params)
    ratio = cr.eager.median / cr.fused.median
    claims.report("lesson 04, compiled PseudoLinear over eager at a memory-bound shape", "prediction",
                  f"{ratio:.2f}× against the bytes' {eager_b / fused_b:.1f}× (traces: eager's bytes over one fused "
                  f"kernel's): {claims.ratio_words(ratio, eager_b / fused_b)}; bar above 2×, at most "
                  f"{explore.FUSION_MARGIN * eager_b / fused_b:.1f}× (H200: 8.38×, first run)")
    assert 2 < ratio <= explore.FUSION_MARGIN * eager_b / fused_b, \
        f"fused {ratio:.2f}× eager, bound {eager_b / fused_b:.1f}×"


@pytest.mark.gpu
def test_gpu_linear_launches_no_bias_copy_kernel():
    # cuBLASLt's bias epilogue (Blas.cpp, addmm_out_cuda_impl): F.linear with a 1-D bias launches the GEMM
    # alone, no elementwise copy of the bias before it.
    dev = torch.device("cuda")
    x, W, w, b = lessons.make_inputs({"width": 256, "batch": 4096, "layers": 1}, dev, torch.float32)
    names = trace.kernels(variants.linear, x, W, w, b)
    if names is None:
        pytest.skip("the profiler cannot see CUDA here")
    claims.report("lesson 04, F.linear's kernels with a 1-D bias", "count", f"{names}; bar: no copy kernel")
    assert not [n for n in names if "copy" in n.lower() or "elementwise" in n.lower()], names


# --- the exercise's [GPU] speed line on a real GPU: paired rounds, never the starter over itself ------------
@pytest.mark.gpu
def test_gpu_exercise_solution_passes_and_the_starter_never_beats_itself():
    # On the H200 the untouched starter scored 2.25× against itself (one timing a side). Bar: the starter's 6
    # passes over a 64 MiB tensor against a two-op solution's 4 (1.5×), less 15% (exercise.GPU_SPEEDUP_BAR).
    from lessons_lib.lesson04_launch_overhead import exercise

    _name, ok, detail = exercise.speed_check(lambda x, s, b: torch.relu(torch.addcmul(b, x, s)), "cuda",
                                             max_time=6.0)
    claims.report("lesson 04, the exercise's solution over its starter", "prediction",
                  f"{detail} against the bytes' 1.5× (6 passes over the tensor against 4); bar "
                  f"{exercise.GPU_SPEEDUP_BAR:g}×")
    assert ok, detail
    _name, ok, detail = exercise.speed_check(exercise.exercise_starter, "cuda", max_time=6.0)
    assert ok is False, detail
