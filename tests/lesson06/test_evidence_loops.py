"""Lesson 06, claim 2 (evidence_loops.py): seed example 2's loop, its extrapolation, expand vs repeat."""
import pytest
import torch

from lessons_lib.lesson06_data_movement import evidence_loops


def test_the_seeds_efficient_example_2_does_not_broadcast():
    a, b = torch.rand(50, 20), torch.rand(10)
    assert "must match the size" in evidence_loops.broadcast_error(a, b)


def test_one_element_of_the_loop_is_seven_ops():
    assert evidence_loops.ops_per_element() == ["select", "select", "select", "add", "select", "select", "copy_"]


def test_the_extrapolation_runs_only_the_elements_it_times(one_thread):
    ex = evidence_loops.extrapolate_elementwise("cpu", elements=20, min_run_time=0.01)
    assert ex.elements_timed == 20 and ex.total_elements == 5000 * 2000 * 100
    assert ex.total_seconds == pytest.approx(ex.seconds_per_element * 1e9)
    assert "extrapolated (not run)" in str(ex)


@pytest.mark.parametrize("elements", [0, 5000, 2.5, True])
def test_the_extrapolation_refuses_to_run_too_much(elements):
    with pytest.raises(ValueError, match="elements"):
        evidence_loops.extrapolate_elementwise("cpu", elements=elements)


def test_repeat_copies_where_expand_views():
    table = evidence_loops.expand_vs_repeat(rows=4096, cols=1024)
    lines = {ln.split("  ")[0]: ln for ln in table.splitlines()[2:]}
    assert "16.0 MiB" in lines["a + v.expand(rows, cols)"] and "repeat" not in lines["a + v.expand(rows, cols)"]
    assert "repeat, add" in lines["a + v.repeat(rows, 1)"] and "32.0 MiB" in lines["a + v.repeat(rows, 1)"]
