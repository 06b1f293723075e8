"""Lesson 05 (CUDA graphs, seed 003): the thread's tables beside the model (evidence_reported.py): the rise graphs
give, the cap, the tables, the fit."""
import pytest

from lessons_lib import launch_queue
from lessons_lib.lesson05_cuda_graphs import evidence, evidence_reported, explore, lessons
from .helpers import DISPATCH


# --- the thread's tables (reported) beside the model -------------------------------------------------
def test_graphs_raise_pseudolinears_ratio_over_linear_as_in_the_thread():
    widths, series = evidence_reported.model_vs_reported("T4", dispatch=DISPATCH)
    eager, graphed = series["model (T4, batch 64), eager"], series["model (T4, batch 64), graphed"]
    i = widths.index(512)
    assert graphed[i] > eager[i]  # the thread: 0.44× → 1.74× at width 512
    assert all(g >= e - 1e-9 for g, e in zip(graphed, eager))


def test_graphs_gain_cap_by_hand_and_no_modelled_gain_exceeds_it():
    # per kernel: host saves dispatch 2 µs + the launch; the device still spends the shortest kernel + the graph's gap
    lq = launch_queue
    assert evidence.graph_gain_cap(DISPATCH) == pytest.approx((2e-6 + lq.KERNEL_LAUNCH) / (lq.KERNEL_MIN + lq.GRAPH_GAP))
    gain = evidence_reported.graph_gain("T4", dispatch=DISPATCH)
    assert list(gain)[0] == "reported" and len(gain["reported"]) == len(lessons.REPORTED_WIDTHS)
    assert gain["reported"][lessons.REPORTED_WIDTHS.index(512)] == pytest.approx(1.7432 / 0.4413, rel=1e-3)
    for gpu in launch_queue.PRESETS:
        model = evidence_reported.graph_gain(gpu, dispatch=DISPATCH)[f"model ({gpu}, batch 64)"]
        assert all(0.99 <= g <= evidence.graph_gain_cap(DISPATCH, gpu) for g in model)
    overhead_bound = evidence.model_step(explore.OVERHEAD_BOUND, "T4", dispatch=DISPATCH)
    assert overhead_bound.speedup <= evidence.graph_gain_cap(DISPATCH)


def test_the_gain_table_says_where_the_rise_is_largest():
    text = evidence_reported.graph_gain_table("T4", dispatch=DISPATCH)
    assert "largest ×3.95 at width 512" in text and "model (T4, batch 64)" in text


def test_reported_tables_are_read_from_the_recorded_file_with_their_label():
    label, tables = evidence_reported.reported_tables()
    assert "reported" in label and "seed 003" in label
    eager, graphed = evidence_reported._graphed_pair()
    assert tables[eager][512] == pytest.approx(0.4413, abs=1e-4)
    assert tables[graphed][512] == pytest.approx(1.7432, abs=1e-4)


def test_the_comparison_table_labels_model_and_reported():
    text = evidence_reported.model_vs_reported_table(dispatch=DISPATCH)
    assert "reported, eager" in text and "model (T4" in text and "not named" in text


def test_fit_to_reported_gives_a_distance_per_preset():
    fit = evidence_reported.fit_to_reported(dispatch=DISPATCH)
    assert set(fit) == set(launch_queue.PRESETS) and all(v >= 0 for v in fit.values())
