"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): fusion's gain taken apart: the bytes
bound, the allocator, threads (fusion.py)."""
import pytest
import torch

from lessons_lib.lesson04_launch_overhead import fusion, lessons, variants



def test_the_bytes_bound_on_fusion_is_two_per_layer():
    for layers in (1, 4):
        eager, fused = fusion.fusion_bytes({"width": 256, "batch": 1024, "layers": layers})
        assert eager / fused == pytest.approx(2 * layers, rel=0.02)


def test_fusion_causes_measures_three_variants_and_counts_page_faults(one_thread):
    def stand_in(x, W, w, b):  # a one-op-per-layer stand-in for the compiled function (no compile here)
        return variants.addcmul(x, W, w, b)

    fc = fusion.fusion_causes({"width": 8, "batch": 64, "layers": 2}, "cpu", compiled=stand_in, max_time=0.5,
                         min_run_time=0.001)
    assert fc.many.names == ["eager, new outputs", "eager, reused out= buffers", "compiled (one fused kernel)"]
    assert fc.bound == pytest.approx(4, rel=0.2)
    assert all(v is None or v >= 0 for v in fc.faults.values())
    text = str(fc)
    assert "bytes bound" in text and "allocator" in text and "fusion alone" in text
    # the reused-buffer rewrite computes PseudoLinear
    x, W, w, b = lessons.make_inputs({"width": 8, "batch": 4, "layers": 2}, "cpu", torch.float32)
    out = variants.pseudo_linear_reused(x, W, w, b, torch.empty_like(x), torch.empty_like(x))
    torch.testing.assert_close(out, variants.pseudo_linear(x, W, w, b))
