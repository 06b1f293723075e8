"""Lesson 03 (many small Linear layers in parallel, forum seed 002): reproduce the thread, correctness of every strategy (evidence.py)."""

import torch

from lessons_lib import grouped_linear as GL
from lessons_lib import lesson03_grouped_linear as L
from lessons_lib.lesson03_grouped_linear import evidence
from .helpers import SMALL


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
            assert said[0].isdigit() or said.startswith("not decided on this run")


def test_reported_table_keeps_the_threads_figures():
    text = L.reported_table()
    assert "1.924" in text and "1.263" in text and "1.52×" in text
