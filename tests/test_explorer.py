"""The explorer (widgets.Explorer, explorer_ui): runs, sweeps, replays, the widget and its errors."""
import matplotlib.pyplot as plt
import pytest
import torch

from lessons_lib import device, results, roofline
from lessons_lib.lesson import Lesson, Param, Variant
from lessons_lib.widgets import Explorer, default_sweep_values


# --- a tiny lesson to drive the generic machinery --------------------------------------------
def _toy():
    return Lesson(
        key="toy", title="toy",
        params=[Param("n", "n", cpu=8, gpu=8, lo=1, hi=1 << 20)],
        variants=[Variant("mm", lambda a, b: a @ b), Variant("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b))],
        make_inputs=lambda p, d, dt: (torch.randn(p["n"], p["n"], device=d, dtype=dt),) * 2,
        peak_bytes=lambda p, dt: 3 * p["n"] ** 2 * 4,
        reduction=lambda p: p["n"], baseline="mm",
    )


def test_explorer_runs_sweeps_and_replays(tmp_path):
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    run, fig = ex.run(n=16)
    assert set(run.timings) == {"mm", "einsum"}
    assert fig.axes[0].get_xlabel().startswith("time per call")
    plt.close(fig)
    sw, fig = ex.sweep("n", [4, 8, 16], on_step=lambda i, n: None)
    assert sw.values == [4, 8, 16]
    assert len(sw.medians()["mm"]) == 3
    assert fig.axes[0].get_xlabel() == "n"
    assert "time per call" in fig.axes[0].get_ylabel()
    plt.close(fig)
    with pytest.raises(ValueError, match="dtype"):
        ex.run(dtype="float8")
    # a recorded file (as a GPU run would write it) replays without running anything
    info = device.describe("cpu")
    info.kind, info.name = "cuda", "NVIDIA Test GPU"
    results.save(info, {"toy": {"headline": results.run_to_dict(run, roofline.Peaks(1e12, 1e11, 5e-6, "t")),
                                "sweeps": {"n": results.sweep_to_dict(sw)}}}, tmp_path)
    (rec,) = results.for_lesson("toy", gpu_only=True, directory=tmp_path)
    figs = ex.replay(rec)
    assert len(figs) == 2
    assert "Test GPU" in figs[0].axes[0].get_title()
    for f in figs:
        plt.close(f)


def test_explorer_widget_builds_and_reports_errors_in_place():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ui = ex.widget()
    assert ex.sliders["n"].value == 8
    assert ex.run_b.description == "Run"
    ex.sliders["n"].value = 1 << 20  # too big: refused with a message, nothing raised
    ex._act(ex._do_run, background=False)
    assert "needs about" in ex.status.value
    assert not ex.run_b.disabled
    ex.sliders["n"].value = 8
    ex._act(ex._do_run, background=False)
    assert "needs about" not in ex.status.value
    assert "unexpected" not in ex.status.value
    assert any("image/png" in o.get("data", {}) for o in ex.out.outputs)  # the figure, in the widget
    assert ui is ex.widget()


def test_default_sweep_values_stay_in_range():
    vals = default_sweep_values(_toy(), "n", 8)
    assert vals == sorted(set(vals))
    assert vals[0] >= 1
    assert 8 in vals


# --- issue 28 §5: a device an explorer cannot measure on is one line, before any widget ------------------
def _factories():
    from lessons_lib import lesson01_broadcast_matmul as L1, lesson02_autograd_memory as L2
    from lessons_lib import lesson03_grouped_linear as L3, lesson04_launch_overhead as L4
    from lessons_lib import lesson05_cuda_graphs as L5, lesson06_data_movement as L6, lesson07_capstone as L7

    return {"01": L1.explorer, "02": L2.explorer, "03": L3.explorer, "03 training": lambda d: L3.explorer(d, True),
            "04": L4.explorer, "05": L5.explorer, "06 cat": L6.cat_explorer, "06 transfer": L6.transfer_explorer,
            "07": L7.explorer}


@pytest.mark.parametrize("name", list(_factories()))
@pytest.mark.parametrize("bad", ["mps", "meta", "nonsense", 3, "cuda:7"] + ([] if torch.cuda.is_available() else ["cuda"]))
def test_every_explorer_refuses_a_device_it_cannot_measure_on_in_one_line(name, bad):
    # 'mps' and 'meta' built an explorer whose device menu raised a TraitError on display (issue 28 §5)
    with pytest.raises(ValueError) as err:
        _factories()[name](bad)
    text = str(err.value)
    assert "\n" not in text and ("'cpu'" in text or "'cuda'" in text), text  # names what it can use


def test_the_explorers_refusal_names_the_devices_it_supports():
    with pytest.raises(ValueError, match=r"This explorer measures on 'cpu'.*not device='meta'"):
        Explorer(_toy(), "meta")


# --- issue 28 §2: one truth per explorer -----------------------------------------------------------------
def _run_with(ex, medians, spread=0.5):
    """A real run of the toy, its timings then set to `medians` with a wide spread (a busy machine's)."""
    run = ex.lesson.run({"n": 8}, "cpu", min_run_time=0.01)
    for name, med in medians.items():
        run.timings[name].median, run.timings[name].iqr = med, spread * med
    return run


def _three():
    import dataclasses

    toy = _toy()
    bmm = Variant("bmm", lambda a, b: torch.bmm(a[None], b[None])[0])
    return dataclasses.replace(toy, variants=[*toy.variants, bmm])


def test_the_table_shows_the_paired_rounds_the_winner_sentence_used(monkeypatch):
    # lesson 03 said "grouped Conv1d and vmap tie" beside a first pass's 8.49 and 5.07 ms
    from lessons_lib import noise

    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    run = _run_with(ex, {"mm": 8.49e-3, "einsum": 5.07e-3})
    rounds = noise.Comparison({"mm": [5.0e-3, 5.1e-3, 5.05e-3] * 3 + [5.05e-3],  # the rule's first look: 10
                               "einsum": [5.1e-3, 5.0e-3, 5.1e-3] * 3 + [5.05e-3]})
    monkeypatch.setattr(noise, "compare_lesson", lambda *a, **k: rounds)
    sentence = ex.decide(run)
    assert "tie" in sentence and "10 paired rounds" in sentence
    assert run.timings["mm"].median == pytest.approx(5.05e-3) and run.timings["einsum"].median == pytest.approx(5.1e-3)
    table = run.table("mm")
    assert "8.49 ms" not in table and "5.07 ms" not in table
    assert "mm *" in table and "einsum *" in table and "median of 10 paired rounds" in table


def test_a_variant_timed_once_faster_than_the_rounds_joins_them_or_nothing_is_decided(monkeypatch):
    from lessons_lib import noise

    ex = Explorer(_three(), "cpu", min_run_time=0.01)
    # mm and einsum close, einsum noisy; bmm decidedly slower in the first pass (narrow spreads)
    run = _run_with(ex, {"mm": 1.0, "einsum": 1.05})
    run.timings["mm"].iqr = 0.01
    run.timings["bmm"].median, run.timings["bmm"].iqr = 1.5, 0.01
    asked = []

    def rounds(lesson, params, device, dtype, variants, **kw):
        asked.append(list(variants))
        slow = {n: [2.0, 2.1, 2.0] * 3 + [2.0] for n in variants}  # the machine slowed down for the rounds
        return noise.Comparison({**slow, "mm": [1.0] * 10})

    monkeypatch.setattr(noise, "compare_lesson", rounds)
    sentence = ex.decide(run)
    assert asked == [["mm", "einsum"], ["mm", "einsum", "bmm"]]  # bmm's 1.5 beat the rounds' runner-up: re-timed
    assert sentence.startswith("fastest: mm, 2.00× ahead of"), sentence
    assert set(run.paired) == {"mm", "einsum", "bmm"}


def test_when_the_machine_slows_between_passes_the_winner_is_not_decided(monkeypatch):
    import dataclasses

    from lessons_lib import noise

    four = _three()
    loop = Variant("loop", lambda a, b: torch.stack([r @ b for r in a]))
    ex = Explorer(dataclasses.replace(four, variants=[*four.variants, loop]), "cpu", min_run_time=0.01)
    run = _run_with(ex, {"mm": 1.0, "einsum": 1.05})
    run.timings["mm"].iqr = 0.01
    for name, med in (("bmm", 1.5), ("loop", 2.5)):  # both decidedly slower than mm in the first pass
        run.timings[name].median, run.timings[name].iqr = med, 0.01
    slowing = iter([2.0, 3.0])  # each set of rounds slower than the last: loop's single 2.5 ms ends up ahead

    def rounds(lesson, params, device, dtype, variants, **kw):
        runner_up = next(slowing)
        return noise.Comparison({n: [runner_up + 0.5] * 10 for n in variants} | {"mm": [1.0] * 10,
                                                                                   "einsum": [runner_up] * 10})

    monkeypatch.setattr(noise, "compare_lesson", rounds)
    sentence = ex.decide(run)
    assert "not decided on this run" in sentence and "loop" in sentence, sentence


def test_a_run_draws_its_bars_from_the_timings_its_sentence_used(monkeypatch):
    from lessons_lib import noise

    monkeypatch.setattr(noise, "from_timings", lambda num, den: noise.Ratio([0.5, 1.0, 2.0]))  # never decided
    monkeypatch.setattr(noise, "compare_lesson", lambda *a, **k: noise.Comparison(
        {"mm": [2e-3] * 10, "einsum": [4e-3, 4.1e-3, 4e-3] * 3 + [4e-3]}))
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    run, fig = ex.run(n=8)
    assert run.winner.startswith("fastest: mm, 2.00× ahead of einsum")
    widths = [p.get_width() for p in fig.axes[0].patches]
    assert widths == pytest.approx([2.0, 4.0])  # ms: the paired rounds' medians, not the first pass's
    plt.close(fig)


def test_a_winner_decided_by_paired_rounds_explains_the_noise_flag():
    # lesson 07 said "fastest: + fused, 1.10× ahead" beside "(6 of 6 measurements noisy)" and nothing more
    from lessons_lib.explorer_status import _noise_line

    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    run = _run_with(ex, {"mm": 1.0, "einsum": 1.1})
    run.paired, run.winner = ["mm", "einsum"], "fastest: mm, 1.10× ahead of einsum (5 paired rounds)"
    line = _noise_line(list(run.timings.values()), run)
    assert "2 of 2 measurements noisy" in line and "decided from paired rounds" in line
    run.winner = "fastest: mm against einsum: not decided on this run"
    assert "decided from paired rounds" not in _noise_line(list(run.timings.values()), run)


# --- issue 28 §2: every phase of a Run is named while it runs, and counted in the estimate ----------------
def test_the_status_names_each_phase_and_the_done_line_times_them(monkeypatch):
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ex.widget()
    seen = []
    monkeypatch.setattr(ex, "_show_phase", lambda: seen.append(ex._phase_text))
    ex._act(ex._do_run, background=False)
    text = " | ".join(seen)
    for phase in ("this machine's peaks", "estimating: timing a few calls of mm", "measuring mm (1 of 2)",
                  "measuring einsum (2 of 2)", "deciding the winner", "drawing"):
        assert phase in text, text
    assert "measuring" in ex.status.value and "(estimated" in ex.status.value


def test_the_estimate_counts_preparing_and_deciding():
    import dataclasses

    toy = _toy()
    tuned = dataclasses.replace(toy.variants[0], prepare=lambda fn, *inputs: fn, prepare_budget=5.0)
    ex = Explorer(dataclasses.replace(toy, variants=[tuned, toy.variants[1]]), "cpu", min_run_time=0.01,
                  run_budget=100)
    total = ex.estimate(n=8)
    assert ex.estimate_parts["measuring"] >= 5.0  # the declared tuning budget, before it ever ran
    assert ex.estimate_parts["deciding the winner"] > 0
    assert total == pytest.approx(sum(ex.estimate_parts.values()))
    ex.run(n=8)  # prepared once here: afterwards its measured cost counts, not the budget
    ex.estimate(n=8)
    assert ex.estimate_parts["measuring"] < 5.0


def test_the_last_point_of_a_sweep_does_not_say_one_short(monkeypatch):
    # the bar showed 100% beside "4 of 5 points measured" while the figure was drawn
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ex.widget()
    seen = []
    monkeypatch.setattr(ex, "_show_phase", lambda: seen.append((ex._points_note, ex.progress.value, ex.progress.max)))
    ex._act(ex._do_sweep, background=False)
    text, value, top = seen[-1]
    assert text.startswith("all ") and text.endswith("points measured") and value == top
    assert any(s[0] == f"1 of {top} points measured (Stop keeps them)" for s in seen)


def test_a_budget_refusal_names_the_readers_variable(monkeypatch):
    import IPython

    ex = Explorer(_toy(), "cpu", run_budget=1e-3)
    shell = type("Shell", (), {"user_ns": {"my_explorer": ex, "_": ex}})()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    with pytest.raises(ValueError, match=r"my_explorer\.run_budget = 0\.002"):
        ex.run(n=8)
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    with pytest.raises(ValueError, match=r"keep the explorer in a variable") as err:
        ex.run(n=8)
    assert "ex.run_budget" not in str(err.value).replace("explorer.run_budget", "")
