"""GPU claims of lessons 01 and 02, with bars derived from the roofline (skipped without CUDA).

Each bar is the roofline's prediction for the GPU at hand (its datasheet peaks where the
course knows the GPU, else its measured peaks) times a stated margin for what the model leaves
out. The CPU-runnable tests at the top check that every bar the lessons state is inside what
the model allows on a T4 and an H100, so a bar cannot drift above physics unnoticed.
"""
import math

import pytest
import torch

from lessons_lib import memory, roofline, timing
from lessons_lib.lesson01_broadcast_matmul import exercise as exercise01
from lessons_lib.lesson01_broadcast_matmul import explore as explore01
from lessons_lib.lesson01_broadcast_matmul import variants as variants01
from lessons_lib.lesson02_autograd_memory import evidence as evidence02
from lessons_lib.lesson02_autograd_memory import explore as explore02
from lessons_lib.lesson02_autograd_memory import variants as variants02
from lessons_lib.trace import on_meta, trace_ops

SEED1 = variants01.THREAD_SHAPE
SEED2 = variants02.THREAD_SHAPE
FIXES = ["einsum", "3-D bmm", "custom Function"]
# Efficiencies the floor leaves out, from what cuBLAS and copy kernels typically reach of the
# datasheet peaks: a GEMM 60% of peak FLOP/s, anything memory-bound 85% of peak bandwidth.
GEMM_EFFICIENCY, COPY_EFFICIENCY = 0.6, 0.85
MARGIN = 1.15  # a bar asks 15% less than the efficiency-weighted model predicts
TILE = 128  # output tile of cuBLAS's fp32 kernels at these sizes: a tile is one SM's work
SMS = {"T4": 40, "H100": 132}


def _peaks(name: str) -> roofline.Peaks:
    return roofline.datasheet(name, torch.float32, tf32=False)


def _expected(peaks: roofline.Peaks, fn, *inputs) -> float:
    """Seconds `fn` should take: its kernels one after another, each at the larger of its compute
    time (GEMM efficiency) and its memory time (copy efficiency), and at least one op's cost."""
    t = trace_ops(fn, *on_meta(*inputs))
    return sum(max(op.flops / (GEMM_EFFICIENCY * peaks.flops), op.accessed_bytes / (COPY_EFFICIENCY * peaks.bandwidth),
                   peaks.launch) for op in t.compute_ops)


def _speedup_bar(peaks: roofline.Peaks, slow, fast, *inputs) -> float:
    """The modelled speed-up of `fast` over `slow`, less the margin (never below 1)."""
    return max(1.0, _expected(peaks, slow, *inputs) / _expected(peaks, fast, *inputs) / MARGIN)


def _thread_inputs():
    return variants01.make_inputs(SEED1, torch.device("meta"), torch.float32)


def _exercise_inputs(device="meta"):
    return torch.empty(64, 256, 1024, device=device), torch.empty(16, 64, 1024, device=device)


def _one_gemm(x, W):
    return torch.einsum("btd,hed->bhte", x, W)


def _tile_utilisation(m: int, n: int, sms: int) -> float:
    """Share of the SMs' slots busy over the waves of a GEMM cut into TILE × TILE output tiles."""
    tiles = math.ceil(m / TILE) * math.ceil(n / TILE)
    return tiles / (math.ceil(tiles / sms) * sms)


def _einsum_floor_bar(peaks: roofline.Peaks, sms: int) -> float:
    """How far above its floor einsum may run at the thread's shape.

    The floor is its one GEMM's FLOPs over the peak. The model leaves out three things, each
    derived here: tile quantisation (208 × 6144 is 2 × 48 = 96 tiles, for 132 SMs on an H100: 73%
    busy), the bias add as a separate kernel (it reads and writes the output), and one more op's
    dispatch. Then 25% margin for the GEMM kernel itself."""
    work = explore01.LESSON.work(SEED1)["einsum"]
    t = trace_ops(variants01.einsum, *on_meta(*variants01.make_inputs(SEED1, torch.device("meta"), torch.float32)))
    (gemm,) = t.gemms
    _batch, m, n, _k = gemm.gemm
    compute = work.flops / peaks.flops
    bias = sum(op.accessed_bytes for op in t.compute_ops if not op.gemm) / peaks.bandwidth
    expected = compute / _tile_utilisation(m, n, sms) + bias + peaks.launch
    return 1.25 * expected / peaks.floor(work)


# --- the bars against the model (run everywhere) ---------------------------------------------
@pytest.mark.parametrize("gpu", ["T4", "H100"])
def test_einsum_speedup_bar_is_a_real_bar(gpu):
    # 3.8× on a T4 and 3.1× on an H100 after efficiencies and margin (the floors alone: 7.1× and 5.6×)
    bar = _speedup_bar(_peaks(gpu), variants01.broadcast_matmul, variants01.einsum, *_thread_inputs())
    assert 2 <= bar < 7


@pytest.mark.parametrize("gpu", ["T4", "H100"])
def test_einsum_floor_bar_allows_for_tile_quantisation(gpu):
    bar = _einsum_floor_bar(_peaks(gpu), SMS[gpu])
    assert 1.25 < bar < 3  # above the old 1.5 wish on an H100, still a real bar


@pytest.mark.parametrize("gpu", ["T4", "A100", "H100", "H200"])
def test_exercise_01_speed_bar_is_within_the_model(gpu):
    # The starter copies x 16 times and W 64 times (then its bmm reads the copies); a one-GEMM solution does
    # not. Efficiency-weighted model: 1.74× on a T4, 1.36× on an A100, 1.58× on an H100, 1.41× on an H200;
    # less the margin: 1.51×, 1.18×, 1.37× and 1.23×. The bar was 1.3×, above the A100's and H200's (it was
    # derived from a FLOP count 16 times too small and checked on a T4 and an H100 only): now 1.15×.
    bar = _speedup_bar(_peaks(gpu), exercise01.exercise_starter, _one_gemm, *_exercise_inputs())
    asked = exercise01.GPU_SPEEDUP_BAR
    assert asked <= bar, f"the lesson asks {asked}×; the model with margin allows {bar:.2f}×"


# --- lesson 01 on a real GPU ---------------------------------------------------------------------
def _gpu_peaks(dev) -> tuple[roofline.Peaks, int]:
    name = torch.cuda.get_device_name(dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    return _peaks(name) or roofline.measure_peaks(dev, torch.float32), sms


@pytest.mark.gpu
def test_gpu_einsum_beats_broadcast_by_the_modelled_margin():
    dev = torch.device("cuda")
    run = explore01.LESSON.run(SEED1, dev, variants=["broadcast matmul", "einsum"], min_run_time=0.5)
    peaks, _sms = _gpu_peaks(dev)
    bar = _speedup_bar(peaks, variants01.broadcast_matmul, variants01.einsum, *_thread_inputs())
    ratio = run.timings["broadcast matmul"].median / run.timings["einsum"].median
    assert ratio >= bar, f"einsum {ratio:.2f}× faster than broadcast matmul; the model with margin asks {bar:.2f}×"


def _host_per_call(fn, *inputs, device) -> float:
    """Host seconds per call of `fn`: calls queued back to back, the GPU not waited for (lesson 00's no-sync
    timer, which times the launches: what it is wrong about is the kernels). 50 calls of a few kernels stay far
    inside CUDA's launch queue, so none waits for the GPU; the least of 5 repeats."""
    return min(timing.wrong_no_sync(fn, *inputs, repeats=50, device=device).median for _ in range(5))


@pytest.mark.gpu
def test_gpu_einsum_runs_near_its_floor():
    # The harness times back-to-back calls: the larger of the GPU's time and the host's. The model's GPU side
    # (tile quantisation, the bias add, one launch) is `_einsum_floor_bar`; the host side is measured here, now,
    # in this process: einsum is a parse, views, a bmm and an add, not one launch. On the H200 the record and
    # notebook 01 timed einsum at 53.8 and 51.3 µs (bar 2.18 x floor 25.7 µs = 56 µs) and the claim test, in a
    # process that had run torch.profiler sessions and an Inductor compile before it, at 93.5 µs.
    dev = torch.device("cuda")
    run = explore01.LESSON.run(SEED1, dev, variants=["einsum"], min_run_time=0.5)
    peaks = roofline.measure_peaks(dev, torch.float32)  # what this GPU's GEMM really reaches
    _p, sms = _gpu_peaks(dev)
    floor = peaks.floor(run.work["einsum"])
    host = _host_per_call(variants01.einsum, *variants01.make_inputs(SEED1, dev, torch.float32), device=dev)
    bar = max(_einsum_floor_bar(peaks, sms), 1.25 * host / floor)
    einsum = run.timings["einsum"].median
    assert einsum <= bar * floor, (f"einsum {einsum * 1e6:.1f} µs vs floor {floor * 1e6:.1f} µs (bar {bar:.2f}×; "
                                   f"host {host * 1e6:.1f} µs a call)")


@pytest.mark.gpu
def test_gpu_exercise_solution_passes_the_speed_bar():
    _claim, ok, detail = exercise01.speed_check(_one_gemm, "cuda")
    assert ok, detail


@pytest.mark.gpu
def test_gpu_exercise_starter_is_never_faster_than_itself():
    # On the H200 the untouched starter scored "✓ 2.0×" against itself: each side was timed once.
    _claim, ok, detail = exercise01.speed_check(exercise01.exercise_starter, "cuda")
    assert ok is False, detail


# --- lesson 02 on a real GPU (memory: predicted against the allocator) ---------------------------
def _inputs(p, x_grad=True, w_grad=True, dev="cpu"):
    x, W, _g = variants02.make_inputs(p, torch.device(dev), torch.float32, x_grad, w_grad)
    return x, W


@pytest.mark.gpu
def test_gpu_seed_shape_forward_peaks_and_prediction():
    x, W = _inputs(SEED2, dev="cuda")
    bad = memory.timeline(variants02.broadcast_matmul, x, W).peaks()
    good = memory.timeline(variants02.einsum, x, W).peaks()
    assert bad.forward.measured > 2**30
    assert good.forward.measured < 64 * 2**20
    for p in (bad, good):
        for b in (p.forward, p.backward):
            assert abs(b.predicted - b.measured) <= 0.10 * b.measured
    assert bad.forward.measured / good.forward.measured >= 25


@pytest.mark.gpu
def test_gpu_fixes_all_stay_small_and_the_reproduction_matches_the_post():
    x, W = _inputs(SEED2, dev="cuda")
    for name in FIXES:
        m = memory.measured_peaks(explore02.LESSON.variant(name).fn, x, W)
        assert m.forward < 64 * 2**20, name
    del x, W
    measured = evidence02.measure_reproduction("cuda")
    posted = evidence02.POSTED["strategy 1"]
    assert abs(measured["strategy 1, x requires grad: yes"] - posted) <= 0.01 * posted
    posted = evidence02.POSTED["strategy 2"]
    assert abs(measured["strategy 2, x requires grad: yes"] - posted) <= 0.01 * posted
