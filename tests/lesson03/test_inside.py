"""Lesson 03 (many small Linear layers in parallel, forum seed 002): look inside (inside.py)."""

import pytest
import torch

import lessons_lib.device
from lessons_lib import lesson03_grouped_linear as L
from lessons_lib.lesson03_grouped_linear import evidence
from .helpers import SMALL, _boom


# --- look inside (meta traces: the same on every machine) ------------------------------------------------

def test_loop_runs_g_gemms_forward_and_3g_in_training():
    fwd = L.LESSON.traces(SMALL)["loop (SlowGroups)"]
    train = L.TRAIN_LESSON.traces(SMALL)["loop (SlowGroups)"]
    assert len(fwd.gemms) == 4 and len(train.gemms) == 3 * 4
    assert [op.name for op in fwd.copies] == ["cat"]  # the chunks are views; the cat copies
    assert fwd.flops == 2 * (2 * 5) * 4 * 8 * 8


def test_batched_variants_run_one_gemm_and_conv_runs_none():
    t = L.LESSON.traces(SMALL)
    for name in ("bmm, rows first", "matmul, channels first", "einsum", "vmap", "block-diagonal"):
        assert len(t[name].gemms) == 1, name
    assert len(t["grouped Conv1d"].gemms) == 0 and len(t["grouped Conv1d"].convolutions) == 1
    assert t["grouped Conv1d"].copies == []
    assert t["block-diagonal"].flops == 4 * t["bmm, rows first"].flops  # G× the FLOPs


def test_layout_copies_rows_first_vs_channels_first():
    t = L.LESSON.traces(SMALL)
    act = 2 * 32 * 5 * 4
    rows_first = [op.write_bytes for op in t["bmm, rows first"].copies]
    assert rows_first == [act, act]  # x laid out as rows, the result laid back
    channels = [op.write_bytes for op in t["matmul, channels first"].copies]
    assert channels == [2 * 4 * 8 * 8 * 4]  # only the weight, once per batch element
    assert "clone ×1" in L.copies_table(SMALL)


def test_gemm_shapes_and_work_table():
    text = L.gemm_shapes(SMALL)
    assert "loop (SlowGroups): 4 × bmm batch 2 of 5×8 @ 8×8" in text
    assert "matmul, channels first: bmm batch 8 of 8×8 @ 8×5" in text
    assert "grouped Conv1d: convolution 2x32x5" in text
    assert "convolution_backward" in L.gemm_shapes(SMALL, training=True)
    assert "launches" in L.look_inside(SMALL)


def test_conv_backend_is_named():
    assert "backend" in L.conv_backend(SMALL, "cpu")


def test_stacked_parameters_make_the_optimizer_step_an_order_of_magnitude_fewer_ops():
    ops = L.optimizer_ops(groups=16, group_size=8)
    assert ops["SlowGroups: 2·G tensors, for loop"] >= 10 * ops["GroupedLinear: 2 tensors, for loop"]
    # foreach: one op per update line whatever the tensor count (host-side step counters left out)
    assert ops["SlowGroups: 2·G tensors, foreach"] == ops["GroupedLinear: 2 tensors, foreach"]
    assert ops["GroupedLinear: 2 tensors, for loop"] == 2 * 7  # per tensor: lerp_, mul_, addcmul_, sqrt, div, add_, addcdiv_


def test_stack_module_state_makes_leaves_the_optimizer_never_sees():
    assert L.stack_module_state_pitfall() == (
        "stacked weight is a new leaf: True; it got a gradient: True; the original Linears got none: True; "
        "an SGD step on the original Linears changed the stacked weight: False")


def test_recording_backend_sees_g_separate_gemms():
    rec = L.loop_graphs({"batch": 1, "groups": 3, "group_size": 4, "length": 2})
    if rec.problem:
        pytest.skip(rec.problem)
    fwd = rec.of_kind("forward")[0]
    assert sum(op in ("mm", "addmm", "bmm", "baddbmm") for op in fwd.ops) == 3


def test_the_adam_comparison_tells_the_harness_where_it_runs(monkeypatch):
    """opt.step takes no arguments: without device= the H200 run timed it as a CPU call ('not decided, spread 75%')."""
    from lessons_lib import noise
    from lessons_lib.lesson03_grouped_linear import inside

    seen = {}
    monkeypatch.setattr(noise, "compare", lambda fns, **kw: seen.update(kw) or "compared")
    assert inside.optimizer_timings("cpu", groups=2, group_size=4) == "compared"
    assert str(seen["device"]) == "cpu"


@pytest.mark.parametrize("call", [
    lambda: L.optimizer_timings("cpu", groups=4096, group_size=4096),
    lambda: evidence.thread_models(groups=4096, group_size=4096),
    lambda: evidence.thread_models({"groups": 4096, "group_size": 4096}),
    lambda: L.optimizer_timings("cpu", groups=0),
])
def test_optimizer_timings_and_thread_models_refuse_a_bad_shape_before_allocating(monkeypatch, call):
    """Both allocated 2·4096 Linears of 4096×4096 (tens of GiB) before anything said no."""
    monkeypatch.setattr(torch, "zeros", _boom)
    monkeypatch.setattr(evidence, "SlowGroups", _boom)
    with pytest.raises(ValueError) as err:
        call()
    assert "\n" not in str(err.value)


def test_optimizer_timings_and_thread_models_refuse_what_does_not_fit(monkeypatch):
    monkeypatch.setattr(lessons_lib.device, "available_bytes", lambda device: 2**20)
    monkeypatch.setattr(torch, "zeros", _boom)
    monkeypatch.setattr(evidence, "SlowGroups", _boom)
    with pytest.raises(ValueError, match="Adam over 64 Linears of 64×64"):
        L.optimizer_timings("cpu", groups=64, group_size=64)
    with pytest.raises(ValueError, match="three copies of 64 Linears"):
        evidence.thread_models(groups=64, group_size=64, device="cpu")
