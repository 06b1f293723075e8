"""GPU claims of lessons 01 and 02, with bars derived from the roofline (skipped without CUDA).

Each timing bar is a PREDICTION: the roofline on the GPU at hand, its peaks measured by microbenchmarks in this
process BEFORE the timing they are tested against (roofline.measure_peaks: an 8192 GEMM and a large copy), times a
stated margin; each claim prints its prediction, the measurement and the model's error (tests/claims.py). The
CPU-runnable tests at the top check that every bar the lessons state is inside what the model allows on named GPUs
(datasheet peaks at the efficiencies the H200's microbenchmarks reached), so a bar cannot drift above physics.
The table of every claim: .ci/gpu-runs/CLAIMS.md.
"""
import math

import pytest
import torch

from lessons_lib import memory, microbench, roofline
from lessons_lib.lesson01_broadcast_matmul import exercise as exercise01
from lessons_lib.lesson01_broadcast_matmul import explore as explore01
from lessons_lib.lesson01_broadcast_matmul import variants as variants01
from lessons_lib.lesson02_autograd_memory import evidence as evidence02
from lessons_lib.lesson02_autograd_memory import explore as explore02
from lessons_lib.lesson02_autograd_memory import variants as variants02
from lessons_lib.trace import on_meta, trace_ops

from . import claims

SEED1 = variants01.THREAD_SHAPE
SEED2 = variants02.THREAD_SHAPE
FIXES = ["einsum", "3-D bmm", "custom Function"]
# Efficiencies the datasheet leaves out, MEASURED on the H200 (2026-11-26, h200.json lesson 01's peaks): its fp32
# GEMM at 8192 reached 51.0 of the datasheet's 67 TFLOP/s, a large copy 4.02 of 4.8 TB/s. An assumption on other
# GPUs (the course assumed 60% and 85% before). On a real GPU the claims measure their own peaks instead.
GEMM_EFFICIENCY, COPY_EFFICIENCY = 0.76, 0.84
MARGIN = 1.15  # a bar asks 15% less than the efficiency-weighted model predicts
TILE = 128  # output tile of cuBLAS's fp32 kernels at these sizes: a tile is one SM's work
SMS = {"T4": 40, "H100": 132}


def _peaks(name: str) -> roofline.Peaks:
    return roofline.datasheet(name, torch.float32, tf32=False)


def _expected(peaks: roofline.Peaks, fn, *inputs, efficiencies=(GEMM_EFFICIENCY, COPY_EFFICIENCY)) -> float:
    """Seconds `fn` should take: its kernels one after another, each at the larger of its compute
    time (GEMM efficiency) and its memory time (copy efficiency), and at least one op's cost."""
    gemm, copy = efficiencies
    t = trace_ops(fn, *on_meta(*inputs))
    return sum(max(op.flops / (gemm * peaks.flops), op.accessed_bytes / (copy * peaks.bandwidth),
                   peaks.launch) for op in t.compute_ops)


def _speedup_model(peaks: roofline.Peaks, slow, fast, *inputs, **kw) -> float:
    """The modelled speed-up of `fast` over `slow`."""
    return _expected(peaks, slow, *inputs, **kw) / _expected(peaks, fast, *inputs, **kw)


def _speedup_bar(peaks: roofline.Peaks, slow, fast, *inputs, **kw) -> float:
    """The modelled speed-up of `fast` over `slow`, less the margin (never below 1)."""
    return max(1.0, _speedup_model(peaks, slow, fast, *inputs, **kw) / MARGIN)


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

    The floor is the device's: its one GEMM's FLOPs over the peak (the larger of that and its bytes over the
    bandwidth; no host term: the claim times the device alone). The model adds two things the floor leaves out,
    each derived here: tile quantisation (208 × 6144 is 2 × 48 = 96 tiles, for 132 SMs on an H100: 73% busy) and
    the bias add as a separate kernel (it reads and writes the output). Then 25% margin for the GEMM kernel
    itself. Returns the bar as a multiple of the floor."""
    t = trace_ops(variants01.einsum, *on_meta(*variants01.make_inputs(SEED1, torch.device("meta"), torch.float32)))
    (gemm,) = t.gemms
    _batch, m, n, _k = gemm.gemm
    bias = sum(op.accessed_bytes for op in t.compute_ops if not op.gemm) / peaks.bandwidth
    expected = gemm.flops / peaks.flops / _tile_utilisation(m, n, sms) + bias
    return 1.25 * expected / _device_floor(peaks)


def _device_floor(peaks: roofline.Peaks) -> float:
    """einsum's roofline floor on the device at the thread's shape: compute or memory, no host term."""
    terms = peaks.terms(explore01.LESSON.work(SEED1)["einsum"])
    return max(terms["compute"], terms["memory"])


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
    """Bar (prediction): the roofline's speed-up on this GPU's peaks, measured before the lesson's run (efficiency 1
    against them), less MARGIN. The H200 (2026-11-26, h200.json lesson 01 headline): 6.81× measured."""
    dev = torch.device("cuda")
    peaks = roofline.measure_peaks(dev, torch.float32)  # the microbenchmarks, before the timing
    model = _speedup_model(peaks, variants01.broadcast_matmul, variants01.einsum, *_thread_inputs(),
                           efficiencies=(1.0, 1.0))
    run = explore01.LESSON.run(SEED1, dev, variants=["broadcast matmul", "einsum"], min_run_time=0.5)
    ratio = run.timings["broadcast matmul"].median / run.timings["einsum"].median
    claims.report("lesson 01, einsum over broadcast matmul at the thread's shape", "prediction",
                  f"{ratio:.2f}× against the roofline's {model:.2f}× on this GPU's measured peaks: "
                  f"{claims.ratio_words(ratio, model)}; bar {max(1.0, model / MARGIN):.2f}×")
    assert ratio >= max(1.0, model / MARGIN), f"einsum {ratio:.2f}× faster than broadcast matmul; model {model:.2f}×"


@pytest.mark.gpu
def test_gpu_einsum_device_time_is_near_its_floor():
    """Bar (prediction): einsum's DEVICE time (microbench.device_seconds: CUDA events around calls queued behind a
    spin kernel, so the host's launches are hidden) at most `_einsum_floor_bar` × its device floor, both on this
    GPU's peaks measured before the timing. Until 2026-11-27 the claim timed host and device together and let the
    bar grow by the host's time per call measured in the same process (t <= 1.25 t for any host-bound call). The
    H200 timed einsum at 53.8 µs with the harness (h200.json), 25.7 µs floor, bar 2.18× the floor (56 µs); its
    device time alone has not been measured yet."""
    dev = torch.device("cuda")
    peaks = roofline.measure_peaks(dev, torch.float32)  # the microbenchmarks, before the timing
    _p, sms = _gpu_peaks(dev)
    floor, bar = _device_floor(peaks), _einsum_floor_bar(peaks, sms)
    inputs = variants01.make_inputs(SEED1, dev, torch.float32)
    seconds = microbench.device_seconds(variants01.einsum, *inputs, device=dev, calls=20)
    predicted = bar / 1.25 * floor
    claims.report("lesson 01, einsum's device time at the thread's shape", "prediction",
                  f"{seconds * 1e6:.1f} µs against {predicted * 1e6:.1f} µs modelled (floor {floor * 1e6:.1f} µs, "
                  f"tile quantisation and the bias add): {claims.ratio_words(seconds, predicted)}; bar "
                  f"{bar:.2f}× the floor")
    assert seconds <= bar * floor, f"einsum {seconds * 1e6:.1f} µs of device time vs floor {floor * 1e6:.1f} µs " \
                                   f"(bar {bar:.2f}×)"


@pytest.mark.gpu
def test_gpu_exercise_solution_passes_the_speed_bar():
    """Bar (prediction): exercise01.GPU_SPEEDUP_BAR (1.15×), at most the datasheet model at the H200's measured
    efficiencies less MARGIN on every course GPU (test_exercise_01_speed_bar_is_within_the_model)."""
    model = _speedup_model(_peaks(claims.datasheet_gpu()), exercise01.exercise_starter, _one_gemm,
                           *_exercise_inputs())
    _claim, ok, detail = exercise01.speed_check(_one_gemm, "cuda")
    claims.report("lesson 01, the exercise's one GEMM over its starter", "prediction",
                  f"{detail} against the model's {model:.2f}× ({claims.datasheet_gpu()} datasheet at the H200's "
                  f"efficiencies); bar {exercise01.GPU_SPEEDUP_BAR:g}×")
    assert ok, detail


@pytest.mark.gpu
def test_gpu_exercise_starter_is_never_faster_than_itself():
    # On the H200 the untouched starter scored "✓ 2.0×" against itself: each side was timed once.
    _claim, ok, detail = exercise01.speed_check(exercise01.exercise_starter, "cuda")
    claims.report("lesson 01, the exercise's starter against itself", "count", f"{detail}; bar: not passed")
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
    claims.report("lesson 02, peak memory predicted from the trace against the allocator", "prediction",
                  "; ".join(f"{n} {k}: {b.measured / 2**20:.1f} MiB against {b.predicted / 2**20:.1f} MiB"
                            for n, p in (("broadcast", bad), ("einsum", good))
                            for k, b in (("forward", p.forward), ("backward", p.backward))) + "; bar: within 10%")
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
