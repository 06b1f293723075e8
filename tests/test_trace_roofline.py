"""What the op trace counts (bytes the ops read and write, new allocations, FLOPs of GEMMs and
convolutions) and the roofline built on it (datasheet peaks, the measured per-op overhead)."""
import pytest
import torch
import torch.nn.functional as F

from lessons_lib import roofline, trace

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


# --- roofline ------------------------------------------------------------------------------
def test_t4_has_no_bf16_figure():
    assert roofline.datasheet("Tesla T4", torch.bfloat16) is None


def test_h100_has_a_bf16_figure():
    assert roofline.datasheet("NVIDIA H100 80GB HBM3", torch.bfloat16).flops == pytest.approx(989e12)


def test_datasheet_float32_uses_tf32_only_when_asked():
    assert roofline.datasheet("NVIDIA A100-SXM4-40GB", torch.float32, tf32=False).flops == pytest.approx(19.5e12)
    assert roofline.datasheet("NVIDIA A100-SXM4-40GB", torch.float32, tf32=True).flops == pytest.approx(156e12)


def test_datasheet_launch_is_marked_as_an_assumption():
    p = roofline.datasheet("Tesla T4", torch.float32)
    assert p.launch > 0
    assert "assumed" in p.source


def test_overhead_is_measured_and_positive_on_cpu():
    assert 1e-8 < roofline.overhead("cpu") < 1e-2


def test_cpu_peaks_have_a_real_launch_term():
    p = roofline.measure_peaks("cpu")
    assert p.launch == roofline.overhead("cpu")
    assert p.launch > 0


def test_peaks_cache_is_keyed_on_float32_matmul_precision(monkeypatch):
    calls = []
    monkeypatch.setattr(roofline, "_measured", {})
    monkeypatch.setattr(roofline, "_overheads", {})  # the stub's 1 ms must not stay cached as the overhead
    monkeypatch.setattr(roofline.timing, "measure",
                        lambda *a, **k: calls.append(k.get("label")) or roofline.timing.Timing(
                            k.get("label", ""), 1e-3, 0.0, [1e-3], 1, "stub", "cpu"))
    monkeypatch.setattr(roofline, "_copy_elements", lambda dev: 1024)
    before = torch.get_float32_matmul_precision()
    try:
        roofline.measure_peaks("cpu")
        n = calls.count("peak matmul")
        torch.set_float32_matmul_precision("high")
        roofline.measure_peaks("cpu")
        assert calls.count("peak matmul") == n + 1
    finally:
        torch.set_float32_matmul_precision(before)


def test_many_small_ops_are_overhead_bound_with_a_per_op_cost():
    p = roofline.Peaks(flops=1e11, bandwidth=2e10, launch=5e-6, source="test")
    work = roofline.Work(flops=10**6, bytes=10**3, launches=40)
    assert p.regime(work) == "overhead"
    assert p.floor(work) == pytest.approx(40 * 5e-6)
    assert p.terms(work)["overhead"] == pytest.approx(2e-4)
