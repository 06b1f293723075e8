"""What the op trace counts (trace.py): bytes the ops read and write, new allocations, FLOPs of GEMMs and
convolutions, the bias copy cuBLASLt skips, TF32 marks; and no kernel list off a GPU (kernels.py)."""
import pytest
import torch
import torch.nn.functional as F

from lessons_lib import trace


MiB = 2**20


def _meta(*shapes, grad=False):
    return tuple(torch.empty(*s, device="meta", requires_grad=grad) for s in shapes)


# --- bytes ---------------------------------------------------------------------------------
def test_a_strided_slice_reads_its_own_elements_not_the_whole_span():
    (a,) = _meta((32 * 1024, 256))  # 32 MiB
    op = trace.trace_ops(lambda a: a[::32].sum(), a).named("sum")[0]
    assert op.read_bytes == 1 * MiB  # 1/32 of the tensor
    assert trace.footprint_bytes(a[::32]) > 31 * MiB  # what the old count used: the whole span


def test_a_chunk_reads_its_own_elements():
    (a,) = _meta((256, 32 * 1024))  # 32 MiB, chunked along the contiguous dimension
    piece = a.chunk(32, dim=1)[0]
    assert trace.accessed_bytes(piece) == 1 * MiB


def test_a_broadcast_operand_counts_its_distinct_elements_once():
    w, x = _meta((3, 5), (100, 3, 5))
    op = trace.trace_ops(lambda w, x: x + w.expand(100, 3, 5), w, x).named("add")[0]
    assert op.read_bytes == (100 * 15 + 15) * 4
    assert op.write_bytes == 100 * 15 * 4


def test_overlapping_windows_count_no_more_than_their_span():
    a = torch.zeros(10)
    assert trace.distinct_elements(a.unfold(0, 3, 1)) == 10  # 8 windows of 3 over 10 elements


def test_copy_reads_its_source_only():
    dst, src = torch.zeros(4, 4), torch.ones(4, 4)
    op = trace.trace_ops(lambda d, s: d.copy_(s), dst, src).named("copy_")[0]
    assert (op.read_bytes, op.write_bytes, op.alloc_bytes) == (64, 64, 0)


def test_new_allocation_is_the_storage_of_what_an_op_creates():
    (a,) = _meta((64, 64))
    t = trace.trace_ops(lambda a: (a.t().contiguous(), a.view(-1)), a)
    assert [op.alloc_bytes for op in t.ops] == [0, 64 * 64 * 4, 0]  # t (view), clone, view
    assert t.alloc_bytes == 64 * 64 * 4


def test_baddbmm_counts_the_bias_copied_into_its_output():
    b, x, w = _meta((4, 1, 8), (4, 5, 6), (4, 6, 8))
    t = trace.trace_ops(torch.baddbmm, b, x, w)
    (op,) = t.ops
    out = 4 * 5 * 8 * 4
    assert op.inner_copy_bytes == out
    assert t.copied_bytes == out
    assert op.write_bytes == 2 * out  # the bias copy, then the GEMM's result


def test_baddbmm_with_beta_zero_copies_no_bias():
    b, x, w = _meta((4, 1, 8), (4, 5, 6), (4, 6, 8))
    (op,) = trace.trace_ops(lambda b, x, w: torch.baddbmm(b, x, w, beta=0), b, x, w).ops
    assert op.inner_copy_bytes == 0


def test_summary_names_its_figures_for_what_they_are():
    (a,) = _meta((8, 8))
    text = trace.trace_ops(torch.exp, a).summary()
    assert "new allocations" in text
    assert "read and write" in text
    assert "not DRAM traffic" in text


def test_moved_bytes_is_kept_as_an_alias():
    (a,) = _meta((8, 8))
    t = trace.trace_ops(torch.exp, a)
    assert t.moved_bytes == t.accessed_bytes == 2 * 8 * 8 * 4


# --- FLOPs ---------------------------------------------------------------------------------
def test_grouped_conv1d_flops():
    N, C_in, C_out, L, k, groups = 2, 8, 12, 20, 3, 4
    x, w = _meta((N, C_in, L), (C_out, C_in // groups, k))
    t = trace.trace_ops(lambda x, w: F.conv1d(x, w, groups=groups), x, w)
    L_out = L - k + 1
    assert t.flops == 2 * N * C_out * L_out * (C_in // groups) * k
    assert [op.name for op in t.convolutions] == ["convolution"]


def test_conv2d_flops_count_both_kernel_dimensions():
    N, C_in, C_out, H, Wd, kh, kw = 1, 6, 4, 10, 9, 3, 2
    x, w = _meta((N, C_in, H, Wd), (C_out, C_in, kh, kw))
    t = trace.trace_ops(lambda x, w: F.conv2d(x, w, stride=1, padding=1), x, w)
    H_out, W_out = H + 2 - kh + 1, Wd + 2 - kw + 1
    assert t.flops == 2 * N * C_out * H_out * W_out * C_in * kh * kw


def test_depthwise_conv_is_not_counted_as_a_dense_one():
    x, w = _meta((1, 16, 32), (16, 1, 5))
    t = trace.trace_ops(lambda x, w: F.conv1d(x, w, groups=16), x, w)
    assert t.flops == 2 * 16 * 28 * 1 * 5


def test_transposed_conv_flops_count_each_input_element():
    N, C_in, C_out, L, k = 1, 4, 6, 10, 3
    x, w = _meta((N, C_in, L), (C_in, C_out, k))
    t = trace.trace_ops(lambda x, w: F.conv_transpose1d(x, w), x, w)
    assert t.flops == 2 * N * C_in * L * C_out * k


def test_conv_backward_counts_the_input_and_weight_gradients():
    N, C_in, C_out, L, k, groups = 2, 8, 12, 20, 3, 4
    x, w = _meta((N, C_in, L), (C_out, C_in // groups, k), grad=True)
    forward = 2 * N * C_out * (L - k + 1) * (C_in // groups) * k

    def step(x, w):
        F.conv1d(x, w, groups=groups).sum().backward()

    t = trace.trace_ops(step, x, w)
    assert t.named("convolution_backward")[0].flops == 2 * forward
    assert t.flops == 3 * forward


def test_conv_flops_on_a_real_tensor_match_meta():
    x, w = torch.randn(2, 8, 20), torch.randn(12, 2, 3)
    real = trace.trace_ops(lambda x, w: F.conv1d(x, w, groups=4), x, w).flops
    assert real == trace.trace_ops(lambda x, w: F.conv1d(x, w, groups=4), *trace.on_meta(x, w)).flops


def test_gemm_flops_unchanged():
    a, b = _meta((4, 8, 16), (4, 16, 32))
    assert trace.trace_ops(torch.bmm, a, b).flops == 2 * 4 * 8 * 32 * 16


# --- cuBLASLt's bias epilogue and TF32 (marked in the trace, applied by a GPU's peaks) --------------
@pytest.mark.parametrize("bias, a, b, kw, fused", [
    ((8,), (5, 6), (6, 8), {}, True),  # F.linear's case: 1-D contiguous bias, beta 1
    ((5, 8), (5, 6), (6, 8), {}, False),  # a 2-D bias is copied on CUDA too
    ((1, 8), (5, 6), (6, 8), {}, False),
    ((8,), (5, 6), (6, 8), {"beta": 0.5}, False),  # beta != 1
    ((8,), (1, 6), (6, 8), {}, False),  # a matrix with one row (cuBLASLt's heuristic refuses it)
    ((8,), (5, 6), (6, 1), {}, False),
])
def test_addmm_marks_the_bias_copy_cublaslt_skips(bias, a, b, kw, fused):
    tb, ta, tm = _meta(bias, a, b)
    n = tm.shape[1]
    if tb.shape[-1] != n:
        tb = torch.empty(*bias[:-1], n, device="meta")
    (op,) = trace.trace_ops(lambda *t: torch.addmm(*t, **kw), tb, ta, tm).ops
    assert op.inner_copy_bytes == a[0] * n * 4  # a CPU (and a trace on meta) copies the bias
    assert op.lt_bias is fused
    assert op.lt_saved_bytes == (2 * op.inner_copy_bytes if fused else 0)


def test_a_strided_bias_is_not_fused():
    b = torch.empty(16, device="meta")[::2]
    a, m = _meta((5, 6), (6, 8))
    (op,) = trace.trace_ops(torch.addmm, b, a, m).ops
    assert not op.lt_bias


def test_tf32_marks_float32_gemms_only_while_allowed():
    a, b = _meta((64, 64), (64, 64))
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert trace.trace_ops(torch.mm, a, b).tf32_flops == 0  # PyTorch's default since 1.12
        torch.backends.cuda.matmul.allow_tf32 = True
        t = trace.trace_ops(torch.mm, a, b)
        assert t.tf32_flops == t.flops == 2 * 64**3
        assert trace.trace_ops(torch.mm, *(x.half() for x in (a, b))).tf32_flops == 0  # fp16 is not TF32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_float32_convolutions_are_tf32_by_cudnns_default():
    assert torch.backends.cudnn.allow_tf32 is True  # PyTorch's documented default for convolutions
    x, w = _meta((1, 4, 16), (8, 4, 3))
    t = trace.trace_ops(F.conv1d, x, w)
    assert t.tf32_flops == t.flops > 0



# --- moved from test_toolkit.py -------------------------------------------------------------
# --- trace ---------------------------------------------------------------------------------
def test_trace_counts_views_copies_and_gemms_on_meta():
    a, b = trace.on_meta(torch.empty(4, 8, 16), torch.empty(16, 32))
    t = trace.trace_ops(lambda a, b: (a.transpose(0, 1).contiguous() @ b).sum(), a, b)
    assert [op.name for op in t.copies] == ["clone"]
    assert t.copies[0].alloc_bytes == 4 * 8 * 16 * 4
    (g,) = t.gemms
    assert g.gemm == (1, 32, 32, 16)
    assert t.flops == 2 * 32 * 32 * 16
    assert all(op.alloc_bytes == 0 for op in t.ops if op.is_view)


def test_footprint_counts_an_expanded_view_once():
    w = torch.ones(3, 5)
    assert trace.footprint_bytes(w.expand(100, 3, 5)) == 15 * 4
    assert trace.footprint_bytes(w.t()) == 15 * 4


def test_trace_table_is_deterministic():
    x = torch.ones(2, 3)
    assert trace.trace_ops(torch.exp, x).table() == trace.trace_ops(torch.exp, x).table()
    assert "exp" in trace.trace_ops(torch.exp, x).table()


def test_kernels_is_none_off_gpu():
    assert trace.kernels(torch.exp, torch.ones(3)) is None


def test_a_training_loop_with_host_reads_traces_on_meta():
    # lesson 07's loops read values on the host (.item()) and index with a boolean mask: inside meta_reads()
    # the read on meta is recorded and returns 0, and the mask selects every element; outside, it raises
    import torch as _t

    from lessons_lib.trace import meta_reads
    from lessons_lib.trace import trace_ops as _trace

    def loop(x):
        mask = _t.ones(len(x), dtype=_t.bool).to(x.device)
        loss = x[mask].sum()
        return loss.item(), bool(mask.any())

    x = _t.empty(6, 3, device="meta")
    with pytest.raises(Exception):
        _trace(loop, x)
    with meta_reads():
        t = _trace(loop, x)
    names = [op.name for op in t.ops]
    assert names.count("_local_scalar_dense") == 2
    assert any(op.name == "index" and op.out_shapes[0] == (6, 3) for op in t.ops)


def test_gpu_ops_count_only_what_launches_work_on_a_gpu():
    # lesson 07's GPU model: a value read from a CPU index (x[j]), an allocation and a host read are not kernels;
    # the select is a view; the copy to the device and the sum are work on the device
    from lessons_lib.trace import meta_reads

    idx = torch.tensor([2, 0])

    def step(x):
        rows = torch.stack([x[j] for j in idx])  # host reads of a CPU index, views, one stack on the device
        buf = torch.empty(3, device=x.device)  # the caching allocator: no kernel
        mask = torch.ones(2, dtype=torch.bool).to(x.device)  # ones on the host; the copy is the device's
        return rows[mask].sum().item(), buf

    with meta_reads():
        t = trace.trace_ops(step, torch.empty(4, 3, device="meta"))
    assert [op.name for op in t.gpu_ops] == ["stack", "_to_copy", "index", "sum"]
    assert {op.device for op in t.ops if op.name == "_local_scalar_dense"} == {"cpu", "meta"}
    assert len(t.compute_ops) > len(t.gpu_ops)


# --- a trace must not turn a compiled function back into eager code (compiling.EagerWatch) ---------------
def test_a_trace_leaves_a_compiled_function_compiled_on_the_cpu_and_on_meta():
    from .stays_compiled import check

    def step(x):
        return (x.exp() - 1).sum()

    def other(x):
        return (x.abs() + 2).sum()

    x = torch.randn(8)
    check(lambda f: trace.trace_ops(f, x), step, x)
    check(lambda f: trace.trace_ops(f, *trace.on_meta(x)), other, x)


def test_counts_are_in_words():
    # display.count: one op read "1 ops that launch work"; a captured graph of one op "1 ops"
    from lessons_lib import compiling

    assert trace.trace_ops(torch.neg, torch.ones(3)).summary().startswith("1 op that launches work, 0 views\n")
    assert trace.trace_ops(torch.add, torch.ones(3), torch.ones(3)).summary().startswith("1 op that launches")
    assert str(compiling.Graph("forward", ["aten.mm"], "")) == "forward graph, 1 op: aten.mm"
