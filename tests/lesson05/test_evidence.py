"""Lesson 05 (CUDA graphs, seed 003): the launch model (evidence.py): the step's kernels, its arithmetic, its shape,
its figures and summary."""
import matplotlib.pyplot as plt
import pytest

from lessons_lib import launch_queue
from lessons_lib.lesson05_cuda_graphs import evidence, evidence_reported, explore, lessons
from .helpers import DISPATCH


# --- correctness and the step's kernels ----------------------------------------------------------------
def test_a_pseudolinear_layer_costs_two_forward_and_several_backward_kernels():
    one, two = (evidence.step_kernels({"width": 8, "batch": 2, "layers": n}) for n in (1, 2))
    assert [k[0] for k in one[:2]] == ["mul", "add"]
    assert len(two) - len(one) >= 6  # each layer adds its forward (2) and backward kernels (≥ 4)


def test_linear_kernels_carry_the_gemm_flops():
    flops = sum(f for _n, f, _b in evidence.step_kernels({"width": 64, "batch": 8, "layers": 1}, "Linear"))
    assert flops >= 3 * 2 * 8 * 64 * 64  # forward, dx and dW GEMMs


# --- the model: its arithmetic and the shape of the seed's table ---------------------------------------
def test_model_step_adds_up_by_hand():
    # every kernel is tiny (kernel_min), so eager: host (dispatch + launch) per kernel vs device
    # (kernel_min + stream gap); graph: one launch, then kernel_min + graph gap per kernel.
    p = {"width": 4, "batch": 2, "layers": 1}
    m = evidence.model_step(p, "T4", dispatch=DISPATCH)
    n = len(m.kernels)
    host, dev = DISPATCH + launch_queue.KERNEL_LAUNCH, launch_queue.KERNEL_MIN + launch_queue.STREAM_GAP
    assert m.eager_s == pytest.approx((8 * n * host + dev) / 8)  # 8 steps; the device ends one kernel later
    graph_dev = n * (launch_queue.KERNEL_MIN + launch_queue.GRAPH_GAP)
    assert m.graphed_s == pytest.approx((launch_queue.GRAPH_LAUNCH + 8 * graph_dev) / 8)


def test_the_model_counts_its_ops_in_words():
    import dataclasses

    m = evidence.model_step({"width": 4, "batch": 2, "layers": 1}, "T4", dispatch=DISPATCH)
    assert f"{len(m.kernels)} ops (one kernel each" in str(m)
    assert "1 op (one kernel each" in str(dataclasses.replace(m, kernels=m.kernels[:1]))  # not "1 ops"


def test_predicted_graph_speedup_falls_as_kernels_grow_and_reaches_about_one():
    widths = [16, 256, 4096, 16384]
    c = evidence.speedup_curve(widths, batch=1024, dispatch=DISPATCH)
    s = c["graphs: PseudoLinear"]
    assert all(a >= b - 1e-9 for a, b in zip(s, s[1:])) and s[0] > 1.5
    assert s[-1] == pytest.approx(1.0, abs=0.05)


def test_overhead_and_kernel_bound_shapes_are_what_their_names_say_on_every_preset():
    for gpu in launch_queue.PRESETS:
        assert evidence.model_step(explore.OVERHEAD_BOUND, gpu, dispatch=DISPATCH).speedup >= 2
        speedup = evidence.model_step(explore.KERNEL_BOUND, gpu, dispatch=DISPATCH).speedup
        assert speedup == pytest.approx(1.0, abs=0.02)


def test_the_kernel_bound_step_is_memory_bound_and_its_input_copies_cost_a_sixth_more_bytes():
    # the regime's name, the model and what is timed agree: no FLOPs, 5.5 GiB a step; copying new x and g
    # (256 MiB each, read and written) into a graph's static inputs adds 1 GiB: 0.85× predicted (H200: 0.88)
    ops = evidence.step_kernels(explore.KERNEL_BOUND)
    assert sum(f for _n, f, _b in ops) == 0
    step = sum(b for *_n, b in ops)
    assert step == pytest.approx(5.5 * 2**30, rel=0.01)
    B, N, L = (explore.KERNEL_BOUND[k] for k in ("batch", "width", "layers"))
    copy = 2 * 4 * (2 * B * N + 2 * L * N)
    assert step / (step + copy) == pytest.approx(0.846, abs=0.002)


def test_figures_say_model_or_reported():
    figs = [evidence.timeline_figure(lessons.LESSON.defaults("cpu"), dispatch=DISPATCH),
            evidence_reported.model_vs_reported_figure(dispatch=DISPATCH),
            evidence.graphs_speedup_figure(dispatch=DISPATCH)]
    titles = [f.axes[0].get_title() for f in figs]
    assert "Model, not a measurement" in titles[0]
    assert "reported" in titles[1] and "model" in titles[1]
    assert "not measured" in titles[2]
    labels = [ln.get_label() for ln in figs[1].axes[0].get_lines() if not ln.get_label().startswith("_")]
    assert all(lbl.startswith(("reported", "model")) for lbl in labels)
    for f in figs:
        plt.close(f)


def test_model_summary_follows_its_numbers():
    m = evidence.model_step(explore.KERNEL_BOUND, "T4", dispatch=DISPATCH)
    summary = evidence.model_summary(explore.KERNEL_BOUND, dispatch=DISPATCH)
    assert "kernels set the pace" in summary and m.speedup < 1.1
    assert "host sets the pace" in evidence.model_summary(explore.OVERHEAD_BOUND, dispatch=DISPATCH)
