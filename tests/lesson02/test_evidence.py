"""Lesson 02's evidence (evidence.py): what autograd keeps, the thread's numbers predicted on meta, measured peaks."""
import pytest
import torch

from lessons_lib import memory
from lessons_lib.lesson02_autograd_memory import evidence, explore, variants

from .helpers import FIXES, SCALED, SEED, _inputs


# --- the ledger: what autograd keeps ------------------------------------------------------------
def test_ledger_at_a_scaled_seed_shape_equals_an_independent_count():
    B, G, D = SCALED["batch"], SCALED["groups"], SCALED["dim"]
    copy = B * G * D * D * 4  # W broadcast to every row: 33,554,432 B
    x, W = _inputs(SCALED, x_grad=True, w_grad=False)  # the thread's case
    led = memory.ledger(variants.broadcast_matmul, x, W)
    assert led.total_bytes == copy == evidence.expanded_copy_bytes(SCALED) == 33554432
    big = led.largest()
    assert (big.node, big.slot, big.shape, big.bytes) == ("BmmBackward0", "mat2", (B * G, D, D), copy)
    assert led.by_node() == {"BmmBackward0": copy}


@pytest.mark.parametrize("name", FIXES + ["checkpointed"])
def test_the_fixes_save_no_new_memory_only_their_inputs(name):
    x, W = _inputs(SCALED)
    led = memory.ledger(explore.LESSON.variant(name).fn, x, W)
    assert led.total_bytes == 0
    assert led.entries
    # (torch 2.9's checkpoint also saves an empty placeholder: 0 bytes, not an input; newer ones do not)
    assert all(e.source.replace("view of ", "") in ("input 0", "input 1") for e in led.entries if e.bytes)
    assert max(e.bytes for e in led.entries) == x.nbytes  # a view of x at most, never a B·G·D·D copy


def test_the_custom_function_saves_exactly_x_and_w():
    x, W = _inputs(SCALED)
    led = memory.ledger(variants.custom_function, x, W)
    assert [(e.node, e.source) for e in led.entries] == [("GroupedMatmulBackward", "input 0"),
                                                          ("GroupedMatmulBackward", "input 1")]


def test_only_w_requiring_grad_saves_nothing_new_but_backward_builds_the_expanded_gradient():
    copy, act = evidence.expanded_copy_bytes(), 8192 * 512 * 4  # at the seed's full shape, on meta
    loss = 4  # the float32 scalar that backward starts from
    x_only, w_only, both = evidence.requires_grad_facts()
    assert (x_only["saved"], x_only["after forward"]) == (copy, copy + act + loss)
    assert x_only["largest backward allocation"] == ("bmm", (65536, 1, 64), act)  # dx: small
    assert (w_only["saved"], w_only["after forward"]) == (0, act + loss)  # only the output is held...
    assert w_only["forward peak"] >= copy  # ...though the forward still makes the copy
    assert w_only["largest backward allocation"] == ("bmm", (65536, 64, 64), copy)  # the expanded gradient of W
    assert both["backward peak"] >= 2 * copy  # the saved copy and that gradient alive together
    assert "bmm 65536x64x64 (1.0 GiB)" in evidence.requires_grad_table().splitlines()[3]


def test_the_graph_shows_the_copy_saved_by_bmm_and_the_nodes_around_it():
    x, W = evidence.thread_inputs(SEED, True, True)
    text = memory.graph(variants.broadcast_matmul(x, W))
    assert "BmmBackward0   saves mat2 65536x64x64 float32 (1.0 GiB), self 65536x1x64 float32 (16.0 MiB)" in text
    order = [line.strip("│├└─ ").split()[0] for line in text.splitlines()]
    assert order == ["SqueezeBackward1", "UnsafeViewBackward0", "BmmBackward0", "ViewBackward0", "ExpandBackward0",
                     "ViewBackward0", "AccumulateGrad", "UnsafeViewBackward0", "CloneBackward0", "ExpandBackward0",
                     "AccumulateGrad"]
    assert memory.graph(variants.einsum(*evidence.thread_inputs(SEED, False, False))).startswith("(no autograd graph")


def test_the_op_trace_is_lesson_01s_broadcasting_path():
    from lessons_lib.trace import trace_ops

    t = trace_ops(variants.broadcast_matmul, *evidence.thread_inputs())
    work = [op.name for op in t.ops if op.name in ("expand", "clone", "_unsafe_view", "bmm")]
    assert work[:5] == ["expand", "expand", "clone", "_unsafe_view", "bmm"]
    assert [op.alloc_bytes for op in t.copies] == [evidence.expanded_copy_bytes()]


# --- reproduce: the thread's numbers, predicted on meta -------------------------------------------------
def test_predicted_memory_allocated_is_the_posted_number_to_the_byte():
    x, W = evidence.thread_inputs(SEED, x_grad=True)
    assert evidence.allocated_after_forward(variants.strategy_1, x, W) == evidence.POSTED["strategy 1"] == 1107427328
    x2 = torch.empty(8192, 512, device="meta", requires_grad=True)
    W2 = torch.empty(512, 512, device="meta")
    assert evidence.allocated_after_forward(variants.strategy_2, x2, W2) == evidence.POSTED["strategy 2"] == 34603008
    # without requires_grad the copy is freed when matmul returns: x + W + output only
    x.requires_grad_(False)
    assert evidence.allocated_after_forward(variants.strategy_1, x, W) == 2 * 8192 * 512 * 4 + 8 * 64 * 64 * 4
    table = evidence.reproduce_table()
    assert "1,107,427,328 B (1.0 GiB)  1,107,427,328" in table
    assert "33,685,504 B" in table



def test_measured_peaks_agree_with_the_timeline_on_cpu():
    x, W = _inputs({"batch": 128, "groups": 8, "dim": 64})
    tl = memory.timeline(variants.broadcast_matmul, x, W).peaks()
    m = memory.measured_peaks(variants.broadcast_matmul, x, W)
    for got, want in ((m.forward, tl.forward.measured), (m.backward, tl.backward.measured),
                      (m.after_forward, tl.after_forward.measured)):
        assert abs(got - want) <= 0.05 * want
    assert x.grad is None
    assert W.grad is None
    assert memory.measured_peaks(variants.einsum, *evidence.thread_inputs()) == memory.Measured(None, None, None)

