"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): GPU claims (marked gpu, skipped without
CUDA); each bar derived from the roofline."""
import pytest
import torch

from lessons_lib import compiling, trace
from lessons_lib.lesson04_launch_overhead import compiled, explore, fusion, lessons, variants


# --- GPU claims (skipped without CUDA); each bar derived from the roofline --------------------------
@pytest.mark.gpu
def test_gpu_width_160_pseudolinear_is_less_than_2x_faster():
    # Roofline at batch B, width N, fp32 (e = 4 B): Linear is compute-bound, 2·B·N² / F; PseudoLinear
    # memory-bound, 2 ops each reading and writing B·N·e, so 4·B·N·e / BW. Their ratio is
    # N·BW / (2·e·F) = 160·BW / (8·F): 1.6 on an A100 (1.55 TB/s, 19.5 TFLOP/s), 1.0 on an H100 SXM,
    # less with TF32. The bar, 2×, is that prediction with 25 % margin; FLOPs alone would say 160×.
    dev = torch.device("cuda")
    p = {"width": 160, "batch": 32768, "layers": 4}
    run = lessons.LESSON.run(p, dev, variants=["Linear", "PseudoLinear"], min_run_time=0.5)
    ratio = run.timings["Linear"].median / run.timings["PseudoLinear"].median
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
    assert len(eager) >= 3, (eager, fused)
    assert len(fused) == 1, (eager, fused)


@pytest.mark.gpu
def test_gpu_pseudolinear_5x_faster_than_linear_at_width_8192():
    # Same roofline as above at N = 8192: 8192·BW / (8·F) is 80 on an A100 in fp32 and about 7 on an
    # H100 even with TF32 (495 TFLOP/s, 3.35 TB/s). The bar, 5×, leaves that worst case 30 % margin.
    dev = torch.device("cuda")
    p = {"width": 8192, "batch": 32768, "layers": 1}
    run = lessons.LESSON.run(p, dev, variants=["Linear", "PseudoLinear"], min_run_time=0.5)
    ratio = run.timings["Linear"].median / run.timings["PseudoLinear"].median
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
    assert not [n for n in names if "copy" in n.lower() or "elementwise" in n.lower()], names


# --- the exercise's [GPU] speed line on a real GPU: paired rounds, never the starter over itself ------------
@pytest.mark.gpu
def test_gpu_exercise_solution_passes_and_the_starter_never_beats_itself():
    # On the H200 the untouched starter scored 2.25× against itself (one timing a side). Bar: the starter's 6
    # passes over a 64 MiB tensor against a two-op solution's 4 (1.5×), less 15% (exercise.GPU_SPEEDUP_BAR).
    from lessons_lib.lesson04_launch_overhead import exercise

    _name, ok, detail = exercise.speed_check(lambda x, s, b: torch.relu(torch.addcmul(b, x, s)), "cuda",
                                             max_time=6.0)
    assert ok, detail
    _name, ok, detail = exercise.speed_check(exercise.exercise_starter, "cuda", max_time=6.0)
    assert ok is False, detail
