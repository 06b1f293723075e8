"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): the explorer (refusals, regimes, TF32,
the compiled variant), record and targets (explore.py)."""
import matplotlib.figure
import matplotlib.pyplot as plt
import pytest
import torch

from lessons_lib import compiling, roofline
from lessons_lib.lesson04_launch_overhead import evidence, explore, lessons
from .helpers import DEVICES, TINY


# --- bad input: refused with a sentence, before allocating ----------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"width": 0}, "between 1 and"),
    ({"width": -4}, "between 1 and"),
    ({"batch": 2.5}, "whole number"),
    ({"layers": 64, "width": 32768}, "Make a dimension smaller"),
    ({"width": 32768, "batch": 1 << 20}, "Make a dimension smaller"),
    ({"dtype": "float64"}, "dtype must be one of"),
])
def test_explorer_refuses_bad_input_before_allocating(no_allocation, kwargs, message):
    with pytest.raises(ValueError, match=message):
        explore.explorer("cpu").run(**kwargs)


def test_a_too_big_shape_is_refused_with_its_estimate(no_allocation):
    with pytest.raises(ValueError, match=r"needs about [\d.]+ GiB"):
        lessons.TRAIN_LESSON.check({"width": 16384, "batch": 1 << 20, "layers": 2}, "cpu", torch.float32)


def test_explorer_names_each_variants_regime_in_words(one_thread):
    ex = explore.explorer("cpu")
    ex.min_run_time = 0.01
    run, fig = ex.run(width=8, batch=4, layers=1)
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert set(run.timings) == {"Linear", "PseudoLinear", "addcmul"}
        assert ex.regimes(run) == evidence.regimes(run.params, "cpu")  # the toolkit's classifier, same verdicts
        line = ex.regime_line(run)
        for name, regime in ex.regimes(run).items():
            assert f"{name} {regime}-bound" in line
        assert "overhead-bound" in ex.regime_table(run)
    finally:
        plt.close("all")


def test_explorer_offers_linear_with_tf32_and_its_trace_is_marked():
    ex = explore.explorer("cpu", tf32=True)
    assert "Linear (TF32)" in [v.name for v in ex.lesson.variants]
    assert "Linear (TF32)" not in [v.name for v in explore.explorer("cpu", tf32=False).lesson.variants]
    assert lessons.has_tf32("cpu") is False
    before = torch.backends.cuda.matmul.allow_tf32
    work = lessons.with_tf32(lessons.LESSON).work(lessons.THREAD_SHAPE)
    assert torch.backends.cuda.matmul.allow_tf32 == before  # the variant restores PyTorch's setting
    assert work["Linear (TF32)"].tf32_flops == work["Linear"].flops > 0
    assert work["Linear"].tf32_flops == 0  # PyTorch's default: no TF32 for matmuls
    a100 = roofline.datasheet("A100", torch.float32, tf32=False)
    assert a100.terms(work["Linear (TF32)"])["compute"] == pytest.approx(work["Linear"].flops / 156e12)
    assert a100.terms(work["Linear"])["compute"] == pytest.approx(work["Linear"].flops / 19.5e12)


def test_explorer_counts_a_compiled_forward_as_one_fused_kernel():
    p = {"width": 8, "batch": 4, "layers": 3}
    fused = lessons.compiled_work(p)["compiled"]
    eager = lessons.LESSON.work(p)["PseudoLinear"]
    assert (fused.launches, eager.launches) == (1, 6)
    assert fused.bytes < eager.bytes
    ex = explore.explorer("cpu", compiled=True)
    assert ex.work_of is lessons.compiled_work
    # its compile is counted before the first run (then what it took here)
    assert ex.lesson.variant("compiled").prepare_budget == compiling.COMPILE_BUDGET_S
    assert ex._prepare_estimate(torch.float32, torch.device("cpu")) == compiling.COMPILE_BUDGET_S
    assert explore.explorer("cpu", compiled=False).work_of is None


@pytest.mark.parametrize("device", DEVICES)
def test_explorer_names_regimes_on_each_device(device, one_thread):
    ex = explore.explorer(device)
    ex.min_run_time = 0.01
    run, fig = ex.run(**TINY)
    plt.close(fig)
    assert run.device == device
    assert ex.regime_line(run).startswith("regime: Linear ")


# --- recorded results ----------------------------------------------------------------------------
def test_record_quick_on_cpu(monkeypatch, one_thread):
    monkeypatch.setattr(explore, "WIDTHS_CPU", [8, 16])
    monkeypatch.setattr(explore, "BATCHES_CPU", [4, 8])
    monkeypatch.setitem(explore.REGIME_SHAPES, "cpu", [{"width": 8, "batch": 8, "layers": 2}])
    for p, v in (("width", 16), ("batch", 16)):
        monkeypatch.setattr(lessons.LESSON.param(p), "cpu", v)
    out = explore.record(torch.device("cpu"), quick=True)
    assert set(out["overhead"]) >= {"1-element add", "nn.Linear(1, 1) module call"}
    assert out["regimes"][0]["variants"]["PseudoLinear"]["regime"] in {"overhead", "memory", "compute"}
    assert out["headline"]["variants"]["Linear"]["floor"] > 0
    assert set(out["sweeps"]) == {"width", "batch"}
    assert "compiled" not in out
    bars = {t["name"]: t for t in explore.targets("cpu", out)}
    assert bars["04 per-op overhead, a 1-element add (µs, measured)"]["ok"] is True
    shapes = bars["04 shapes with every variant's regime recorded"]
    assert shapes["ok"] is None and "quick" in shapes["na"]  # --quick records one shape: n/a (quick), not MISSED
    full = explore.targets("cpu", {**out, "quick": False})
    assert {t["name"]: t for t in full}["04 shapes with every variant's regime recorded"]["ok"] is False


def _section(fusion, decided=True):
    r = {"median": fusion, "low": fusion * 0.95, "high": fusion * 1.05, "decided": decided}
    return {"compiled": {"params": {"width": 256, "batch": 65536, "layers": 4}, "bytes_bound": 8.0,
                         "fusion": r, "allocator": dict(r, median=3.0),
                         "faults_per_call": {"eager, new outputs": 131080.0}}}


@pytest.mark.parametrize("fusion, decided, ok", [(2.4, True, True), (0.9, True, False), (11.0, True, False),
                                                 (2.4, False, False)])
def test_targets_hold_fusion_to_the_bytes_bound(fusion, decided, ok):
    bar, alloc = explore.targets("cpu", _section(fusion, decided))
    assert bar["ok"] is ok and "bytes bound 8.0×" in bar["name"]
    assert alloc["bar"].startswith("info") and "131,080 minor page faults" in alloc["name"]
    assert explore.targets("cuda", _section(fusion))[0]["ok"] is None  # a GPU's bars are claim tests


def test_record_prints_a_target_the_quick_run_cannot_reach_as_n_a(tmp_path, monkeypatch, capsys):
    # record --quick on the H200 printed "shapes with every variant's regime recorded: 1 (bar >= 3: MISSED)".
    import types

    from lessons_lib import record

    section = {"quick": True, "regimes": [{"variants": {"Linear": {"regime": "compute"}}}]}
    fake = types.SimpleNamespace(record=lambda dev, quick=False: section,
                                 targets=lambda dev, s: explore.targets(dev, s))
    monkeypatch.setattr(record, "lesson_modules", lambda: {"04_launch_overhead": fake})
    assert record.main(["--device", "cpu", "--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "regime recorded: 1 (bar >= 3: n/a (quick: --quick records one shape))" in out, out
    assert "MISSED" not in out
