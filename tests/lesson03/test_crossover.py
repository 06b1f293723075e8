"""Lesson 03 (many small Linear layers in parallel, forum seed 002): the crossover map and the paired check (crossover.py)."""

import types

import matplotlib.figure
import matplotlib.pyplot as plt
import pytest

from lessons_lib import noise, plots
from lessons_lib.grouped_linear import tuning as GL_tuning  # where tuning reads _CACHE and TUNE_BUDGET_S
from lessons_lib import lesson03_grouped_linear as L
from lessons_lib.lesson03_grouped_linear import crossover, lessons
from lessons_lib.lesson import Lesson
from .helpers import _boom


def test_crossover_grid_and_heatmap(one_thread):
    grid = L.crossover_grid("cpu", [2, 4], [4, 8], base={"batch": 1, "length": 4},
                            variants=["loop (SlowGroups)", "grouped Conv1d", "bmm, rows first"], max_time=0.05)
    wins = grid.winners()
    assert len(wins) == 2 and all(w in grid.medians for row in wins for w in row)
    assert all(r >= 1.0 for row in grid.ratio("loop (SlowGroups)") for r in row)
    assert "Conv1d / fastest" in L.grid_table(grid)
    fig = L.heatmap(grid)
    assert isinstance(fig, matplotlib.figure.Figure)
    plt.close(fig)


def test_grid_refuses_a_bad_shape_before_timing_anything(monkeypatch):
    monkeypatch.setattr(L.LESSON, "make_inputs", _boom)
    with pytest.raises(ValueError, match="groups"):
        L.crossover_grid("cpu", [4, 0], [8])


def test_the_winner_map_never_names_auto_which_runs_one_of_the_others():
    grid = crossover.Grid([4], [8], {}, False, {"loop (SlowGroups)": [[3.0]], "bmm, rows first": [[1.0]],
                                        "grouped Conv1d": [[1.2]], lessons.AUTO: [[0.9]], lessons.FORUM: [[0.95]]}, "cpu")
    assert grid.winners() == [["bmm, rows first"]]  # auto "won" by noise: it runs bmm or conv
    assert grid.ratio("grouped Conv1d") == [[pytest.approx(1.2)]]
    assert "auto / fastest" in L.grid_table(grid)
    tie = crossover.Grid([4], [8], {}, False, {"loop (SlowGroups)": [[3.0]], "bmm, rows first": [[1.0]],
                                       "grouped Conv1d": [[1.03]]}, "cpu", noisy=[[[]]])
    assert "bmm, rows first ≈ grouped Conv1d" in L.grid_table(tie)  # within noise.TIE: no winner named
    tie.noisy = [[["grouped Conv1d"]]]
    assert "not decided" in L.grid_table(tie)


def _scripted_paired_check(monkeypatch, grid_loop: float, loop_in_rounds: float):
    """paired_check at one point where the grid's single pass timed the loop at `grid_loop` and Conv1d at 1.0;
    in the rounds Conv1d takes 1.0, the loop `loop_in_rounds`, auto 1.0, 2.0 (a storm), 1.1, 0.9, 1.05, twice
    (the noise rule's first look: 10 rounds)."""
    grid = crossover.Grid([4], [8], {"batch": 1, "length": 4}, False,
                  {"loop (SlowGroups)": [[grid_loop]], "grouped Conv1d": [[1.0]], "einsum": [[10.0]], lessons.AUTO: [[1.5]],
                   lessons.FORUM: [[1.0]]}, "cpu")
    auto_times = iter([1.0, 2.0, 1.1, 0.9, 1.05] * 2)
    orders = []

    def scripted(self, params, device=None, dtype=None, variants=None, **_kw):
        orders.append(list(variants))
        assert params == {"batch": 1, "length": 4, "groups": 4, "group_size": 8}
        # in ms: the rounds' time limit (noise._paired) reads the times as the seconds a round costs
        t = {n: ms * 1e-3 for n, ms in {lessons.AUTO: next(auto_times), "grouped Conv1d": 1.0,
                                        "loop (SlowGroups)": loop_in_rounds, lessons.FORUM: 1.0}.items()}
        return types.SimpleNamespace(timings={n: types.SimpleNamespace(median=t[n], least=t[n]) for n in variants})

    monkeypatch.setattr(Lesson, "run", scripted)
    picked = types.SimpleNamespace(strategy="conv")
    monkeypatch.setattr(GL_tuning, "_CACHE", {("meta", "float32", 4, 8, 8, 4, 4, False, True): "not this one",
                                       ("cpu", "float32", 4, 8, 8, 4, 4, True, True): "not training",
                                       ("cpu", "float32", 4, 8, 8, 4, 4, False, True): picked})
    return crossover.paired_check(grid, rounds=10, max_rounds=10), orders


def test_paired_check_uses_the_noise_rule_against_the_fastest_and_the_forum_baddbmm(monkeypatch):
    out, orders = _scripted_paired_check(monkeypatch, grid_loop=9.0, loop_in_rounds=9.0)
    assert out["ratios"] == [[1.05]] and out["forum"] == [[1.05]] and out["against"] == [["grouped Conv1d"]]
    # a storm and a 0.9 in every five rounds: the interval of auto / Conv1d reaches below 1 and past the 5% tie band
    assert out["decided"] == [[False]]
    assert out["chose"] == [["conv"]]  # auto's choice on this device, from its cache
    # auto, the grid's two fastest contenders (not einsum, third), the forum baddbmm; reversed each round
    assert orders[0] == [lessons.AUTO, "grouped Conv1d", "loop (SlowGroups)", lessons.FORUM] and orders[1] == orders[0][::-1]


def test_paired_check_judges_against_whichever_of_the_grids_two_fastest_the_rounds_find_faster(monkeypatch):
    # The single pass (a quiet moment for the loop) ranked the loop first at 0.8; in the rounds it takes 3.0,
    # so the bar is against Conv1d (1.0), not against a loop that only looked fast once.
    out, orders = _scripted_paired_check(monkeypatch, grid_loop=0.8, loop_in_rounds=3.0)
    assert orders[0][:3] == [lessons.AUTO, "loop (SlowGroups)", "grouped Conv1d"]
    assert out["against"] == [["grouped Conv1d"]] and out["ratios"] == [[1.05]]


def test_the_heatmap_colours_only_decided_winners_and_a_recorded_table_says_so(monkeypatch):
    """The recorded map coloured 8 of 9 forward points as firm winners where its table said "not decided",
    and a recorded file told the reader to "rerun on a quieter machine"."""
    medians = {"loop (SlowGroups)": [[3.0, 3.0]], "bmm, rows first": [[1.0, 1.0]], "grouped Conv1d": [[1.5, 1.02]]}
    grid = crossover.Grid([4], [8, 16], {}, False, medians, "cpu", noisy=[[["bmm, rows first"], []]])
    drawn = {}
    monkeypatch.setattr(plots, "winner_map", lambda rows, cols, winners, order, notes, **kw: drawn.update(
                            winners=winners, notes=notes, decided=kw["decided"]))
    L.heatmap(grid)
    assert drawn["winners"] == [["bmm, rows first"] * 2]
    assert drawn["decided"] == [[False, True]]  # the noisy winner is hatched; a tie is decided (it says "tie")
    assert drawn["notes"] == [["loop 3.0×", "loop 3.0×\ntie (5%)"]]
    live, recorded = L.grid_table(grid), L.grid_table(grid, recorded=True)
    assert "rerun on a quieter machine" in live and "rerun" not in recorded
    assert "1 of them was not decided when recorded" in recorded and "1 point has noisy timings" in recorded
    # the point's own cell, in the noise rule's words for a recorded figure (noise.NOT_DECIDED_RECORDED)
    assert "not decided when recorded (bmm, rows first?)" in recorded
    assert "not decided (bmm, rows first?)" in live and "when recorded" not in live.split("\n⚠")[0]


def test_a_recorded_heatmap_says_how_its_file_was_recorded_under_the_figure():
    import matplotlib.pyplot as plt

    medians = {"loop (SlowGroups)": [[3.0]], "bmm, rows first": [[1.0]], "grouped Conv1d": [[1.5]]}
    grid = crossover.Grid([4], [8], {}, False, medians, "cpu", noisy=[[[]]])
    fig = L.heatmap(grid, title="AMD EPYC: forward", caption="recorded with 1 thread, load average 1.2–2.9")
    assert "recorded with 1 thread, load average 1.2–2.9" in [t.get_text() for t in fig.texts]
    assert not L.heatmap(grid).texts  # a live map has no caption
    plt.close("all")


def test_auto_against_forum_leaves_variants_decided_far_slower_out_of_the_rounds(monkeypatch):
    """The GPU claim's sweep ran past its 60 s timeout with every variant, the 100-group loop included, in every
    round. A first pass decides the loop and the Conv1d far slower than the stacked matmul: only auto, the matmul
    and vmap are paired; the work done is one pass and at most max_rounds rounds a size, whatever the clock."""
    first = {lessons.AUTO: 1.0, "loop (SlowGroups)": 12.0, "grouped Conv1d": 13.0, "matmul, channels first": 1.0,
             "vmap": 1.7}
    calls = []

    def scripted(self, params, device=None, dtype=None, variants=None, min_run_time=None, max_time=None, **_kw):
        calls.append((params["group_size"], list(variants), min_run_time, max_time))
        t = {n: types.SimpleNamespace(median=first[n] * 1e-3 * (1.02 if len(calls) % 2 else 1.0), least=first[n] * 1e-3,
                                      spread=0.05, label=n) for n in variants}  # ms: the rounds' limit reads seconds
        return types.SimpleNamespace(timings=t, prepare_seconds={lessons.AUTO: 0.5})

    monkeypatch.setattr(Lesson, "run", scripted)
    points = crossover.auto_against_forum("cpu", [8, 16], {"batch": 1, "groups": 4, "length": 4})
    assert [p["best"] for p in points] == ["matmul, channels first"] * 2
    assert all(set(p["far"]) == {"loop (SlowGroups)", "grouped Conv1d"} for p in points)
    assert all(p["ratio"].decided and p["ratio"].median == pytest.approx(1.0, abs=0.03) for p in points)
    for k in (8, 16):
        mine = [c for c in calls if c[0] == k]
        assert mine[0][1] == [lessons.AUTO, *crossover.FORUM_VARIANTS] and mine[0][3] == 0.5  # the first pass, capped
        assert noise.MIN_ROUNDS <= len(mine) - 1 <= noise.MAX_ROUNDS  # the rounds: the rule's looks
        assert all(set(c[1]) == {lessons.AUTO, "matmul, channels first", "vmap"} for c in mine[1:])
        assert all(c[2] == 1e-3 for c in mine)  # single-call samples on a GPU: what bounds a round


def test_auto_against_forum_runs_for_real_at_a_tiny_shape(monkeypatch, one_thread):
    monkeypatch.setattr(GL_tuning, "TUNE_BUDGET_S", 0.1)
    points = crossover.auto_against_forum("cpu", [4], {"batch": 1, "groups": 2, "length": 4}, max_time=0.3,
                                          max_rounds=3)
    # 0.3 s holds the noise rule's 3 rounds on a quiet machine; on a busy one fewer fit, and then nothing is decided
    p = points[0]
    assert p["best"] in crossover.FORUM_VARIANTS and p["rounds"] >= 1
    assert p["rounds"] >= noise.MIN_ROUNDS or not p["ratio"].decided
