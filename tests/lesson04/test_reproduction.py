"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): the thread's benchmark reproduced, its
three mistakes, its reported figures (reproduction.py)."""
import matplotlib.pyplot as plt
import pytest

from lessons_lib import noise
from lessons_lib.lesson04_launch_overhead import lessons, reproduction
from .helpers import DEVICES


def test_mistakes_table_shows_random_data_relu_and_the_extra_add():
    rows = [line.split() for line in reproduction.mistakes_table().splitlines()[2:]]
    table = {(r[0], r[1]): r[2:] for r in rows}
    ops, random, relu, add, _mul = table[("posted", "PseudoLinear")]
    assert random == "1"
    assert relu == "8"
    assert int(add) > int(table[("fixed", "PseudoLinear")][3])
    assert table[("fixed", "PseudoLinear")][1:3] == ["0", "0"]
    assert int(ops) > int(table[("fixed", "PseudoLinear")][0])


def _rounds(**per):
    return noise.Comparison({k.replace("_", " "): v for k, v in per.items()})


def test_summaries_follow_the_numbers_and_the_noise_rule():
    steady = dict(posted_Linear=[2.0] * 10, posted_PseudoLinear=[1.8] * 10, fixed_Linear=[2.0] * 10)  # 10: a look
    text = reproduction.reproduce_summary(_rounds(**steady, fixed_PseudoLinear=[0.5] * 10))
    assert "fixed benchmark:  PseudoLinear is 4× as fast as Linear" in text
    assert "widened the gap" in text
    assert "less than 10%" in reproduction.reproduce_summary(_rounds(**steady, fixed_PseudoLinear=[1.8] * 10))
    # rounds that disagree: no conclusion, the noise rule's sentence instead
    text = reproduction.reproduce_summary(_rounds(**steady, fixed_PseudoLinear=[0.5, 1.8, 0.2, 3.0, 1.0] * 2))
    assert "not decided on this run" in text and "widened" not in text and "less than 10%" not in text


# --- the thread's figures: read from the recorded reported file --------------------------------------
def test_thread_figures_come_from_the_reported_file():
    from lessons_lib import results

    rec = results.for_lesson(lessons.LESSON_KEY, kinds="reported")[0]
    rep = reproduction.thread_report()
    assert rep.label == rec.label() and "reported" in rep.label and "not named" in rep.label
    assert [(r["width"], r["iterations"]) for r in rep.runs] == [(160, 400), (1024, 40)]
    tables = rec.lessons[lessons.LESSON_KEY]["speedups"]["tables"]
    assert {n: list(t.values()) for n, t in rep.tables.items()} == {n: t["speedup"] for n, t in tables.items()}
    assert "graph" in list(rep.tables)[-1]  # the CUDA-graphs table last, as in the thread
    assert not hasattr(reproduction, "THREAD_TABLES") and not hasattr(reproduction, "THREAD_RUNS")  # one copy: the file


def test_reported_table_and_figure_carry_the_files_label():
    label = reproduction.thread_report().label
    assert reproduction.reported_table().splitlines()[0] == label
    assert reproduction.thread_runs_table().splitlines()[0] == label
    assert "1.08×" in reproduction.thread_runs_table()
    fig = reproduction.reported_figure()
    assert label in fig.axes[0].get_title()
    plt.close(fig)


def test_without_the_reported_file_the_tables_say_so(monkeypatch):
    from lessons_lib import results

    monkeypatch.setattr(results, "for_lesson", lambda *a, **k: [])
    assert reproduction.thread_report() is None
    assert "not in lessons_lib/reference" in reproduction.reported_table()
    assert "not in lessons_lib/reference" in reproduction.thread_runs_table()
    plt.close(reproduction.reported_figure())


@pytest.mark.parametrize("device", DEVICES)
def test_reproduce_runs_both_benchmarks(device, one_thread):
    cmp = reproduction.reproduce(device, width=8, batch=4, layers=1, min_run_time=0.005, max_time=1.0)
    assert set(cmp.names) == {"posted Linear", "posted PseudoLinear", "fixed Linear", "fixed PseudoLinear"}
    # the noise rule's minimum of rounds, or sentences that say the time held fewer (a busy machine)
    assert len(cmp.rounds["fixed Linear"]) >= noise.MIN_ROUNDS or "give it more time" in reproduction.reproduce_summary(cmp)
    assert reproduction.reproduce_summary(cmp).startswith("posted benchmark: ")
    assert "paired rounds" in reproduction.reproduce_table(cmp)


@pytest.mark.parametrize("kw, match", [({"width": 0}, "width"), ({"batch": 0}, "batch"), ({"width": -3}, "width"),
                                       ({"device": "meta"}, "not 'meta'")])
def test_reproduce_refuses_a_zero_instead_of_running_the_default(kw, match, no_allocation):
    # reproduce(width=0) silently ran the default width (`width or default`)
    with pytest.raises(ValueError, match=match):
        reproduction.reproduce(**kw)
