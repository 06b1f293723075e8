"""Tests of lessons_lib.memory against numbers worked out by hand (seed 004's shapes)."""
import resource

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from lessons_lib import memory, trace

F32 = 4
GROUPS, DIM = 8, 64


def broadcast_matmul(x, W):
    """Seed 004 as posted: matmul broadcasts W to (B, 8, 64, 64) and copies it."""
    return x.view(x.shape[0], GROUPS, 1, DIM) @ W


def einsum(x, W):
    """The same product as broadcast_matmul, by einsum."""
    return torch.einsum("abj,bji->abi", x.view(x.shape[0], GROUPS, DIM), W)


def thread_einsum(x, W):
    """The thread's fix as posted. Note: it contracts W's last index, so it computes x @ W^T."""
    return torch.einsum("bij,abj->abi", W, x.view(x.shape[0], GROUPS, DIM))


def bmm_3d(x, W):
    """One bmm over the 8 groups: (8, B, 64) @ (8, 64, 64)."""
    return torch.bmm(x.view(x.shape[0], GROUPS, DIM).transpose(0, 1), W).transpose(0, 1)


def inputs(batch, x_grad=True, w_grad=False, device="cpu"):
    x = torch.randn(batch, GROUPS * DIM, device=device, requires_grad=x_grad)
    W = torch.randn(GROUPS, DIM, DIM, device=device, requires_grad=w_grad)
    return x, W


def expanded_copy_bytes(batch):
    return batch * GROUPS * DIM * DIM * F32  # W broadcast to every row of the batch


# --- ledger -------------------------------------------------------------------------------


def test_broadcast_matmul_saves_the_expanded_copy_of_w():
    B = 256
    led = memory.ledger(broadcast_matmul, *inputs(B))
    big = led.largest()
    assert big.node == "BmmBackward0"
    assert big.slot == "mat2"
    assert big.shape == (B * GROUPS, DIM, DIM)
    assert big.bytes == expanded_copy_bytes(B) == 33554432
    assert led.total_bytes == expanded_copy_bytes(B)
    assert led.by_node() == {"BmmBackward0": expanded_copy_bytes(B)}
    assert [e.source for e in led.entries] == ["new"]


@pytest.mark.parametrize("fix", [einsum, thread_einsum, bmm_3d])
def test_einsum_and_3d_bmm_save_only_their_inputs(fix):
    B = 256
    x, W = inputs(B)
    led = memory.ledger(fix, x, W)
    assert led.total_bytes == 0
    # one bmm operand is saved: W itself or a view of it, 128 KiB, not a 32 MiB copy.
    # (Which operand einsum makes W differs between torch releases.)
    assert [(e.node, e.bytes, e.source.replace("view of ", "")) for e in led.entries] == [
        ("BmmBackward0", W.nbytes, "input 1")]


def test_the_fixes_compute_the_same_product():
    x, W = inputs(16)
    want = broadcast_matmul(x, W).reshape(16, GROUPS, DIM)
    assert torch.allclose(einsum(x, W), want, atol=1e-4)
    assert torch.allclose(bmm_3d(x, W), want, atol=1e-4)
    assert torch.allclose(thread_einsum(x, W.transpose(1, 2)), want, atol=1e-4)  # W^T, as noted


def test_without_grad_for_x_the_copy_is_not_saved():
    # bmm's backward needs mat2 only for the gradient of self (x); with only W requiring
    # grad it saves self instead, which is a view of x.
    B = 256
    x, W = inputs(B, x_grad=False, w_grad=True)
    led = memory.ledger(broadcast_matmul, x, W)
    assert led.total_bytes == 0
    assert [(e.node, e.slot, e.shape, e.bytes, e.source) for e in led.entries] == [
        ("BmmBackward0", "self", (B * GROUPS, 1, DIM), x.nbytes, "view of input 0")
    ]
    # with both requiring grad, both are saved, and only the copy is new memory
    both = memory.ledger(broadcast_matmul, *inputs(B, x_grad=True, w_grad=True))
    assert sorted(e.slot for e in both.entries) == ["mat2", "self"]
    assert both.total_bytes == expanded_copy_bytes(B)


def test_two_views_of_one_storage_count_once():
    x = torch.randn(4, 6, requires_grad=True)

    def f(x):
        h = x.exp()  # ExpBackward0 saves its result, h
        return h[:, :3] * h[:, 3:]  # MulBackward0 saves two views of h

    led = memory.ledger(f, x)
    assert [(e.node, e.slot) for e in led.entries] == [
        ("ExpBackward0", "result"), ("MulBackward0", "other"), ("MulBackward0", "self")]
    assert [e.same_as for e in led.entries] == [None, 1, 1]
    assert all(e.bytes == 4 * 6 * F32 for e in led.entries)
    assert led.total_bytes == 4 * 6 * F32  # 96, not 288


def test_weights_held_before_the_call_cost_nothing_and_dead_graphs_are_left_out():
    x = torch.randn(4, 6, requires_grad=True)
    W = torch.randn(6, 6, requires_grad=True)  # captured, not an argument

    def f(x):
        x.exp()  # saved by a graph nobody keeps: freed before f returns
        return (x @ W).relu()

    led = memory.ledger(f, x)
    assert [(e.node, e.slot, e.source) for e in led.entries] == [
        ("MmBackward0", "mat2", "held before the call"),
        ("MmBackward0", "self", "input 0"),
        ("ReluBackward0", "result", "new"),
    ]
    assert led.total_bytes == 4 * 6 * F32


def test_custom_function_nodes_are_named():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            b = a * a
            ctx.save_for_backward(a, b)
            return b

        @staticmethod
        def backward(ctx, g):
            a, _ = ctx.saved_tensors
            return 2 * a * g

    x = torch.randn(3, 5, requires_grad=True)
    led = memory.ledger(Square.apply, x)
    rows = [(e.node, e.source) for e in led.entries]
    assert rows == [("SquareBackward", "input 0"), ("SquareBackward", "new")]
    assert led.total_bytes == 3 * 5 * F32


def test_full_seed_shape_on_meta_is_fast_and_allocates_nothing():
    memory.ledger(broadcast_matmul, *trace.on_meta(*inputs(2)))  # torch's one-off meta set-up
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    _, W = trace.on_meta(*inputs(2))
    x = torch.empty(8192, 512, device="meta", requires_grad=True)
    led = memory.ledger(broadcast_matmul, x, W)  # its time is a recorded target (lesson 02's targets)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) * 1024 < 2**28
    assert led.largest().bytes == 8192 * 8 * 64 * 64 * 4 == 1073741824
    assert led.table() == EXPECTED_SEED_TABLE


EXPECTED_SEED_TABLE = """\
#  node          saved  shape        dtype    bytes    memory
-------------------------------------------------------------
1  BmmBackward0  mat2   65536x64x64  float32  1.0 GiB  new
-------------------------------------------------------------
new memory saved for backward: 1.0 GiB (1073741824 bytes) in 1 storage"""


def test_table_does_not_depend_on_the_device():
    x, W = inputs(64, w_grad=True)
    on_meta = memory.ledger(broadcast_matmul, *trace.on_meta(x, W))
    assert memory.ledger(broadcast_matmul, x, W).table() == on_meta.table()


# --- timeline and peaks -------------------------------------------------------------------


def test_predicted_timeline_on_meta_follows_the_copy_and_its_gradient():
    B = 8192
    x, W = trace.on_meta(*inputs(2, w_grad=True))
    x = torch.empty(B, 512, device="meta", requires_grad=True)
    tl = memory.timeline(broadcast_matmul, x, W)
    copy, out = expanded_copy_bytes(B), B * GROUPS * DIM * F32
    assert [r.op for r in tl.rows[: tl.boundary]] == [
        "view", "expand", "view", "expand", "clone", "_unsafe_view", "bmm", "_unsafe_view", "sum"]
    assert tl.rows[4].predicted == copy  # the clone
    assert tl.peak_forward == (copy + out + F32, None)  # copy, output, the loss scalar
    # backward: the saved copy and the expanded gradient of W (the same size) are alive together
    assert 2 * copy < tl.peak_backward.predicted < 2 * copy + 3 * out
    # ...and both are gone by the end: only the gradients and the output remain
    assert tl.rows[-1].predicted < 3 * out
    assert tl.peaks().after_forward.predicted == copy + out + F32
    assert tl.reserved is None
    assert all(r.measured is None for r in tl.rows)


def test_predicted_timeline_does_not_depend_on_the_device():
    x, W = inputs(128, w_grad=True)
    cpu = memory.timeline(broadcast_matmul, x, W, measure=False)
    meta = memory.timeline(broadcast_matmul, *trace.on_meta(x, W))
    def rows(tl):
        return [(r.op, r.phase, r.predicted) for r in tl.rows]

    assert rows(cpu) == rows(meta)
    assert x.grad is None  # the arguments' .grad is left as it was
    assert W.grad is None


def test_einsum_peak_is_a_fraction_of_the_broadcast_matmul_peak():
    x, W = trace.on_meta(*inputs(2))
    x = torch.empty(8192, 512, device="meta", requires_grad=True)
    bad, good = memory.peaks(broadcast_matmul, x, W), memory.peaks(einsum, x, W)
    assert bad.step.predicted > 2**30
    assert good.step.predicted < 64 * 2**20


def test_cpu_predicted_peak_matches_the_profiler_measurement():
    B = 512
    tl = memory.timeline(broadcast_matmul, *inputs(B))
    for predicted, measured in (tl.peak_forward, tl.peak_backward, tl.peak_step):
        assert measured is not None
        assert abs(predicted - measured) <= 0.10 * measured
    assert tl.peak_step.predicted >= expanded_copy_bytes(B)
    # op by op, too: the curve, not only its maximum
    for r in tl.rows:
        assert abs(r.predicted - r.measured) <= 0.10 * max(r.measured, 2**20)


def test_peaks_plot_and_explain():
    B = 64
    x, W = inputs(B)
    tl = memory.timeline(broadcast_matmul, x, W)
    p = memory.peaks(broadcast_matmul, x, W)
    assert (p.forward.predicted, p.backward.predicted, p.step.predicted) == (
        tl.peak_forward.predicted, tl.peak_backward.predicted, tl.peak_step.predicted)
    assert p.reserved is None
    fig = tl.plot()
    ax = fig.axes[0]
    assert "MiB" in ax.get_ylabel()
    assert "op" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("predicted")
    assert labels[1].startswith("measured")
    assert "backward" in labels[2]
    text = tl.explain()
    assert "current after the forward" in text
    assert "peak" in text
    assert "reserved" not in text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_predicted_peak_matches_the_allocator():
    x, W = inputs(8192, device="cuda")  # the seed's own shape: about 1 GiB
    tl = memory.timeline(broadcast_matmul, x, W)
    for predicted, measured in (tl.peak_forward, tl.peak_backward, tl.peak_step):
        assert abs(predicted - measured) <= 0.10 * measured
    after = tl.peaks().after_forward
    assert abs(after.predicted - after.measured) <= 0.10 * after.measured
    assert tl.reserved >= tl.peak_step.measured
    assert "reserved" in tl.explain()


# --- activation checkpointing -----------------------------------------------------------------


def checkpointed(x, W):
    """broadcast_matmul under non-reentrant checkpointing: keeps x and W, recomputes the rest."""
    from torch.utils.checkpoint import checkpoint

    return checkpoint(broadcast_matmul, x, W, use_reentrant=False)


def test_ledger_attributes_checkpointed_inputs_to_the_checkpoint_not_to_bmm():
    x, W = inputs(64, x_grad=True, w_grad=True)
    led = memory.ledger(checkpointed, x, W)
    # torch 2.9's checkpoint also saves an empty placeholder (0 bytes); only what costs memory is compared
    assert [(e.node, e.slot, e.source) for e in led.entries if e.bytes] == [
        ("checkpoint", "input kept to recompute", "input 0"), ("checkpoint", "input kept to recompute", "input 1")]


def test_ledger_of_stacked_checkpoints_keeps_each_layers_input():
    x, W = inputs(64, x_grad=True, w_grad=True)

    def two_layers(x, W):
        return checkpointed(checkpointed(x, W).reshape(x.shape), W)

    led = memory.ledger(two_layers, x, W)
    assert led.total_bytes == x.nbytes  # the second layer's input, nothing expanded
    assert {e.node for e in led.entries} == {"checkpoint"}


def test_graph_of_a_checkpointed_output_does_not_recompute():
    x, W = inputs(64, x_grad=True, w_grad=True)
    out = checkpointed(x, W)
    seen = trace.trace_ops(memory.graph, out)  # every op that reading the graph dispatches
    assert seen.compute_ops == []


def test_graph_says_which_slots_checkpoint_recomputes_and_backward_still_works():
    x, W = inputs(64, x_grad=True, w_grad=True)
    out = checkpointed(x, W)
    assert "recomputes mat2, self in backward" in memory.graph(out)
    out.sum().backward()
    assert x.grad is not None
    assert W.grad is not None


# --- a watch must not turn a compiled function back into eager code (compiling.EagerWatch) ---------------
def test_the_timeline_leaves_a_compiled_function_compiled():
    from .stays_compiled import check

    def step(x):
        return (x.sigmoid() * x).sum()

    x = torch.randn(8, requires_grad=True)
    check(lambda f: memory.timeline(f, x), step, x)


def test_reading_a_saved_slot_leaves_a_compiled_function_compiled():
    # _RefuseOps stops a recomputation at its first op; a compiled function met under it must not be marked
    from .stays_compiled import check

    def step(x):
        return (x.square() + 1).sum()

    def refused(f):
        x = torch.randn(8)
        with memory._RefuseOps() as guard:
            try:
                f(x)
            except memory._Recomputes:
                pass
        assert guard.refused

    check(refused, step, torch.randn(8))
