"""Lesson 06, claim 6 (evidence_layout.py): channels_last vs NCHW."""

from lessons_lib.lesson06_data_movement import evidence_layout


def test_channels_last_is_the_same_shape_with_other_strides_and_the_same_values():
    text = evidence_layout.layout_strides()
    assert "strides (192, 1, 24, 3)" in text and "output strides (512, 1, 64, 8)" in text and "✓" in text


def test_a_convolution_output_is_channels_last_when_its_input_or_its_weight_is():
    # ATen: cudnn_conv_suggest_memory_format (ConvUtils.h) on CUDA; the CPU backends follow the same rule
    rows = {line[:24].strip(): line for line in evidence_layout.layout_strides().splitlines()[:4]}
    assert rows["contiguous (NCHW)"].endswith("(NCHW)")
    for name in ("channels_last (NHWC)", "input NHWC, weight NCHW", "input NCHW, weight NHWC"):
        assert rows[name].endswith("(channels_last)"), rows[name]


def test_layout_timings_plumbing(one_thread):
    t = evidence_layout.layout_timings("cpu", batch=1, size=8, min_run_time=0.01)
    assert list(t) == ["contiguous NCHW", "channels_last"]


def test_the_layout_verdict_goes_through_the_noise_rule(one_thread):
    cmp, said = evidence_layout.layout_verdict("cpu", batch=1, size=8, max_time=0.5)
    r = cmp.ratio("contiguous NCHW", "channels_last")
    assert ("not decided on this run" in said) == (not r.decided)


def test_the_layout_verdict_says_which_precision_a_gpu_ran_its_convolutions_in(one_thread):
    # cuDNN runs float32 convolutions in TF32 by default on an Ampere or newer GPU: the sentence says so there
    import pytest
    import torch

    if not getattr(torch.cuda, "_course_simulated", None):
        pytest.skip("needs the simulated GPU: -p tests.simgpu --simulate-gpu=h100 (or t4)")
    cmp, said = evidence_layout.layout_verdict("cuda", batch=1, size=8, max_time=0.5)
    if cmp.ratio("contiguous NCHW", "channels_last").decided:
        cc = torch.cuda.get_device_capability()[0]
        assert ("(float32 convolutions in TF32 (cuDNN))" in said) == (cc >= 8), said
        assert cc >= 8 or "(float32 convolutions in full float32)" in said
    _cmp, said16 = evidence_layout.layout_verdict("cuda", torch.float16, batch=1, size=8, max_time=0.5)
    assert "float32" not in said16


def test_the_layout_timings_are_labelled_with_the_precision_a_gpu_ran(one_thread):
    # Issue 28: the Conv2d timings a GPU reader sees in the table were TF32 and not labelled.
    import pytest
    import torch

    if not getattr(torch.cuda, "_course_simulated", None):
        assert all("TF32" not in n and "float32" not in n for n in evidence_layout.layout_timings(
            "cpu", batch=1, size=8, min_run_time=0.01))  # a CPU has no TF32: nothing to say
        pytest.skip("the GPU half needs the simulated GPU: -p tests.simgpu --simulate-gpu=h100 (or t4)")
    want = " (TF32)" if torch.cuda.get_device_capability()[0] >= 8 else " (full float32)"
    timed = evidence_layout.layout_timings("cuda", batch=1, size=8, min_run_time=0.01)
    assert all(t.label.endswith(want) for t in timed.values()), [t.label for t in timed.values()]
    cmp, _said = evidence_layout.layout_verdict("cuda", batch=1, size=8, max_time=0.5)
    assert all(t.label.endswith(want) for t in cmp.timings.values())
    cmp16, _said = evidence_layout.layout_verdict("cuda", torch.float16, batch=1, size=8, max_time=0.5)
    assert not any("TF32" in t.label or "float32" in t.label for t in cmp16.timings.values())
