"""Lesson 07's GPU claim: the fixed training step as shipped is at least 5x faster than the original on a GPU.

"As shipped" (gpu.GraphedTrain): the batch's indices on the device, one fused SGD built once (lr a 0-dim device
tensor), and the whole step (gather, forward, backward, update) captured as one CUDA graph that each step replays.
Both loops keep their optimizer across calls and are timed in steady state, 4 steps a call, in paired rounds
(noise.compare, device passed); the ratio must be decided.

The bar comes from the roofline model (gpu.gpu_model: each step traced on meta at the GPU shape, C=256, H=16, E=16,
T=16, batch 64, as CUDA runs it: only ops that launch kernels, SGD foreach as CUDA's default, attention's efficient
kernel). The original launches ~210 kernels a step, so its floor is 1.05 ms on an A100 or H100 at 5 µs of host time
per eager op (on a T4 its 0.9 GB of broadcast copies, 2.8 ms, are the floor); the graph replays ~61 kernels a step,
which at 2 µs each on the device (gpu.KERNEL_FLOOR) is 0.12 ms (on a T4 its 108 MB, 0.34 ms). The model's ratio is
8.6x on all three; the bar, 5x, leaves a margin of 1.5x below it (MARGIN) for what the model leaves out and that
could lower the ratio: kernels slower than 2 µs, the replay loop's Python. What it leaves out on the original's
side only raises the ratio: the H200 measured its eager step at ~6 ms (host time of ~15 µs an op, autograd, the
5 syncs a step that drain the queue), 6x its floor.

History: until 2026-11 the claim was about the fixed loop eager, with a new optimizer each call and CPU indices,
and its model counted host reads (x[j]) and a for-loop SGD as launches (452 against 72 ops, 6.2x); the H200
measured 2.72x. Eager, the fixed loop is host-bound (~47 launches a step plus autograd): the model gives 4.5x,
the claim is the graph's.
"""
import pytest
import torch

from lessons_lib.lesson07_capstone.explore import SPEEDUP_BAR_GPU as BAR  # record's GPU target reads it too
from lessons_lib.lesson07_capstone.gpu import gpu_model, shipped_comparison

MARGIN = 1.5


def test_the_bar_follows_from_the_roofline_model():
    floors = gpu_model()
    ratios = {g: row["original"] / row["fixed, one CUDA graph"] for g, row in floors.items()}
    worst = min(ratios.values())
    assert worst >= BAR * MARGIN, f"the model now gives {ratios}: re-derive the bar"
    # the model counts what launches on a GPU, not the host's reads of a CPU index or meta's for-loop SGD
    for row in floors.values():
        launches_original, launches_fixed = row["launches per step (original, fixed)"]
        assert 150 <= launches_original <= 300 and launches_fixed < launches_original / 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or bool(getattr(torch.cuda, "_course_simulated", None)),
                    reason="needs a real CUDA GPU")
def test_fixed_training_step_as_one_cuda_graph_is_5x_faster_on_a_gpu():
    cmp, why = shipped_comparison("cuda", steps=4, max_time=30)
    assert cmp is not None, why
    r = cmp.ratio("original", "fixed, one CUDA graph")
    assert r.decided and r.median >= BAR, str(cmp)
