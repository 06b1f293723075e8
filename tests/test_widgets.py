"""The explorer's plain API and its widget actions, outside a browser (tests/test_browser.py
checks the same in a real kernel): budgets, Stop, errors as one status line, colours and order,
sliders, replays labelled by kind, and the static fallback a viewer without a kernel sees."""
import dataclasses
import math

import matplotlib.pyplot as plt
import pytest
import torch

from lessons_lib import lesson01_broadcast_matmul as L1
from lessons_lib import plots, results, timing
from lessons_lib.lesson import Lesson, Param, Stopped, Variant, harness_seconds
from lessons_lib.widgets import MAX_TIME_PER_VARIANT, Explorer, slider_values

KEY01 = L1.LESSON.key


def _toy(**kw):
    return Lesson(
        key="toy", title="toy",
        params=[Param("n", "size n", cpu=8, gpu=8, lo=1, hi=1 << 16), Param("k", "count k", cpu=2, gpu=2, lo=1, hi=8)],
        variants=[Variant("mm", lambda a, b: a @ b), Variant("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b))],
        make_inputs=lambda p, d, dt: (torch.randn(p["n"], p["n"], device=d, dtype=dt),) * 2,
        peak_bytes=lambda p, dt: 3 * p["n"] ** 2 * 4,
        reduction=lambda p: p["n"], baseline="mm", **kw,
    )


@pytest.fixture
def no_inputs(monkeypatch):
    """Fails the test if anything is allocated (make_inputs called on a real device; meta is free)."""
    toy = _toy()
    real = toy.make_inputs

    def make_inputs(p, d, dt):
        if torch.device(d).type != "meta":
            pytest.fail("allocated before refusing")
        return real(p, d, dt)

    monkeypatch.setattr(toy, "make_inputs", make_inputs)
    return toy


def _bar_colors(fig):
    ax = fig.axes[0]
    return {t.get_text(): p.get_facecolor()[:3] for t, p in zip(ax.get_yticklabels(), ax.patches)}


# --- budget --------------------------------------------------------------------------------------
def test_a_run_over_budget_is_refused_before_allocating(no_inputs):
    ex = Explorer(no_inputs, "cpu", run_budget=1e-3)
    with pytest.raises(ValueError, match="would take about .* budget"):
        ex.run(n=8)


def test_a_sweep_over_budget_is_refused_before_allocating(no_inputs):
    ex = Explorer(no_inputs, "cpu", sweep_budget=1e-3)
    with pytest.raises(ValueError, match="This sweep would take about"):
        ex.sweep("n", [4, 8])


def test_the_prediction_grows_with_the_shape_and_the_points():
    toy = _toy()
    cal = toy.calibrate({"n": 64}, "cpu")
    small, big = (toy.predict(cal, {"n": n}, min_run_time=0.01) for n in (64, 1024))
    assert 0 < small < big


def test_calibration_times_each_variant_at_a_shape_no_bigger_than_asked():
    cal = _toy().calibrate({"n": 4096}, "cpu")
    for name, [(shape, floor, seconds)] in cal.points.items():
        assert shape["n"] <= 4096 and seconds > 0 and floor > 0


def test_the_harness_schedule_covers_warmup_and_samples():
    # a slow call: 3 warm-up calls, one to size the block, then samples up to MIN_SAMPLES (each
    # after Timer.timeit's own 2-call warm-up); a fast one: about min_run_time, twice
    slow = harness_seconds(1.0, 0.1)
    assert slow == pytest.approx(timing.WARMUP_CALLS + 1 + 1 + 3 * (timing.MIN_SAMPLES - 1))
    assert harness_seconds(1.0, 0.1, max_time=5.0) < slow
    assert 0.1 <= harness_seconds(1e-6, 0.1) < 0.5


def _scripted_calls(toy, monkeypatch, seconds):
    """toy's calls take seconds(shape) when calibrating (no metrics, inputs free); returns the shapes timed."""
    timed = []

    def time_once(name, shape, dev, dtype):
        timed.append((name, shape["n"]))
        return seconds(shape), 0.0, 0.0

    monkeypatch.setattr(toy, "_time_once", time_once)
    return timed


def test_a_sweep_predicts_each_point_from_its_own_calls(monkeypatch):
    # a step, as with torch's 2 threads on a loaded 2-core CPU (each parallel op waits a time slice at its
    # barrier): 64 ms a call from n=16 up, 50 µs below. Scaled from the ends by the floor, the middle
    # points were predicted at a fraction of it; each point is calibrated at itself now, each shape once
    toy = _toy()
    step = lambda s: 0.064 if s["n"] >= 16 else 5e-5  # noqa: E731
    timed = _scripted_calls(toy, monkeypatch, step)
    ex = Explorer(toy, "cpu", min_run_time=0.05, sweep_budget=600)
    with pytest.raises(Stopped):  # stopped before anything is measured: the estimate is what is tested
        ex.sweep("n", [8, 16, 32, 64], stop=lambda: ex.phases.current == "measuring")
    assert sorted(timed) == sorted((v, n) for v in ("mm", "einsum") for n in (8, 16, 32, 64))
    ovh = toy.calibrate({"n": 8}, "cpu").timer_overhead  # the same reading, give or take its noise
    want = sum(2 * harness_seconds(step({"n": n}), 0.05, MAX_TIME_PER_VARIANT, overhead=ovh) for n in (8, 16, 32, 64))
    assert ex._estimated == pytest.approx(want, rel=0.3)
    assert ex._estimated > 3 * 2 * 1.0  # three points of 64 ms calls, 21 calls each per variant


def test_a_sweep_is_refused_once_its_first_points_are_over_budget(monkeypatch):
    toy = _toy()
    timed = _scripted_calls(toy, monkeypatch, lambda s: 1.0)  # 8 s a variant, capped by max_time
    ex = Explorer(toy, "cpu", min_run_time=0.05, sweep_budget=5)
    with pytest.raises(ValueError, match="This sweep would take more than"):
        ex.sweep("n", [64, 8, 32, 16])
    assert {n for _v, n in timed} == {8}  # the smallest point, then refused: the others never timed


@pytest.mark.parametrize("bad", [0, -1, math.nan, "30", True])
def test_a_nonsense_budget_is_refused(bad):
    with pytest.raises(ValueError, match="run_budget must be a positive number"):
        Explorer(_toy(), "cpu", run_budget=bad)


# --- stop ----------------------------------------------------------------------------------------
def test_a_run_whose_stop_is_set_raises_stopped():
    with pytest.raises(Stopped):
        Explorer(_toy(), "cpu", min_run_time=0.01).run(n=8, stop=lambda: True)


def test_stop_ends_a_background_sweep_early():
    ex = Explorer(_toy(), "cpu", min_run_time=0.05)
    ex.widget()
    ex.sweep_w.value = "n"
    worker = ex._act(ex._do_sweep)  # default sweep: 6 points, 2 variants each
    ex._request_stop()
    worker.join(timeout=30)
    assert not any("image/png" in o.get("data", {}) for o in ex.out.outputs)  # no point finished: no figure


def test_a_stopped_sweep_says_so_and_the_buttons_work_again():
    ex = Explorer(_toy(), "cpu", min_run_time=0.05)
    ex.widget()
    ex._act(ex._do_sweep).join(0)
    ex._request_stop()
    ex._worker.join(timeout=30)
    assert "stopped" in ex.status.value
    assert not ex.sweep_b.disabled


# --- errors: one line of status --------------------------------------------------------------------
def test_a_refusal_is_one_status_line_without_details():
    ex = Explorer(_toy(), "cpu", run_budget=1e-3)
    ex.widget()
    ex._act(ex._do_run, background=False)
    assert "would take about" in ex.status.value
    assert "<details>" not in ex.status.value


def test_a_refusal_leaves_no_output_below_the_status():
    ex = Explorer(_toy(), "cpu", run_budget=1e-3)
    ex.widget()
    ex._act(ex._do_run, background=False)
    assert ex.out.outputs == ()


def _broken():
    def boom(a, b):
        raise RuntimeError("boom\nsecond line of a long message")
    return dataclasses.replace(_toy(), variants=[Variant("mm", boom)])


def test_an_unexpected_error_names_its_type_in_one_line():
    ex = Explorer(_broken(), "cpu", min_run_time=0.01)
    ex.widget()
    ex._act(ex._do_run, background=False)
    first = ex.status.value.split("<details>")[0]
    assert "unexpected RuntimeError: boom" in first
    assert "second line" not in first


def test_an_unexpected_error_folds_its_traceback_under_details():
    ex = Explorer(_broken(), "cpu", min_run_time=0.01)
    ex.widget()
    ex._act(ex._do_run, background=False)
    assert "<details><summary>details</summary>" in ex.status.value


def test_after_an_error_the_explorer_runs_again():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ex.widget()
    ex.sliders["n"].value = 1 << 16
    ex._act(ex._do_run, background=False)
    ex.sliders["n"].value = 8
    ex._act(ex._do_run, background=False)
    assert "✓ done" in ex.status.value


def test_a_finished_run_shows_its_estimate():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ex.widget()
    ex._act(ex._do_run, background=False)
    assert "(estimated" in ex.status.value and "took" in ex.status.value


def test_a_noisy_run_shows_the_harness_note(monkeypatch):
    monkeypatch.setattr(timing.Timing, "noisy", property(lambda t: True))
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ex.widget()
    ex._act(ex._do_run, background=False)
    assert "spread" in ex.status.value


def test_the_progress_bar_resets_after_a_sweep():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ex.widget()
    ex.sweep_w.value = "k"
    ex._act(ex._do_sweep, background=False)
    assert ex.progress.value == 0


# --- regimes: the explorer names the bound each variant sits on ---------------------------------------
def _outputs_text(ex):
    return "".join(o.get("text", "") for o in ex.out.outputs)


def test_a_finished_run_names_each_variants_regime():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ex.widget()
    ex._act(ex._do_run, background=False)
    assert "regime: mm overhead-bound; einsum overhead-bound" in ex.status.value  # 8 × 8: nothing but overhead
    text = _outputs_text(ex)
    assert "Regimes at n=8 k=2" in text
    assert "overhead-bound: fewer, fatter ops" in text  # what helps, for each regime that occurs


def test_regimes_follow_the_toolkit_classifier():
    from lessons_lib import roofline

    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    run, fig = ex.run(n=8)
    plt.close(fig)
    pk = roofline.measure_peaks("cpu")
    assert ex.regimes(run) == {n: pk.regime(run.work[n]) for n in run.timings}


def test_a_sweep_says_where_each_regime_holds():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    ex.widget()
    ex.sweep_w.value = "k"
    ex._act(ex._do_sweep, background=False)
    assert "Regimes across count k" in _outputs_text(ex)
    assert "mm: overhead-bound at 1–8" in _outputs_text(ex)


def test_work_of_replaces_the_traced_work_of_a_variant():
    from lessons_lib import roofline

    one = roofline.Work(flops=0, bytes=0, launches=1)
    ex = Explorer(_toy(), "cpu", min_run_time=0.01, work_of=lambda p, dt: {"einsum": one, "not a variant": one})
    run, fig = ex.run(n=8)
    plt.close(fig)
    assert run.work["einsum"] == one
    assert run.work["mm"] != one


def test_a_model_replay_names_the_regimes_it_records():
    ex = Explorer(L1.LESSON, "cpu")
    line = ex.replay_regimes(_model_rec())
    assert line.startswith("regime at ") and "-bound" in line
    assert ex.replay_regimes(next(r for r in results.for_lesson(KEY01, kinds="reported"))) == ""


def test_regime_spans_group_equal_neighbours():
    from lessons_lib import roofline

    assert roofline.regime_spans([1, 2, 4, 8], ["overhead", "overhead", "memory", "compute"]) == \
        "overhead-bound at 1–2, memory-bound at 4, compute-bound at 8"


def test_regime_words_name_a_close_runner_up():
    from lessons_lib import roofline

    pk = roofline.Peaks(flops=1.0, bandwidth=1.0, launch=1.0, source="test")
    assert pk.regime_words(roofline.Work(flops=10, bytes=1, launches=1)) == "compute-bound"
    assert pk.regime_words(roofline.Work(flops=10, bytes=8, launches=1)) == "compute-bound, memory close behind (0.80×)"


# --- sliders ---------------------------------------------------------------------------------------
def test_a_wide_range_gets_powers_of_two_and_the_default():
    assert slider_values(1, 65536, 12) == [1, 2, 4, 8, 12, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                           16384, 32768, 65536]


def test_a_narrow_range_gets_a_linear_slider():
    ex = Explorer(_toy(), "cpu")
    ex.widget()
    assert type(ex.sliders["k"]).__name__ == "IntSlider"


def test_a_wide_range_gets_a_selection_slider():
    ex = Explorer(_toy(), "cpu")
    ex.widget()
    assert type(ex.sliders["n"]).__name__ == "SelectionSlider"


def test_sweep_choices_show_the_slider_labels():
    ex = Explorer(_toy(), "cpu")
    ex.widget()
    assert [label for label, _ in ex.sweep_w.options] == ["size n", "count k"]


def test_a_power_of_two_sweep_has_a_base_two_log_axis():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    _sw, fig = ex.sweep("n", [4, 8, 16], on_step=lambda i, n: None)
    assert fig.axes[0].xaxis.get_transform().base == 2
    plt.close(fig)


# --- colours and order: live and replayed alike ----------------------------------------------------
def test_variant_colors_are_distinct():
    colors = plots.variant_colors(["a", "b", "c"])
    assert len(set(colors.values())) == 3


def test_a_live_run_and_a_replay_use_the_same_order_and_colours():
    ex = Explorer(L1.LESSON, "cpu")
    live = ex._bars([timing.Timing(v.name, 1e-3, 0, [], 1, "", "cpu") for v in L1.LESSON.variants], {}, {}, "live")
    (measured,) = [r for r in results.for_lesson(KEY01) if r.kind == "measured"][:1]
    replayed = ex.replay(measured)[0]
    assert list(_bar_colors(replayed).items()) == list(_bar_colors(live).items())[:len(_bar_colors(replayed))]
    plt.close("all")


def test_a_variant_only_a_recording_has_gets_a_colour_of_its_own():
    ex = Explorer(L1.LESSON, "cpu")
    rec = next(r for r in results.for_lesson(KEY01, kinds="reported")
               if "broadcast matmul (views made once)" in r.lessons[KEY01]["headline"]["variants"])
    colors = _bar_colors(ex.replay(rec)[0])
    assert colors["broadcast matmul (views made once)"] != colors["broadcast matmul"]
    plt.close("all")


# --- replays say what their figures are --------------------------------------------------------------
def _model_rec():
    return next(r for r in results.for_lesson(KEY01, kinds="model"))


def test_a_model_replay_is_titled_not_a_measurement():
    fig = Explorer(L1.LESSON, "cpu").replay(_model_rec())[0]
    assert "not a measurement" in (fig._suptitle.get_text() if fig._suptitle else fig.axes[0].get_title())
    plt.close("all")


def test_a_model_replay_draws_floors_as_bars_without_floor_marks():
    fig = Explorer(L1.LESSON, "cpu").replay(_model_rec())[0]
    ax = fig.axes[0]
    assert "roofline floor (model, not a measurement)" in ax.get_xlabel() and "black tick" not in ax.get_xlabel()
    assert not ax.collections  # no floor marks over the floors themselves
    assert ax.get_legend() is None  # said under the axis: a legend box would cover the longest bar
    plt.close("all")


def test_a_reported_replay_is_titled_reported():
    rec = next(r for r in results.for_lesson(KEY01, kinds="reported"))
    fig = Explorer(L1.LESSON, "cpu").replay(rec)[0]
    assert "reported" in fig.axes[0].get_title()
    plt.close("all")


def test_the_replay_action_prints_the_kind_note():
    ex = Explorer(L1.LESSON, "cpu")
    ex.widget()
    ex.source_w.value = _model_rec().short()  # observed: replays in the background
    ex._worker.join(timeout=30)
    assert any("not a measurement" in o.get("text", "") for o in ex.out.outputs)


# --- what a viewer without a kernel sees -----------------------------------------------------------
def test_the_display_bundle_carries_a_sentence_instead_of_vbox():
    data = Explorer(L1.LESSON, "cpu")._repr_mimebundle_()
    assert data["text/plain"].startswith("Explorer: ")


def test_the_display_bundle_carries_the_widget_and_a_picture():
    data = Explorer(L1.LESSON, "cpu")._repr_mimebundle_()
    assert {"application/vnd.jupyter.widget-view+json", "image/png"} <= set(data)


def test_nbconvert_shows_the_picture_when_the_widget_state_is_not_saved():
    """nbconvert (nbviewer, and viewers built like it) skips a widget view without saved state."""
    nbformat = pytest.importorskip("nbformat")
    nbconvert = pytest.importorskip("nbconvert")
    data = Explorer(L1.LESSON, "cpu")._repr_mimebundle_()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "L.explorer()", outputs=[nbformat.v4.new_output("display_data", data=data)])])
    html, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    assert "data:image/png;base64," in html


def test_a_model_replay_draws_no_whiskers():
    fig = Explorer(L1.LESSON, "cpu").replay(_model_rec())[0]
    assert [type(c).__name__ for c in fig.axes[0].containers] == ["BarContainer"]  # no ErrorbarContainer
    plt.close("all")



def test_a_budget_refusal_says_how_to_raise_the_budget(no_inputs):
    with pytest.raises(ValueError, match=r"explorer\.sweep_budget = "):
        Explorer(no_inputs, "cpu", sweep_budget=1e-3).sweep("n", [4, 8])


def test_a_crossover_at_the_last_point_is_labelled_inside_the_axes():
    fig = plots.sweep([1, 2, 4], {"a": [1, 2, 3], "b": [2, 3, 1]}, crossover=4)
    assert fig.axes[0].texts[0].get_horizontalalignment() == "right"
    plt.close(fig)


def test_the_static_picture_skips_files_that_have_nothing_to_replay():
    # lesson 04's first recorded file (the thread's speed-up tables) has no headline to draw
    from lessons_lib import lesson04_launch_overhead as L4

    assert L4.explorer("cpu")._preview_png() is not None


# --- issue 20 §1: every record replays, the sliders follow, Run and Sweep measure this machine -----------
def _every_explorer():
    from lessons_lib import lesson01_broadcast_matmul, lesson02_autograd_memory, lesson03_grouped_linear
    from lessons_lib import lesson04_launch_overhead, lesson05_cuda_graphs, lesson06_data_movement

    return [lesson01_broadcast_matmul.explorer("cpu"), lesson02_autograd_memory.explorer("cpu"),
            lesson03_grouped_linear.explorer("cpu"), lesson04_launch_overhead.explorer("cpu"),
            lesson05_cuda_graphs.explorer("cpu"), lesson06_data_movement.cat_explorer("cpu")]


@pytest.mark.parametrize("index", range(6))
def test_every_record_an_explorer_lists_draws_a_figure_titled_with_its_kind(index):
    ex = _every_explorer()[index]
    recs = ex.records()
    kinds = {r.kind for r in recs if r.is_gpu}
    assert "model" in kinds, "every lesson replays model figures for named GPUs"
    assert {r.meta["name"] for r in recs if r.kind == "model"} >= {"NVIDIA T4", "NVIDIA A100", "NVIDIA H100"}
    for rec in recs:
        figs = ex.replay(rec)
        assert figs, f"{rec.short()} lists but draws nothing"
        titles = [(f._suptitle.get_text() if f._suptitle else "") + " ".join(a.get_title() for a in f.axes)
                  for f in figs]
        assert all(rec.kind in t or "measured" in t for t in titles), titles
        for f in figs:
            plt.close(f)


@pytest.mark.parametrize("index", [1, 2, 3])  # lessons 02, 03, 04: their threads' figures are not per-call times
def test_a_thread_figure_that_is_not_per_call_replays_too(index):
    ex = _every_explorer()[index]
    (rec, *_) = [r for r in ex.records() if r.kind == "reported"]
    figs = ex.replay(rec)
    assert figs and all(f.axes[0].get_xlabel() or f.axes[0].get_ylabel() for f in figs)
    for f in figs:
        plt.close(f)


def test_lesson05_lists_its_threads_reported_figures():
    ex = _every_explorer()[4]
    assert any(r.kind == "reported" for r in ex.records())


def test_a_model_sweep_replays_as_a_sweep():
    ex = _every_explorer()[0]
    rec = next(r for r in ex.records() if r.kind == "model")
    figs = ex.replay(rec)
    assert len(figs) == 1 + len(rec.lesson(ex.lesson.key)["sweeps"])
    assert any("sweep over" in (f._suptitle.get_text() if f._suptitle else f.axes[0].get_title()) for f in figs)
    for f in figs:
        plt.close(f)


def test_the_sliders_follow_the_record_shown():
    ex = _every_explorer()[1]  # lesson 02: the thread's shape, batch 8192
    ex.widget()
    rec = next(name for name, r in ex._recorded.items() if r.kind == "reported")
    ex._following = True
    ex.source_w.value = rec
    ex._following = False
    ex._act(ex._do_replay, background=False)
    assert ex.sliders["batch"].value == 8192
    assert any("sliders now show" in o.get("text", "") for o in ex.out.outputs)


def test_run_after_a_replay_measures_this_machine_and_the_menu_follows():
    ex = Explorer(dataclasses.replace(_toy(), key=KEY01), "cpu", min_run_time=0.01)
    ex.widget()
    model = next(name for name, r in ex._recorded.items() if r.kind == "model")
    ex._following = True
    ex.source_w.value = model
    ex._following = False
    ex._act(ex._do_run, background=False, measures=True)
    assert ex.source_w.value == "this machine"
    first = ex.out.outputs[0]["text"]
    assert first.startswith("Measuring this machine") and model in first
    assert "✓ done" in ex.status.value


def test_a_stopped_sweep_keeps_and_draws_its_finished_points():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    done = []
    sw, fig = ex.sweep("n", [4, 8, 16], on_step=lambda i, n: done.append(i), stop=lambda: bool(done))
    assert sw.stopped and sw.values == [4] and sw.planned == [4, 8, 16]
    assert "STOPPED after 1 of 3" in (fig._suptitle.get_text() if fig._suptitle else fig.axes[0].get_title())
    plt.close(fig)


def test_the_winner_is_said_only_when_the_noise_rule_decides_it(monkeypatch):
    from lessons_lib import noise

    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    run = ex.lesson.run({"n": 8}, "cpu", min_run_time=0.01)
    for t, med in zip(run.timings.values(), (1.0, 1.1)):  # 10% apart, each with a 50% spread
        t.median, t.iqr = med, 0.5 * med
    undecided = noise.Comparison({"mm": [1.0, 3.0, 1.0] * 3 + [1.0], "einsum": [2.0, 1.0, 1.1] * 3 + [2.0]})
    monkeypatch.setattr(noise, "compare_lesson", lambda *a, **k: undecided)
    assert "not decided on this run" in ex.winner_line(run)
    decided = noise.Comparison({"mm": [1.0] * 10, "einsum": [2.0, 2.1, 2.0] * 3 + [2.0]})
    monkeypatch.setattr(noise, "compare_lesson", lambda *a, **k: decided)
    assert ex.winner_line(run).startswith("fastest: mm, 2.")


def test_a_variant_that_runs_another_is_never_named_fastest(monkeypatch):
    # GroupedLinear(auto) runs one of lesson 03's variants: its lead over that one is noise
    import dataclasses

    from lessons_lib import noise

    toy = _toy()
    auto = dataclasses.replace(toy.variants[0], name="auto", runs_another=True)
    ex = Explorer(dataclasses.replace(toy, variants=[*toy.variants, auto]), "cpu", min_run_time=0.01)
    run = ex.lesson.run({"n": 8}, "cpu", min_run_time=0.01)
    for name, med in (("auto", 0.5), ("mm", 1.0), ("einsum", 2.0)):  # auto "fastest" by far
        run.timings[name].median, run.timings[name].iqr = med, 0.01 * med
    asked = []

    def rounds(lesson, params, device, dtype, variants, **kw):
        asked.append(list(variants))
        return noise.Comparison({"mm": [1.0] * 10, "einsum": [2.0] * 10})

    monkeypatch.setattr(noise, "compare_lesson", rounds)
    assert ex.winner_line(run).startswith("fastest: mm, 2.00× ahead of einsum")
    assert asked == [["mm", "einsum"]]  # auto is never among the contenders



# --- issue 34: Stop is prompt and its status honest; a replay never strands the sliders; the pair is named ---------
def _gated_toy(gate, calls):
    def mm(a, b):
        calls.append(1)
        gate.wait(10)
        return a @ b
    return dataclasses.replace(_toy(), variants=[Variant("mm", mm), Variant("einsum", _toy().variants[1].fn)])


def test_stop_is_seen_at_the_next_timed_call_not_after_the_measurement():
    """Lesson 07's sweep stopped 11 s after Stop: the flag was read only between variants."""
    import threading

    calls, gate = [], threading.Event()
    gate.set()
    toy = _gated_toy(gate, calls)
    with pytest.raises(Stopped):
        toy.run({"n": 8}, "cpu", min_run_time=30.0, stop=lambda: len(calls) >= 3)  # 30 s of calls unless it stops
    assert len(calls) == 3


def test_stop_during_the_estimate_ends_it_at_the_next_variant():
    ex = Explorer(_toy(), "cpu", min_run_time=0.01)
    notes = []
    ex._on_phase = lambda phase, detail: notes.append(detail)
    timed = lambda: sum("timing a few calls" in n for n in notes)  # noqa: E731
    with pytest.raises(Stopped):
        ex.sweep("n", [4, 8, 16], stop=lambda: timed() >= 1)
    assert timed() == 1 and not any(n.startswith("measuring") for n in notes)


def test_the_stopping_status_stays_until_the_action_has_ended():
    """'stopping…' was overwritten within 0.6 s by the next phase line, and the sweep went on for 11 s."""
    import threading
    import time

    calls, gate = [], threading.Event()
    ex = Explorer(_gated_toy(gate, calls), "cpu", min_run_time=0.01)
    ex.widget()
    worker = ex._act(ex._do_run)
    deadline = time.time() + 30
    while not ex._phase_text and time.time() < deadline:  # the worker is inside a phase, held at the gate
        time.sleep(0.01)
    ex._request_stop()
    ex._on_phase("estimating", "timing a few calls of einsum (2 of 2)")  # what the next step would say
    ex._show_phase()  # and the clock's tick
    assert "stopping" in ex.status.value and "Stop pressed" in ex.status.value
    gate.set()
    worker.join(30)
    assert "■ stopped" in ex.status.value and "stopping" not in ex.status.value


def test_a_refusal_after_a_replay_puts_the_sliders_back_and_says_so():
    """Lesson 07: replaying 'T4 · model' moved the sliders to a GPU's shape and Run refused there with no way
    back. Refused over the budget at a shape a replay set, the sliders return to the reader's and the line says so."""
    ex = L1.explorer("cpu")
    ex.widget()
    mine = ex._params()
    model = next(name for name, r in ex._recorded.items() if r.kind == "model" and r.is_gpu)
    ex._following = True
    ex.source_w.value = model
    ex._following = False
    ex._act(ex._do_replay, background=False)
    assert ex._params() != mine
    assert any("go back to where they were" in o.get("text", "") for o in ex.out.outputs)
    ex.run_budget = 1e-6
    ex._act(ex._do_run, background=False, measures=True)
    assert "budget" in ex.status.value and "sliders are back where they were" in ex.status.value
    assert ex._params() == mine
    # a slider the reader moves after a replay is theirs: a refusal leaves it
    ex.source_w.value = model
    ex._act(ex._do_replay, background=False)
    name = next(iter(ex.sliders))
    ex.sliders[name].value = mine[name]
    moved = ex._params()
    ex._act(ex._do_run, background=False, measures=True)
    assert "sliders are back" not in ex.status.value and ex._params() == moved


def test_a_no_winner_sentence_names_the_two_variants():
    """'fastest: no winner … 1.07×' did not say between which two (03's explorer's 'not decided' line did)."""
    from lessons_lib.explorer_verdict import _say

    class NoWinner:
        decided = True

        def say(self, template, tie=None, **extra):
            return "no winner on this run: the rounds put it at 1.07×"

    assert _say(NoWinner(), "+ loop", "+ saved", " (10 paired rounds)").startswith("+ loop against + saved: no winner")


def test_a_sweep_in_a_notebook_leaves_a_line_of_text_not_a_widget(monkeypatch):
    """04 after a reload: tqdm.auto's closed widget showed 'Error displaying widget: model not found'."""
    import IPython
    import IPython.display

    shown = []

    class Handle:
        def update(self, obj, raw=False):
            shown.append((obj, raw))

    def display(obj, raw=False, display_id=None):
        shown.append((obj, raw))
        return Handle()

    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"kernel": object()})())
    monkeypatch.setattr(IPython.display, "display", display)
    _toy().sweep("n", [4, 8], device="cpu", min_run_time=0.01)
    assert shown and all(raw and set(obj) == {"text/plain"} for obj, raw in shown)
    assert shown[-1][0]["text/plain"].startswith("sweeping n: 2 of 2 points measured in")
