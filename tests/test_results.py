"""Recorded results carry a kind (measured, reported, model) and every place that shows one says it."""
import json

import matplotlib.pyplot as plt
import pytest

from lessons_lib import record, results
from lessons_lib import lesson01_broadcast_matmul as L1
from lessons_lib.widgets import Explorer

KEY01, KEY02 = "01_broadcast_matmul", "02_autograd_memory"


def test_every_committed_file_has_a_kind_and_names_its_hardware_and_source():
    for rec in results.load_all():
        assert rec.kind in results.KINDS, rec.path.name
        for key in ("name", "kind", "torch", "date"):
            assert rec.meta.get(key), f"{rec.path.name} lacks {key}"
        if rec.kind != "measured":
            assert rec.meta.get("source"), rec.path.name


def test_labels_and_short_names_carry_the_kind():
    for rec in results.load_all():
        assert rec.kind.split()[0] in rec.label()
        assert rec.kind in rec.short()


def test_short_names_are_unique():
    shorts = [r.short() for r in results.load_all()]
    assert len(shorts) == len(set(shorts))


def test_a_gpu_source_of_each_kind_exists_for_lesson_01():
    kinds = {r.kind for r in results.for_lesson(KEY01, gpu_only=True)}
    assert {"reported", "model"} <= kinds


def test_for_lesson_filters_by_kind():
    assert all(r.kind == "model" for r in results.for_lesson(KEY01, kinds="model"))
    with pytest.raises(ValueError, match="kind"):
        results.for_lesson(KEY01, kinds=["guessed"])


def test_model_rows_plot_their_floor_and_say_so():
    (t4,) = [r for r in results.for_lesson(KEY01, kinds="model") if "T4" in r.meta["name"]]
    row = t4.lesson(KEY01)["headline"]["variants"]["einsum"]
    assert row["median"] == row["floor"]
    assert "not a measurement" in row["figure"]


def test_reported_seed000_figures_are_the_posted_totals_per_call():
    (kf,) = [r for r in results.for_lesson(KEY01, kinds="reported") if r.meta["torch"] == "1.10.0"]
    rows = kf.lesson(KEY01)["headline"]["variants"]
    assert rows["einsum"]["total_s"] == 0.9353041959984694
    assert rows["einsum"]["median"] == pytest.approx(0.9353041959984694 / 1000)


def test_side_by_side_and_describe_name_each_kind():
    rows = results.side_by_side(KEY01, {"einsum": 1e-3})
    assert any("· model" in k for k in rows)
    assert any("· reported" in k for k in rows)
    text = results.describe_recorded(KEY01)
    assert "not a measurement" in text
    assert "reported:" in text


def test_old_files_with_figures_key_still_have_a_kind(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"meta": {"name": "G", "kind": "cuda", "figures": "model",
                                                          "torch": "t", "date": "d"}, "lessons": {"k": {"a": 1}}}))
    (rec,) = results.for_lesson("k", directory=tmp_path)
    assert rec.kind == "model"


def test_save_file_refuses_a_file_without_a_kind(tmp_path):
    with pytest.raises(ValueError, match="kind_of_figures"):
        results.save_file("x", {"name": "G"}, {}, tmp_path)


def test_the_explorer_replays_model_and_reported_files():
    ex = Explorer(L1.LESSON, "cpu")
    for rec in results.for_lesson(KEY01, gpu_only=True):
        figs = ex.replay(rec)
        assert figs, rec.short()
        for f in figs:
            plt.close(f)


def test_lessons_are_found_not_listed():
    keys = set(record.lesson_modules())
    assert {"01_broadcast_matmul", "02_autograd_memory"} <= keys


def test_model_files_regenerate_with_the_committed_figures(tmp_path):
    # lesson 01's figures only: regenerating every lesson's took 30 s idle, 134 s on a busy machine
    meta, lessons = record.model("T4", {KEY01: record.lesson_modules()[KEY01]})
    (committed,) = [r for r in results.for_lesson(KEY01, kinds="model") if "T4" in r.meta["name"]]
    new = lessons[KEY01]["headline"]["variants"]
    old = committed.lessons[KEY01]["headline"]["variants"]
    assert {n: v["floor"] for n, v in new.items()} == pytest.approx({n: v["floor"] for n, v in old.items()})
    assert meta["kind_of_figures"] == "model"


def test_model_of_an_unknown_gpu_is_refused():
    with pytest.raises(ValueError, match="datasheet"):
        record.model("Some GPU")


def test_recording_one_lesson_keeps_the_targets_of_the_others(tmp_path, monkeypatch, capsys):
    import types

    def fake(key, value):
        return types.SimpleNamespace(
            record=lambda dev, quick=False: {"value": value},
            targets=lambda dev, section: [{"name": key, "value": section["value"], "bar": "<= 1", "ok": True}])

    monkeypatch.setattr(record, "lesson_modules", lambda: {"90_a": fake("90_a", 1.0), "91_b": fake("91_b", 2.0)})
    assert record.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    assert record.main(["--device", "cpu", "--out", str(tmp_path), "--lessons", "91_b"]) == 0
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    assert {t["name"] for t in data["lessons"]["targets"]} == {"90_a", "91_b"}  # 90_a's kept, not dropped
    assert data["lessons"]["90_a"] == {"value": 1.0}
    # how each lesson was recorded (threads, load, what ran beside it) is kept per lesson, like its figures
    assert record.main(["--device", "cpu", "--out", str(tmp_path), "--lessons", "90_a", "--beside", "two loops"]) == 0
    conditions = json.loads(path.read_text())["meta"]["conditions"]
    assert set(conditions) == {"90_a", "91_b"}
    assert conditions["90_a"]["beside"] == "two loops" and conditions["91_b"]["beside"] == ""
    assert conditions["90_a"]["threads"] >= 1 and len(conditions["90_a"]["load_average"]) == 2


# --- python -m lessons_lib.record: every argument checked before the first measurement (issue 28 §5) ---
def _fakes(monkeypatch, calls, **behaviour):
    """Two fake lessons (90_a, 91_b) that note each call; behaviour[key]() runs inside its record()."""
    import types

    def fake(key):
        def rec(dev, quick=False):
            calls.append(key)
            if key in behaviour:
                behaviour[key]()
            return {"value": 1.0}
        return types.SimpleNamespace(record=rec, targets=lambda dev, section: [])

    monkeypatch.setattr(record, "lesson_modules", lambda: {"90_a": fake("90_a"), "91_b": fake("91_b")})


def _refused(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("device", ["mps", "meta", "nonsense", "cuda:7", "cpu:3", "cuda"])
def test_record_refuses_a_device_it_cannot_measure_before_recording(device, tmp_path, monkeypatch, capsys):
    import torch

    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cuda is valid here")
    calls = []
    _fakes(monkeypatch, calls)
    assert record.main(["--device", device, "--out", str(tmp_path)]) == 2
    assert "--device" in _refused(capsys)
    assert calls == [] and not list(tmp_path.glob("*.json"))


def test_record_accepts_cuda_and_cuda_0_where_a_gpu_is_present(tmp_path, monkeypatch):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU, real or simulated (-p tests.simgpu)")
    from torch._utils import _get_device_index

    # torch.cuda.set_device refuses a device without an index ("cuda"); the simulated GPU's stub does not
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: _get_device_index(d, False, False))
    calls = []
    _fakes(monkeypatch, calls)
    for device in ("cuda", "cuda:0"):
        assert record.main(["--device", device, "--out", str(tmp_path), "--lessons", "90_a"]) == 0
    assert calls == ["90_a", "90_a"]


def test_record_refuses_an_unwritable_out_before_recording(tmp_path, monkeypatch, capsys):
    calls = []
    _fakes(monkeypatch, calls)
    (tmp_path / "a-file").write_text("")  # a folder inside a file: unwritable even for root
    assert record.main(["--device", "cpu", "--out", str(tmp_path / "a-file" / "out")]) == 2
    assert "--out" in _refused(capsys) and calls == []


def test_record_refuses_a_broken_results_file_before_recording(tmp_path, monkeypatch, capsys):
    from lessons_lib import device

    calls = []
    _fakes(monkeypatch, calls)
    (tmp_path / f"{device.describe('cpu').slug()}.json").write_text("{cut short")
    assert record.main(["--device", "cpu", "--out", str(tmp_path)]) == 2
    assert "not a recorded-results file" in _refused(capsys) and calls == []


def test_record_refuses_an_unknown_lesson_before_recording_any(tmp_path, monkeypatch, capsys):
    calls = []
    _fakes(monkeypatch, calls)
    assert record.main(["--device", "cpu", "--out", str(tmp_path), "--lessons", "90_a,nosuch"]) == 2
    assert "'nosuch'" in _refused(capsys)
    assert calls == [] and not list(tmp_path.glob("*.json"))
    for empty in ("", " , "):
        assert record.main(["--device", "cpu", "--out", str(tmp_path), "--lessons", empty]) == 2
        _refused(capsys)


def test_record_accepts_spaces_and_empty_names_in_lists(tmp_path, monkeypatch):
    calls = []
    _fakes(monkeypatch, calls)
    assert record.main(["--device", "cpu", "--out", str(tmp_path), "--lessons", "91_b, 90_a,"]) == 0
    assert calls == ["91_b", "90_a"]
    assert record.names(" T4, ,H100,T4,") == ["T4", "H100"]


def test_record_model_list_is_checked_whole_before_writing(tmp_path, monkeypatch, capsys):
    written = []
    monkeypatch.setattr(record, "write_model", lambda gpu, out: written.append(gpu) or tmp_path / f"model-{gpu}.json")
    assert record.main(["--model", "T4,", "--out", str(tmp_path)]) == 0  # the empty name is ignored
    assert written == ["T4"]
    capsys.readouterr()
    for bad in ("T4,nosuch", ",", ""):
        written.clear()
        assert record.main(["--model", bad, "--out", str(tmp_path)]) == 2
        assert "--model" in _refused(capsys) and written == []


def test_record_writes_each_lesson_as_it_finishes(tmp_path, monkeypatch):
    seen = []

    def peek():  # inside 91_b's recording, 90_a is already in the file
        (path,) = tmp_path.glob("*.json")
        seen.append(set(json.loads(path.read_text())["lessons"]))

    _fakes(monkeypatch, [], **{"91_b": peek})
    assert record.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    assert seen == [{"90_a", "targets"}]


def test_record_stops_a_lesson_over_its_cap_and_records_the_others(tmp_path, monkeypatch, capsys):
    import time

    def slow():  # a lesson whose own `except Exception` must not swallow the stop
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                time.sleep(0.01)
            except Exception:
                pass

    calls = []
    _fakes(monkeypatch, calls, **{"90_a": slow})
    t0 = time.monotonic()
    assert record.main(["--device", "cpu", "--quick", "--out", str(tmp_path), "--lesson-timeout", "0.5"]) == 1
    assert time.monotonic() - t0 < 25
    out = capsys.readouterr().out
    assert "90_a: STOPPED" in out and "Not recorded: 90_a (stopped)" in out
    (path,) = tmp_path.glob("*.json")
    assert set(json.loads(path.read_text())["lessons"]) == {"91_b", "targets"} and calls == ["90_a", "91_b"]
    assert record.check_cap(None, quick=True) == record.QUICK_LESSON_CAP and record.check_cap(None, False) is None


def test_record_goes_on_after_a_lesson_that_raises(tmp_path, monkeypatch, capsys):
    def boom():
        raise RuntimeError("a lesson's bug")

    _fakes(monkeypatch, [], **{"90_a": boom})
    assert record.main(["--device", "cpu", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "90_a: FAILED" in out.out and "a lesson's bug" in out.err
    (path,) = tmp_path.glob("*.json")
    assert "91_b" in json.loads(path.read_text())["lessons"]


# --- issue 28 §2/§4: every replayed figure states how it was recorded, in the lesson's order ---------------
def _file(stem):
    (rec,) = [r for r in results.load_all() if r.path.stem == stem]
    return rec


def test_a_recordings_conditions_are_stated_in_words():
    # 07's recorded CPU chart: load 5.6-6.2, two busy loops beside it, 4x this machine's own run, unsaid
    text = _file("amd-epyc").conditions("07_capstone")
    assert "1 thread," in text and "load average 5.6–6.2" in text and "two busy-loop processes" in text
    assert "full run" in text
    gpu = _file("h200").conditions("01_broadcast_matmul")
    assert "16 threads" in gpu and "nothing else running" in gpu and "quick run" in gpu
    assert "nothing was run" in _file("model-t4").conditions("01_broadcast_matmul")


def test_side_by_side_keeps_the_lessons_order_and_carries_the_conditions():
    # the recorded chart sorted 07's stages alphabetically ("+ fused, + gemm, ..., original")
    from lessons_lib import lesson07_capstone as L7
    from lessons_lib.lesson07_capstone.explore import LESSON

    stages = [v.name for v in LESSON.variants]  # original, + gemm, ..., + loop: the waterfall's order
    rows = results.side_by_side(L7.KEY)
    assert rows.order == stages
    for figures in rows.values():
        assert list(figures) == [s for s in stages if s in figures]
    assert "load average 5.6–6.2" in rows.caption and "H200 · measured" in rows.caption
    fig = plt.figure()
    try:
        from lessons_lib import plots

        fig = plots.machines(rows)
        assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == stages
        assert any("two busy-loop processes" in t.get_text() for t in fig.texts)
    finally:
        plt.close("all")


def test_every_replayed_figure_is_captioned_with_its_conditions():
    from lessons_lib import lesson07_capstone as L7

    ex = L7.explorer("cpu")
    rec = next(r for r in ex.records() if r.path.stem == "amd-epyc")
    figs = ex.replay(rec)
    try:
        assert figs and all(any("load average 5.6–6.2" in t.get_text() for t in f.texts) for f in figs)
    finally:
        for f in figs:
            plt.close(f)


@pytest.mark.parametrize("name", ["01", "02", "03", "04", "05", "06 cat", "07"])
def test_the_measured_h200_file_replays_in_every_explorer_or_is_named_missing(name):
    from lessons_lib import lesson01_broadcast_matmul as L1_, lesson02_autograd_memory as L2
    from lessons_lib import lesson03_grouped_linear as L3, lesson04_launch_overhead as L4
    from lessons_lib import lesson05_cuda_graphs as L5, lesson06_data_movement as L6, lesson07_capstone as L7

    make = {"01": L1_.explorer, "02": L2.explorer, "03": L3.explorer, "04": L4.explorer, "05": L5.explorer,
            "06 cat": L6.cat_explorer, "07": L7.explorer}[name]
    ex = make("cpu")
    h200 = [r for r in ex.records() if r.path.stem == "h200"]
    if not h200:  # lesson 03: its recording ran past the cap; the explorer says so
        assert "H200 · measured" in ex.missing_note()
        return
    figs = ex.replay(h200[0])
    try:
        assert figs, "listed but draws nothing"
        title = (figs[0]._suptitle.get_text() if figs[0]._suptitle else "") + figs[0].axes[0].get_title()
        assert "H200 · measured" in title
        assert any("16 threads" in t.get_text() for t in figs[0].texts)
    finally:
        for f in figs:
            plt.close(f)


def test_a_recorded_figure_never_says_rerun():
    from lessons_lib import noise

    undecided = noise.Ratio([0.5, 1.0, 2.0] * 4)
    assert undecided.say("{r}", recorded=True) == ("not decided when recorded: 12 paired rounds put it at 0.5–2× "
                                                   "(99.5% interval), either side of 1")
    assert "rerun" not in undecided.not_decided(recorded=True)
    assert "rerun with more time or on a quieter machine" in undecided.say("{r}")  # a live measurement still says it
    assert noise.Ratio([3.0] * 5).say("{r}", recorded=True) == ("not decided when recorded: 5 paired rounds, and "
                                                               "the noise rule needs 10")
