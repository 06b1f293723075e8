"""Unit tests of the toolkit modules that every lesson shares."""
import json
import time

import matplotlib.pyplot as plt
import pytest
import torch

from lessons_lib import device, plots, results, roofline, timing, trace
from lessons_lib.grading import Verdict
from lessons_lib.lesson import Lesson, Param, Variant, crossover
from lessons_lib.widgets import Explorer, default_sweep_values


# --- device --------------------------------------------------------------------------------
def test_describe_names_the_machine():
    info = device.describe("cpu")
    assert info.kind == "cpu"
    assert info.torch == torch.__version__
    assert info.threads >= 1
    assert info.date.count("-") == 2
    assert info.slug()
    assert "/" not in info.slug()
    assert torch.__version__ in info.line()


def test_pick_refuses_cuda_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="no usable CUDA"):
        device.pick("cuda")


def test_check_fits_refuses_with_a_sentence():
    device.check_fits(1024, "cpu")
    with pytest.raises(device.DoesNotFit, match="Make a dimension smaller"):
        device.check_fits(2**60, "cpu", what="a huge tensor")


def test_oom_guard_turns_oom_into_does_not_fit_and_keeps_working():
    with pytest.raises(device.DoesNotFit, match="freed"):
        with device.oom_guard("cpu"):
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
    with pytest.raises(RuntimeError, match="unrelated"):  # other errors pass through untouched
        with device.oom_guard("cpu"):
            raise RuntimeError("unrelated failure")
    assert (torch.ones(3) * 2).sum().item() == 6  # and torch still works afterwards


def test_dtype_and_compile_problems_are_sentences_or_none():
    assert device.dtype_problem(torch.float32, "cpu") is None
    problem = device.compile_problem()
    assert problem is None or problem.endswith(".")


# --- timing --------------------------------------------------------------------------------
def test_measure_reports_the_median_of_a_known_duration():
    t = timing.measure(lambda: time.sleep(0.004), label="sleep", min_run_time=0.1)
    assert 0.004 <= t.median < 0.0065
    assert len(t.samples) >= timing.MIN_SAMPLES
    assert t.iqr >= 0
    assert "thread" in t.method


def test_measure_rotates_inputs_and_flushes_cache():
    seen = []
    bufs = [(torch.full((4,), float(i)),) for i in range(3)]
    timing.measure(lambda b: seen.append(b[0].item()), rotate=bufs, min_run_time=0.01, warmup=0)
    assert set(seen) == {0.0, 1.0, 2.0}
    t = timing.measure(torch.sum, torch.ones(1000), flush_cache=True, min_run_time=0.01)
    assert t.calls_per_sample == 1
    assert "flushed" in t.method


def test_wrong_timers_are_labelled_wrong():
    x = torch.ones(64, 64)
    for t in (timing.wrong_no_sync(torch.mm, x, x, repeats=3), timing.wrong_first_call(torch.mm, x, x),
              timing.wrong_single_run(torch.mm, x, x), timing.wrong_mean_with_cold_start(torch.mm, x, x, repeats=3),
              timing.wrong_one_thread(torch.mm, x, x, min_run_time=0.01)):
        assert t.method.startswith("WRONG")
        assert t.median > 0
    assert "1 thread)" in timing.wrong_one_thread(torch.mm, x, x, min_run_time=0.01).method


def test_fmt_time_and_table():
    assert timing.fmt_time(0.0123) == "12.3 ms"
    assert timing.fmt_time(2.5e-6) == "2.5 µs"
    a = timing.Timing("a", 2e-3, 1e-4, [2e-3], 1, "m", "cpu")
    b = timing.Timing("b", 1e-3, 1e-4, [1e-3], 1, "m", "cpu")
    assert "2.00× vs a" in timing.table([a, b], baseline="a")


# --- trace ---------------------------------------------------------------------------------
def test_trace_counts_views_copies_and_gemms_on_meta():
    a, b = trace.on_meta(torch.empty(4, 8, 16), torch.empty(16, 32))
    t = trace.trace_ops(lambda a, b: (a.transpose(0, 1).contiguous() @ b).sum(), a, b)
    assert [op.name for op in t.copies] == ["clone"]
    assert t.copies[0].alloc_bytes == 4 * 8 * 16 * 4
    (g,) = t.gemms
    assert g.gemm == (1, 32, 32, 16)
    assert t.flops == 2 * 32 * 32 * 16
    assert all(op.alloc_bytes == 0 for op in t.ops if op.is_view)


def test_footprint_counts_an_expanded_view_once():
    w = torch.ones(3, 5)
    assert trace.footprint_bytes(w.expand(100, 3, 5)) == 15 * 4
    assert trace.footprint_bytes(w.t()) == 15 * 4


def test_trace_table_is_deterministic():
    x = torch.ones(2, 3)
    assert trace.trace_ops(torch.exp, x).table() == trace.trace_ops(torch.exp, x).table()
    assert "exp" in trace.trace_ops(torch.exp, x).table()


def test_kernels_is_none_off_gpu():
    assert trace.kernels(torch.exp, torch.ones(3)) is None


# --- roofline ------------------------------------------------------------------------------
def test_floor_is_the_largest_bound():
    p = roofline.Peaks(flops=1e12, bandwidth=1e9, launch=1e-5, source="test")
    assert p.floor(roofline.Work(flops=10**12, bytes=10, launches=1)) == pytest.approx(1.0)
    assert p.regime(roofline.Work(flops=1, bytes=10**9 * 3, launches=1)) == "memory"
    assert p.regime(roofline.Work(flops=1, bytes=1, launches=1000)) == "overhead"


def test_datasheet_prefers_the_longest_match():
    assert "PCIe" in roofline.datasheet("NVIDIA H100 PCIe", torch.float32).source
    assert roofline.datasheet("Tesla T4", torch.float16).flops == pytest.approx(65e12)
    assert roofline.datasheet("Some CPU", torch.float32) is None


def test_measured_cpu_peaks_are_plausible():
    p = roofline.measure_peaks("cpu")
    assert 1e8 < p.flops < 1e14
    assert 1e8 < p.bandwidth < 1e13
    assert p.launch > 0  # per-op overhead, CPU too


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


def test_lesson_check_correct_flags_a_wrong_variant():
    toy = _toy()
    assert all(r[4] for r in toy.check_correct([{"n": 5}, {"n": 8}], seed=1))
    toy.variants.append(Variant("wrong", lambda a, b: a @ b + 1e-3))
    report = toy.correctness_report(toy.check_correct([{"n": 5}], seed=1))
    assert report.startswith("✗")
    assert "wrong" in report


def test_lesson_check_refuses_bad_input_before_allocating(monkeypatch):
    toy = _toy()
    monkeypatch.setattr(toy, "make_inputs", lambda *a: pytest.fail("allocated"))
    for bad, msg in (({"n": 0}, "between"), ({"n": 2.5}, "whole number"), ({"m": 3}, "Unknown"),
                     ({"n": 1 << 20}, "needs about")):
        with pytest.raises(ValueError, match=msg):
            toy.run(bad, "cpu")


def test_crossover():
    assert crossover([1, 2, 4, 8], [1, 2, 3, 9], [2, 3, 4, 5]) == 8
    assert crossover([1, 2], [1, 1], [2, 2]) is None


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


# --- results -------------------------------------------------------------------------------
def test_results_round_trip_and_keep_other_lessons(tmp_path):
    info = device.describe("cpu")
    results.save(info, {"a": {"x": 1}}, tmp_path)
    path = results.save(info, {"b": {"y": 2}}, tmp_path)
    data = json.loads(path.read_text())
    assert data["lessons"] == {"a": {"x": 1}, "b": {"y": 2}}
    for key in ("name", "torch", "date", "kind"):
        assert data["meta"][key]
    (path.parent / "broken.json").write_text("{not json")
    with pytest.warns(UserWarning, match="broken.json"):
        assert len(results.load_all(tmp_path)) == 1


def test_describe_recorded_is_honest_when_empty(tmp_path):
    assert "No recorded results" in results.describe_recorded("nothing", tmp_path)


def test_committed_reference_files_name_their_hardware():
    for rec in results.load_all():
        for key in ("name", "kind", "torch", "date"):
            assert rec.meta.get(key), f"{rec.path.name} lacks {key}"


# --- plots and grading ------------------------------------------------------------------------
def test_plots_label_their_axes():
    t = [timing.Timing("a", 2e-3, 1e-4, [2e-3, 2.1e-3], 1, "m", "cpu")]
    for fig in (plots.bars(t, {"a": 1e-3}), plots.samples(t), plots.machines({"cpu": {"a": 1e-3}, "gpu": {"a": 1e-5}})):
        ax = fig.axes[0]
        assert "(" in (ax.get_xlabel() + ax.get_ylabel())  # a unit in parentheses
        plt.close(fig)


def test_verdict():
    v = Verdict("x")
    v.check("one", True)
    v.skip("gpu", "no CUDA")
    assert v.passed
    assert "✓ one" in str(v)
    assert "– gpu" in str(v)
    v.check("two", False, "why")
    assert not v.passed
    assert "✗ two (why)" in str(v)
    assert not Verdict("empty").passed


def test_a_verdict_on_every_machine_drops_only_the_gpu_lines():
    v = Verdict("x")
    v.check("correct", True)
    v.on_gpu("fast enough", False, "0.4×")
    assert not v.passed
    portable = v.on_every_machine()
    assert portable.passed and [n for n, _ok, _d in portable.checks] == ["correct"]
    assert len(v.checks) == 2  # the original keeps its [GPU] line


def test_an_old_torch_gets_a_clear_message(monkeypatch):
    import sys

    import lessons_lib

    monkeypatch.setitem(sys.modules, "torch.utils._python_dispatch", None)  # as if torch lacked it
    with pytest.raises(ImportError, match="needs PyTorch 2.9 or newer"):
        lessons_lib._check_torch()


def test_measure_refuses_an_empty_rotation():
    with pytest.raises(ValueError, match="rotate"):
        timing.measure(torch.add, rotate=[])


def test_flushed_measurement_of_a_tiny_op_is_capped():
    # a 1-element op used to loop tens of thousands of cache flushes
    t = timing.measure(torch.neg, torch.ones(1), flush_cache=True, min_run_time=10.0)
    assert len(t.samples) <= timing.MAX_FLUSHED_CALLS


def test_noisy_timings_say_so():
    t = timing.Timing("x", 1.0, 0.5, [0.8, 1.0, 1.3], 1, "test", "cpu")
    assert "rerun" in t.noise_note()


def test_bf16_is_refused_on_a_gpu_without_bf16_hardware(monkeypatch):
    # is_bf16_supported() counts emulation by default: True on a T4 (compute capability 7.5)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert "no bfloat16 hardware" in device.dtype_problem(torch.bfloat16, torch.device("cuda"))


def test_call_for_tensor_turns_wrong_returns_into_one_line():
    from lessons_lib.grading import call_for_tensor

    out, problem = call_for_tensor(lambda x: x * 2, torch.ones(2, 3), shape=(2, 3))
    assert problem is None
    assert torch.equal(out, torch.full((2, 3), 2.0))
    _, problem = call_for_tensor(lambda x: x.tolist(), torch.ones(2, 3), shape=(2, 3))
    assert problem == "your function returned list, not a tensor"
    _, problem = call_for_tensor(lambda x: x.t(), torch.ones(2, 3), shape=(2, 3), shape_name="(B, N)")
    assert problem == "output shape (3, 2), expected (B, N) = (2, 3)"
