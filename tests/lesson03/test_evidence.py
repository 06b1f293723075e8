"""Lesson 03 (many small Linear layers in parallel, forum seed 002): reproduce the thread, correctness of every strategy (evidence.py)."""

import pytest
import torch

from lessons_lib import grouped_linear as GL
from lessons_lib import lesson03_grouped_linear as L
from lessons_lib import roofline
from lessons_lib.lesson03_grouped_linear import evidence
from .helpers import SMALL, tf32_restored


def test_slow_groups_module_is_the_loop_and_converts_exactly():
    models = evidence.thread_models(SMALL, "cpu")
    x = torch.randn(2, 32, 5)
    ys = [m(x) for m in models.values()]
    assert all(torch.allclose(y, ys[0], atol=1e-6) for y in ys[1:])


def test_grouped_mm_report_says_where_it_runs():
    text = L.grouped_mm_report()
    assert "grouped_mm forward on cpu, float32:" in text
    assert "group size 7: grouped_mm needs row strides that are multiples of 16 bytes" in text
    if GL.grouped_mm_problem("cpu", torch.float32, 8, 8, training=True) is None:
        assert "training step: ✓ all 2 variants" in text


# --- reproduce, the grid, the explorer ----------------------------------------------------------------------

def test_reproduce_times_the_three_modules(one_thread):
    t, models = L.reproduce("cpu", SMALL, min_run_time=0.01, max_time=0.3)
    assert [tm.label for tm in t["training step"]] == list(models)
    summary = L.reproduce_summary(t)
    assert summary.startswith("forward, time over time: Conv1d / loop: ") and "training step, time" in summary
    for clause in ("Conv1d / loop: ", "GroupedLinear(auto) / loop: ", "GroupedLinear(auto) / Conv1d: "):
        for line in summary.splitlines()[:2]:  # a ratio, or the noise rule's sentence: never a bare verdict
            said = line.split(clause)[1]
            assert said[0].isdigit() or said.startswith(("not decided on this run", "no winner on this run")), said


def test_reported_table_keeps_the_threads_figures():
    text = L.reported_table()
    assert "1.924" in text and "1.263" in text and "1.52×" in text


# --- TF32: each variant's tolerance follows its own backend's flag -----------------------------------------
# On the H200 the grouped Conv1d failed its float64 check (4.35e-04 against 3.2e-05): cuDNN convolutions run
# float32 in TF32 by default, and the tolerance read only cuBLAS's flag.
CONV, GEMMS = "grouped Conv1d", ("bmm, rows first", "matmul, channels first", "einsum")


def _tols(device):
    rows = L.LESSON.check_correct([SMALL], device=device, seed=0)
    fp32 = L.LESSON.tolerance(SMALL, torch.float32, "cpu")
    assert not [r for r in rows if not r.ok], L.LESSON.correctness_report(rows)
    return {r.variant: ("tf32" if r.tol > fp32 else "fp32") for r in rows}


def _set(api: str, matmul: bool, conv: bool):
    if api == "new":  # torch 2.9+
        torch.backends.cuda.matmul.fp32_precision = "tf32" if matmul else "ieee"
        torch.backends.cudnn.conv.fp32_precision = "tf32" if conv else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = conv


@pytest.mark.parametrize("api", ["new", "old"])
@pytest.mark.parametrize("matmul, conv", [(False, True), (False, False), (True, True), (True, False)])
def test_each_variants_tolerance_follows_its_backends_tf32_flag(api, matmul, conv):
    if not torch.cuda.is_available():
        pytest.skip("the CUDA branch: run with -p tests.simgpu --simulate-gpu=t4 (or on a GPU)")
    if api == "new" and not hasattr(torch.backends.cudnn, "conv"):
        pytest.skip("torch.backends.*.fp32_precision arrived in torch 2.9")
    with tf32_restored():
        _set(api, matmul, conv)
        tols = _tols("cuda")
    assert tols[CONV] == ("tf32" if conv else "fp32")
    assert {tols[n] for n in GEMMS} == {"tf32" if matmul else "fp32"}


def test_a_cpu_tolerance_ignores_the_tf32_flags():
    with tf32_restored():
        _set("old", True, True)
        assert set(_tols("cpu").values()) == {"fp32"}


def test_the_trace_reads_the_new_tf32_api_without_raising():
    """Setting cuDNN's conv precision alone (torch 2.9+) makes the old getter `torch.backends.cudnn.allow_tf32`
    raise (conv and rnn now disagree): the course's traces read the per-backend settings instead."""
    if not hasattr(torch.backends.cudnn, "conv"):
        pytest.skip("torch.backends.*.fp32_precision arrived in torch 2.9")
    with tf32_restored():
        assert L.TRAIN_LESSON.work(SMALL)[CONV].tf32_flops > 0  # cuDNN's default: TF32
        torch.backends.cudnn.conv.fp32_precision = "ieee"
        with pytest.raises(RuntimeError):
            torch.backends.cudnn.allow_tf32  # noqa: B018 (the old getter, after mixing)
        assert L.TRAIN_LESSON.work(SMALL)[CONV].tf32_flops == 0  # not the trace cached under the default
        assert "convolutions (cuDNN)  torch.backends.cudnn.conv.fp32_precision   'ieee'" in roofline.tf32_settings()


def test_a_call_that_cannot_be_traced_on_meta_gets_the_tf32_tolerance_where_a_backend_allows_it():
    from lessons_lib.lesson_parts import may_use_tf32

    def host_read(x):
        return x * x.sum().item()

    x = torch.ones(3)
    assert may_use_tf32(host_read, (x,), "cuda", torch.float32)  # defaults: conv TF32, matmul not
    assert not may_use_tf32(host_read, (x,), "cpu", torch.float32)
    assert not may_use_tf32(host_read, (x,), "cuda", torch.float16)


def test_gpu_conv1d_timings_say_they_are_tf32(one_thread):
    assert evidence.tf32_note("cpu") == "" and evidence.tf32_note("cpu", torch.float16) == ""
    if not torch.cuda.is_available():
        pytest.skip("the CUDA branch: run with -p tests.simgpu --simulate-gpu=h100 (or on a GPU)")
    has_tf32 = torch.cuda.get_device_capability() >= (8, 0)  # a T4 has none: nothing to label there
    t, _models = L.reproduce("cuda", SMALL, min_run_time=0.01, max_time=0.2)
    labels = [tm.label for tm in t["training step"]]
    assert labels == ["SlowGroups (loop)", "grouped Conv1d (TF32)" if has_tf32 else "grouped Conv1d",
                      "GroupedLinear(auto)"]
    assert "Conv1d / loop: " in L.reproduce_summary(t)
    note = evidence.tf32_note("cuda")
    assert ("grouped Conv1d's float32 timings" in note and "cudnn.conv.fp32_precision" in note) == has_tf32
    assert ("TF32" in L.explorer("cuda").lesson.title) == has_tf32
    with tf32_restored():
        torch.backends.cudnn.allow_tf32 = False
        assert evidence.tf32_note("cuda") == "" and evidence.tf32_note("cuda", torch.float16) == ""
