"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003) and the compiling toolkit module."""
import dataclasses
import re

import matplotlib.figure
import matplotlib.pyplot as plt
import pytest
import torch

from lessons_lib import compiling, noise, roofline, timing, trace
from lessons_lib import lesson04_launch_overhead as L
from lessons_lib.lesson import Variant

SMALL = {"width": 64, "batch": 32, "layers": 2}


def _boom(*args, **kwargs):
    raise AssertionError("allocated inputs for a shape that should have been refused first")


@pytest.fixture
def no_allocation(monkeypatch):
    for lesson in (L.LESSON, L.TRAIN_LESSON):
        monkeypatch.setattr(lesson, "make_inputs", _boom)
    for name in ("randn", "rand", "zeros", "ones"):
        monkeypatch.setattr(torch, name, _boom)


# --- correctness: every variant computes PseudoLinear, forward and training step ----------------------
def test_every_variant_matches_float64_forward_at_default_and_odd_shapes():
    rows = L.LESSON.check_correct(seed=0)
    assert len(rows) == 4 * len(L.LESSON.variants)
    assert [r[0] for r in rows if not r[4]] == []


def test_every_variant_matches_float64_in_a_training_step():
    rows = L.TRAIN_LESSON.check_correct(seed=0)
    assert {r[0] for r in rows} == {"Linear", "PseudoLinear", "addcmul", "mul + add_"}
    assert [r[0] for r in rows if not r[4]] == []


def test_the_training_check_compares_weight_gradients():
    def wrong_weight_grad(x, W, w, b):  # right output, but w gets no gradient through the product
        for l in range(w.shape[0]):
            x = x * w[l].detach() + b[l] + 0 * w[l]
        return x

    bad = dataclasses.replace(L.TRAIN_LESSON, variants=[*L.TRAIN_LESSON.variants, Variant("wrong", wrong_weight_grad)])
    rows = bad.check_correct([SMALL], seed=0)
    assert {r[0] for r in rows if not r[4]} == {"wrong"}


# --- look inside: traces on meta ---------------------------------------------------------------------
def test_linear_runs_one_schoolbook_gemm_per_layer():
    t = L.LESSON.traces(L.THREAD_SHAPE)["Linear"]
    assert [(op.name, op.gemm) for op in t.gemms] == [("addmm", (1, 32768, 160, 160))] * 4
    assert t.flops == 4 * 2 * 32768 * 160 * 160
    assert "addmm: (32768 × 160) @ (160 × 160), 1,677,721,600 FLOPs" in L.gemm_evidence()


@pytest.mark.parametrize("name, per_layer", [("PseudoLinear", 2), ("addcmul", 1), ("Linear", 1)])
def test_launches_per_layer(name, per_layer):
    work = L.LESSON.work({"width": 160, "batch": 256, "layers": 4})
    assert work[name].launches == 4 * per_layer


def test_pseudolinear_moves_twice_the_bytes_of_addcmul():
    work = L.LESSON.work({"width": 160, "batch": 256, "layers": 4})
    act = 256 * 160 * 4
    assert work["PseudoLinear"].bytes >= 4 * 4 * act  # mul and add each read and write an activation
    assert work["addcmul"].bytes < 0.6 * work["PseudoLinear"].bytes


def test_work_comparison_says_pseudolinear_saves_flops_not_bytes():
    text = L.work_comparison(L.THREAD_SHAPE)
    assert "PseudoLinear: 0.00 GFLOP" in text
    assert "fewer bytes than" not in text
    cpu, gpu = text.splitlines()[1:3]
    assert "about as many bytes as Linear (1.00×)" in cpu  # addmm's bias copy is real on a CPU
    assert "more bytes than Linear (2.00×)" in gpu  # cuBLASLt's epilogue: no copy on CUDA


def test_linear_moves_half_of_pseudolinears_bytes_on_a_gpu_and_as_many_on_a_cpu():
    w = L.LESSON.work(L.THREAD_SHAPE)
    lin, pseudo = w["Linear"], w["PseudoLinear"]
    B, N, layers, e = 32768, 160, 4, 4
    assert lin.lt_bias_bytes == layers * 2 * B * N * e  # the bias copy: written, then read back
    assert pseudo.lt_bias_bytes == 0
    assert pseudo.bytes_on(True) / lin.bytes_on(True) == pytest.approx(2.0, rel=0.01)
    assert pseudo.bytes_on(False) / lin.bytes_on(False) == pytest.approx(1.0, rel=0.01)
    # a GPU's peaks apply it: Linear's memory term on a datasheet GPU counts no copy
    pk = roofline.datasheet("T4", torch.float32, tf32=False)
    assert pk.cuda and pk.terms(lin)["memory"] == pytest.approx(lin.bytes_on(True) / pk.bandwidth)


def test_the_bytes_bound_on_fusion_is_two_per_layer():
    for layers in (1, 4):
        eager, fused = L.fusion_bytes({"width": 256, "batch": 1024, "layers": layers})
        assert eager / fused == pytest.approx(2 * layers, rel=0.02)


def test_mistakes_table_shows_random_data_relu_and_the_extra_add():
    rows = [line.split() for line in L.mistakes_table().splitlines()[2:]]
    table = {(r[0], r[1]): r[2:] for r in rows}
    ops, random, relu, add, _mul = table[("posted", "PseudoLinear")]
    assert random == "1"
    assert relu == "8"
    assert int(add) > int(table[("fixed", "PseudoLinear")][3])
    assert table[("fixed", "PseudoLinear")][1:3] == ["0", "0"]
    assert int(ops) > int(table[("fixed", "PseudoLinear")][0])


def test_in_place_saves_memory_not_launches():
    lines = L.by_hand_table({"width": 160, "batch": 256, "layers": 4}).splitlines()[2:]
    table = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line.strip()) for line in lines)}
    assert table["PseudoLinear"][0] == table["mul + add_"][0] == "8"  # same launches...
    assert table["mul + add_"][1] == "640.0 KiB"
    assert table["PseudoLinear"][1] == "1.2 MiB"
    assert table["addcmul"][0] == "4"


def test_autograd_refuses_to_overwrite_a_saved_tensor_by_its_version_counter():
    text = L.inplace_on_a_saved_tensor()
    assert "RuntimeError" in text
    assert "modified by an inplace operation" in text  # the saved-tensor check, not the leaf rule
    assert "leaf" not in text


def test_module_and_functional_linear_are_compared_like_with_like():
    cases = {label: args for label, _fn, args in L.overhead_cases(torch.device("cpu"))}
    (row, weight, bias), = [a for label, a in cases.items() if label.startswith("F.linear")]
    assert weight.requires_grad and bias.requires_grad  # as the module's own parameters: autograd records both
    assert isinstance(weight, torch.nn.Parameter) and isinstance(bias, torch.nn.Parameter)


def test_foreach_sgd_is_one_op_for_many_tensors():
    ops = L.optimizer_ops(n_tensors=16)
    assert ops["for loop"] == ["add_"] * 16
    assert ops["foreach"] == ["_foreach_add_"]


# --- the regime classifier (the toolkit's Peaks.regime) on shapes where it is not in doubt -----------
@pytest.fixture(scope="module")
def cpu_peaks():
    return L.peaks("cpu")


def test_peaks_have_a_measured_per_op_overhead_on_cpu(cpu_peaks):
    assert 1e-8 < cpu_peaks.launch < 1e-3


@pytest.mark.parametrize("fn, shapes, regime", [
    (torch.add, [(1,), (1,)], "overhead"),
    (torch.add, [(16 * 2**20,), (16 * 2**20,)], "memory"),  # 64 MiB each
    (torch.mm, [(2048, 2048), (2048, 2048)], "compute"),
])
def test_classifier_verdicts(cpu_peaks, fn, shapes, regime):
    work = roofline.Work.of(fn, *(torch.empty(s, device="meta") for s in shapes))
    assert cpu_peaks.regime(work) == regime
    terms = L.regime_terms(work, cpu_peaks)
    assert max(terms, key=terms.get) == regime
    assert max(terms.values()) == pytest.approx(cpu_peaks.floor(work))


def test_regimes_at_the_three_recorded_cpu_shapes(cpu_peaks):
    tiny, big_elementwise, big_gemm = L.REGIME_SHAPES["cpu"]
    assert set(L.regimes(tiny, "cpu").values()) == {"overhead"}
    assert L.regimes(big_elementwise, "cpu")["PseudoLinear"] == "memory"
    assert L.regimes(big_gemm, "cpu")["Linear"] == "compute"


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
        L.explorer("cpu").run(**kwargs)


def test_a_too_big_shape_is_refused_with_its_estimate(no_allocation):
    with pytest.raises(ValueError, match=r"needs about [\d.]+ GiB"):
        L.TRAIN_LESSON.check({"width": 16384, "batch": 1 << 20, "layers": 2}, "cpu", torch.float32)


def test_explorer_names_each_variants_regime_in_words(one_thread):
    ex = L.explorer("cpu")
    ex.min_run_time = 0.01
    run, fig = ex.run(width=8, batch=4, layers=1)
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert set(run.timings) == {"Linear", "PseudoLinear", "addcmul"}
        assert ex.regimes(run) == L.regimes(run.params, "cpu")  # the toolkit's classifier, same verdicts
        line = ex.regime_line(run)
        for name, regime in ex.regimes(run).items():
            assert f"{name} {regime}-bound" in line
        assert "overhead-bound" in ex.regime_table(run)
    finally:
        plt.close("all")


def test_explorer_offers_linear_with_tf32_and_its_trace_is_marked():
    ex = L.explorer("cpu", tf32=True)
    assert "Linear (TF32)" in [v.name for v in ex.lesson.variants]
    assert "Linear (TF32)" not in [v.name for v in L.explorer("cpu", tf32=False).lesson.variants]
    assert L.has_tf32("cpu") is False
    before = torch.backends.cuda.matmul.allow_tf32
    work = L.with_tf32(L.LESSON).work(L.THREAD_SHAPE)
    assert torch.backends.cuda.matmul.allow_tf32 == before  # the variant restores PyTorch's setting
    assert work["Linear (TF32)"].tf32_flops == work["Linear"].flops > 0
    assert work["Linear"].tf32_flops == 0  # PyTorch's default: no TF32 for matmuls
    a100 = roofline.datasheet("A100", torch.float32, tf32=False)
    assert a100.terms(work["Linear (TF32)"])["compute"] == pytest.approx(work["Linear"].flops / 156e12)
    assert a100.terms(work["Linear"])["compute"] == pytest.approx(work["Linear"].flops / 19.5e12)


def test_machines_at_one_shape_labels_kind_and_shape():
    from lessons_lib.lesson import Run

    p = {"width": 160, "batch": 256, "layers": 4}
    work = L.LESSON.work(p)
    run = Run(L.LESSON.key, p, "float32", "cpu",
              {n: timing.Timing(n, 1e-4, 0.0, [1e-4], 1, "", "cpu") for n in work}, work)
    rows = L.machines_at(run)
    assert any("measured median" in label for label in rows)
    floors = [label for label in rows if "model floor" in label]
    assert {label.split(" ·")[0] for label in floors} == {"T4", "A100", "H100"}
    assert {label for label in floors if "TF32" in label} == {"A100 · model floor, Linear in TF32",
                                                              "H100 · model floor, Linear in TF32"}
    h100 = roofline.datasheet("H100", torch.float32, tf32=False)
    assert rows["H100 · model floor"]["Linear"] == pytest.approx(h100.floor(work["Linear"]))
    fig = L.machines_figure(run)
    title = fig.axes[0].get_title()
    assert "width 160, batch 256, layers 4" in title and "not a median" in title  # one shape, named
    plt.close(fig)


def test_asymptote_table_is_linear_in_width():
    text = L.asymptote_table(gpus=("A100",), widths=[8192, 32768])
    lines = text.splitlines()[2:]
    assert [ln.split()[1] for ln in lines] == ["fp32", "TF32"]
    assert "326.6× (326.6×)" in lines[0] and "40.8× (40.8×)" in lines[1]


def test_fusion_causes_measures_three_variants_and_counts_page_faults(one_thread):
    def stand_in(x, W, w, b):  # a one-op-per-layer stand-in for the compiled function (no compile here)
        return L.addcmul(x, W, w, b)

    fc = L.fusion_causes({"width": 8, "batch": 64, "layers": 2}, "cpu", compiled=stand_in, max_time=0.5,
                         min_run_time=0.001)
    assert fc.many.names == ["eager, new outputs", "eager, reused out= buffers", "compiled (one fused kernel)"]
    assert fc.bound == pytest.approx(4, rel=0.2)
    assert all(v is None or v >= 0 for v in fc.faults.values())
    text = str(fc)
    assert "bytes bound" in text and "allocator" in text and "fusion alone" in text
    # the reused-buffer rewrite computes PseudoLinear
    x, W, w, b = L.make_inputs({"width": 8, "batch": 4, "layers": 2}, "cpu", torch.float32)
    out = L.pseudo_linear_reused(x, W, w, b, torch.empty_like(x), torch.empty_like(x))
    torch.testing.assert_close(out, L.pseudo_linear(x, W, w, b))


def test_explorer_counts_a_compiled_forward_as_one_fused_kernel():
    p = {"width": 8, "batch": 4, "layers": 3}
    fused = L.compiled_work(p)["compiled"]
    eager = L.LESSON.work(p)["PseudoLinear"]
    assert (fused.launches, eager.launches) == (1, 6)
    assert fused.bytes < eager.bytes
    ex = L.explorer("cpu", compiled=True)
    assert ex.work_of is L.compiled_work
    assert L.explorer("cpu", compiled=False).work_of is None


# --- compiling: feature detection and the recording backend (no Inductor compile here) --------------
def test_compile_problem_is_a_sentence_or_none():
    why = compiling.problem("cpu")
    assert why is None or why.endswith(".")


def test_no_torch_compile_is_explained(monkeypatch):
    monkeypatch.delattr(torch, "compile")
    assert "has no torch.compile" in compiling.problem("cpu")
    c = compiling.compile_cold(L.pseudo_linear, *L.make_inputs(SMALL, "cpu", torch.float32))
    assert not c.ok
    assert "torch.compile was not run" in str(c)


def test_no_cxx_compiler_is_explained(monkeypatch):
    monkeypatch.setattr(compiling, "_cxx_candidates", lambda: ["no-such-compiler-l04"])
    compiling.cxx_compiler.cache_clear()
    try:
        why = compiling.problem("cpu")
        assert "no working C++ compiler" in why
        assert compiling.problem("cpu", backend="eager") is None  # a recording backend needs none
    finally:
        compiling.cxx_compiler.cache_clear()


def test_a_failing_backend_becomes_a_problem_not_a_traceback():
    def broken(gm, example_inputs):
        raise RuntimeError("backend exploded")

    c = compiling.compile_cold(L.pseudo_linear, *L.make_inputs(SMALL, "cpu", torch.float32), backend=broken)
    assert not c.ok
    assert "backend exploded" in c.problem


def test_prepare_refuses_with_a_sentence_when_it_cannot_compile(monkeypatch):
    monkeypatch.setattr(compiling, "problem", lambda *a, **k: "no compiler here.")
    with pytest.raises(ValueError, match="no compiler here"):
        L._prepare_compiled(L.pseudo_linear, *L.make_inputs(SMALL, "cpu", torch.float32))


def test_compile_and_compare_explains_instead_of_raising(monkeypatch):
    monkeypatch.setattr(compiling, "problem", lambda *a, **k: "no compiler here.")
    out = L.compile_and_compare(SMALL, "cpu")
    assert str(out) == "torch.compile was not run: no compiler here."


def test_recording_backend_sees_one_graph_of_two_ops_a_layer():
    rec = L.fused_graphs({"width": 16, "batch": 8, "layers": 3})
    assert rec.problem is None
    assert rec.breaks == 0
    fwd = rec.of_kind("forward")[0].ops
    assert fwd.count("mul") == 3
    assert fwd.count("add") == 3
    assert rec.of_kind("dynamo")[0].ops.count("mul") == 3


def test_recording_backend_records_the_backward_graph_for_training():
    rec = L.fused_graphs({"width": 16, "batch": 8, "layers": 2}, training=True)
    assert [g.kind for g in rec.graphs] == ["dynamo", "forward", "backward"]
    assert "mul" in rec.of_kind("backward")[0].ops


SAMPLE_CODE = '''
cpp_fused_add_mul_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r\'\'\'
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0)
{
    for(int64_t x0=0; x0<64; x0+=1)
    {
        auto tmp0 = in_ptr0[x0];
        auto tmp1 = tmp0 * tmp0;
        out_ptr0[x0] = tmp1;
        tmp1.store(out_ptr0 + x0);
    }
}
\'\'\')
        extern_kernels.addmm(arg1, arg0, arg2, alpha=1, beta=1, out=buf0)
'''


def test_kernels_reads_generated_and_library_kernels():
    assert compiling.kernels(SAMPLE_CODE) == {"generated": ["cpp_fused_add_mul_0"], "library": ["addmm"]}


def test_kernel_excerpt_keeps_the_arithmetic():
    ex = compiling.kernel_excerpt(SAMPLE_CODE)
    assert ex.splitlines()[0] == "cpp_fused_add_mul_0:"
    assert "tmp1 = tmp0 * tmp0" in ex
    assert "store(" in ex
    assert "async_compile" not in ex


def test_compiled_training_step_is_checked_without_inductor_on_cpu():
    out = L.compiled_training_check({"width": 8, "batch": 4, "layers": 2}, "cpu")
    assert "aot_eager_decomp_partition" in out
    assert "✓ all 2 variants match" in out


def _rounds(**per):
    return noise.Comparison({k.replace("_", " "): v for k, v in per.items()})


def test_summaries_follow_the_numbers_and_the_noise_rule():
    steady = dict(posted_Linear=[2.0] * 3, posted_PseudoLinear=[1.8] * 3, fixed_Linear=[2.0] * 3)
    text = L.reproduce_summary(_rounds(**steady, fixed_PseudoLinear=[0.5] * 3))
    assert "fixed benchmark:  PseudoLinear is 4.00× as fast as Linear" in text
    assert "widened the gap" in text
    assert "less than 10%" in L.reproduce_summary(_rounds(**steady, fixed_PseudoLinear=[1.8] * 3))
    # rounds that disagree: no conclusion, the noise rule's sentence instead
    text = L.reproduce_summary(_rounds(**steady, fixed_PseudoLinear=[0.5, 1.8, 0.2, 3.0, 1.0]))
    assert "not decided on this run" in text and "widened" not in text and "less than 10%" not in text


# --- the exercise checker --------------------------------------------------------------------------
def _checks(v):
    return {name.split(" (")[0]: ok for name, ok, _d in v.checks}


def test_checker_fails_the_starter_on_ops_not_correctness():
    v = L.check_exercise(L.exercise_starter)
    c = _checks(v)
    assert not v.passed
    assert c["output and gradients match float64 at 4 shapes"] is True
    assert c["launches at most 2 ops"] is False


@pytest.mark.parametrize("fn", [
    lambda x, s, b: torch.addcmul(b, x, s).relu_(),
    lambda x, s, b: torch.addcmul(b, x, s).clamp_(min=0),
])
def test_checker_passes_two_op_rewrites(fn):
    v = L.check_exercise(fn).on_every_machine()  # the [GPU] timing line is a claim, not a unit test
    assert v.passed, str(v)


@pytest.mark.parametrize("fn, failing", [
    (lambda x, s, b: torch.relu(x * s - b), "output and gradients match float64 at 4 shapes"),
    (lambda x, s, b: torch.addcmul(b, x, s).relu_() * float("nan"), "output and gradients match float64 at 4 shapes"),
    (lambda x, s, b: x @ s, "returns a tensor of the input's shape"),
    (lambda x, s, b: None, "returns a tensor of the input's shape"),
    (lambda x, s, b: torch.addcmul(b, x, s).relu_().detach(), "output is part of the autograd graph"),
    (lambda x, s, b: x.mul_(s).add_(b).relu_(), "runs forward and backward"),  # in place on a leaf
    (lambda x, s, b: 1 / 0, "runs forward and backward"),
])
def test_checker_turns_wrong_code_into_a_failed_line(fn, failing):
    v = L.check_exercise(fn)
    assert not v.passed, str(v)
    assert _checks(v)[failing] is False, str(v)


def test_checker_stops_a_runaway_function(monkeypatch):
    monkeypatch.setattr(L, "EXERCISE_TIME_LIMIT_S", 0.3)

    def forever(x, s, b):
        while True:
            pass

    v = L.check_exercise(forever)
    assert not v.passed
    assert _checks(v)["finishes"] is False


def test_checker_reference_is_computed_before_the_readers_code_runs():
    def clobbers_then_right(x, s, b):
        with torch.no_grad():
            s.zero_()  # changes the caller's tensor; the reference must not see it
        return torch.addcmul(b, x, s).relu_()

    v = L.check_exercise(clobbers_then_right)
    assert _checks(v)["output and gradients match float64 at 4 shapes"] is False


def test_checker_traces_code_that_reads_values_on_the_cpu():
    def reads_a_value(x, s, b):
        if float(s[0].detach()) < -1e9:  # meta tensors have no values: the trace falls back to the CPU
            s = s.abs()
        return torch.addcmul(b, x, s).relu_()

    v = L.check_exercise(reads_a_value)
    c = _checks(v)
    assert "its op trace can be taken" not in c
    assert c["output and gradients match float64 at 4 shapes"] is True
    assert c["allocates one output"] is True
    assert "_local_scalar_dense" in str(v) and "traced on CPU" in str(v)  # the read is an op (a sync on a GPU)


@pytest.mark.parametrize("fn, failing", [
    (lambda x, s, b: torch.addcmul(b, x, s).relu_().double(), "returns a tensor of the input's dtype"),
    (lambda x, s, b: (x > 0).int(), "returns a tensor of the input's dtype"),
    (lambda x, s, b: (torch.addcmul(b, x, s).relu_(),), "returns a tensor of the input's shape"),
    (lambda x, s, b: torch.relu(x.detach() * s + b), "gradients reach x, scale and bias"),
    (lambda x, s, b: torch.addcmul(b, x, s).relu_() + float("inf"), "output and gradients match float64 at 4 shapes"),
    (None, "runs forward and backward"),  # not even a function
])
def test_checker_turns_garbage_into_a_failed_line(fn, failing):
    v = L.check_exercise(fn)
    assert not v.passed, str(v)
    assert _checks(v)[failing] is False, str(v)


def test_checker_turns_a_trace_failure_into_a_line(monkeypatch):
    monkeypatch.setattr(L, "trace_ops", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no trace today")))
    v = L.check_exercise(lambda x, s, b: torch.addcmul(b, x, s).relu_())
    assert _checks(v)["its op trace can be taken"] is False
    assert "no trace today" in str(v)


# --- every fix against float64, forward and training step --------------------------------------------
def test_every_fix_is_checked_forward_training_and_optimizer():
    text = L.check_fixes("cpu")
    assert text.count("✓") == 3, text
    assert "mul + add_" in text.splitlines()[0]  # the in-place rewrite is checked forward too


def test_foreach_check_fails_a_wrong_optimizer(monkeypatch):
    real = torch.optim.SGD

    def sloppy(params, **kw):  # foreach steps with the wrong learning rate
        return real(params, **{**kw, "lr": kw["lr"] * (1.5 if kw.get("foreach") else 1)})

    monkeypatch.setattr(torch.optim, "SGD", sloppy)
    assert L.foreach_check().startswith("✗")


# --- the thread's figures: read from the recorded reported file --------------------------------------
def test_thread_figures_come_from_the_reported_file():
    from lessons_lib import results

    rec = results.for_lesson(L.LESSON_KEY, kinds="reported")[0]
    rep = L.thread_report()
    assert rep.label == rec.label() and "reported" in rep.label and "not named" in rep.label
    assert [(r["width"], r["iterations"]) for r in rep.runs] == [(160, 400), (1024, 40)]
    tables = rec.lessons[L.LESSON_KEY]["speedups"]["tables"]
    assert {n: list(t.values()) for n, t in rep.tables.items()} == {n: t["speedup"] for n, t in tables.items()}
    assert "graph" in list(rep.tables)[-1]  # the CUDA-graphs table last, as in the thread
    assert not hasattr(L, "THREAD_TABLES") and not hasattr(L, "THREAD_RUNS")  # one copy: the file


def test_reported_table_and_figure_carry_the_files_label():
    label = L.thread_report().label
    assert L.reported_table().splitlines()[0] == label
    assert L.thread_runs_table().splitlines()[0] == label
    assert "1.08×" in L.thread_runs_table()
    fig = L.reported_figure()
    assert label in fig.axes[0].get_title()
    plt.close(fig)


def test_without_the_reported_file_the_tables_say_so(monkeypatch):
    from lessons_lib import results

    monkeypatch.setattr(results, "for_lesson", lambda *a, **k: [])
    assert L.thread_report() is None
    assert "not in lessons_lib/reference" in L.reported_table()
    assert "not in lessons_lib/reference" in L.thread_runs_table()
    plt.close(L.reported_figure())


# --- the Strassen check: Linear's exponent over its compute-bound widths -------------------------------
def _fake_sweep(values, linear_times, peaks_):
    from lessons_lib.lesson import Run, Sweep

    runs = []
    for v, t in zip(values, linear_times):
        p = {"width": v, "batch": 256, "layers": 1}
        work = L.LESSON.work(p)
        runs.append(Run(L.LESSON.key, p, "float32", "cpu",
                        {n: timing.Timing(n, t if n == "Linear" else 1e-6, 0.0, [t], 1, "", "cpu") for n in work},
                        work))
    return Sweep(L.LESSON.key, "width", values, runs)


def test_linear_exponent_reads_the_compute_bound_points():
    pk = roofline.Peaks(flops=1e9, bandwidth=1e12, launch=1e-9, source="test")  # everything compute-bound
    sw = _fake_sweep([64, 128, 256], [1.0, 4.0, 16.0], pk)
    k, lo, hi = L.linear_exponent(sw, pk)
    assert (round(k.median, 6), lo, hi) == (2.0, 64, 256)
    assert k.decided  # no spread in the fake timings
    assert "width^2.00" in L.sweep_summary(sw, pk)
    assert L.linear_exponent(sw, roofline.Peaks(1e18, 1e18, 1.0, "all overhead")) is None


# --- the compiled comparison says which regime each shape is in --------------------------------------
def test_compiled_run_names_the_regimes_and_slower_is_slower():
    def fake(median):
        return timing.Timing("x", median, 0.0, [median], 1, "", "cpu")

    big, small = {"width": 256, "batch": 16384, "layers": 4}, {"width": 16, "batch": 16, "layers": 4}
    cr = L.CompiledRun(compiling.Compiled(fn=print, backend="inductor", cold_s=2.0), big, correct="✓",
                       eager=fake(2.0), fused=fake(1.0), small=(fake(1.0), fake(2.0)), small_params=small,
                       regimes={L._shape(big): ("memory", "memory"), L._shape(small): ("overhead", "overhead")})
    text = str(cr)
    assert "eager PseudoLinear memory-bound" in text
    assert "eager PseudoLinear overhead-bound" in text
    assert "compiled is 2.00× faster" in text
    assert "compiled is 2.00× slower" in text
    assert "ate the gain" in text


# --- every device the machine has (under tests/simgpu, the simulated GPU's CUDA branches too) ----------
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
TINY = {"width": 8, "batch": 4, "layers": 1}


@pytest.mark.parametrize("device", DEVICES)
def test_reproduce_runs_both_benchmarks(device, one_thread):
    cmp = L.reproduce(device, width=8, batch=4, layers=1, min_run_time=0.005, max_time=1.0)
    assert set(cmp.names) == {"posted Linear", "posted PseudoLinear", "fixed Linear", "fixed PseudoLinear"}
    assert len(cmp.rounds["fixed Linear"]) >= noise.MIN_ROUNDS
    assert L.reproduce_summary(cmp).startswith("posted benchmark: ")
    assert "paired rounds" in L.reproduce_table(cmp)


@pytest.mark.parametrize("device", DEVICES)
def test_peaks_know_whether_the_bias_copy_is_real(device):
    pk = L.peaks(device)
    assert pk.cuda == (device == "cuda")
    x, W, w, b = L.make_inputs({"width": 8, "batch": 4, "layers": 1}, device, torch.float32)
    t = trace.trace_ops(L.linear, x, W, w, b)
    (op,) = t.named("addmm")
    if device == "cuda":  # traced on CUDA tensors: cuBLASLt's epilogue, no copy to model
        assert op.inner_copy_bytes == 0 and t.lt_saved_bytes == 0
    else:
        assert op.inner_copy_bytes == 4 * 8 * 4 and op.lt_bias


@pytest.mark.parametrize("device", DEVICES)
def test_explorer_names_regimes_on_each_device(device, one_thread):
    ex = L.explorer(device)
    ex.min_run_time = 0.01
    run, fig = ex.run(**TINY)
    plt.close(fig)
    assert run.device == device
    assert ex.regime_line(run).startswith("regime: Linear ")


@pytest.mark.parametrize("device", DEVICES)
def test_fixes_are_checked_on_each_device(device):
    assert L.check_fixes(device).count("✓") == 3


@pytest.mark.parametrize("device", DEVICES)
def test_gpu_only_evidence_is_none_without_a_gpu_and_present_with_one(device):
    lat, names = L.gpu_launch_latency(device, n=5), L.gpu_kernels(TINY, device)
    if device == "cpu":
        assert lat is None and names is None
    else:
        assert set(lat) == {"issue (host, s per op)", "event span of one op (GPU, s)"}
        if trace.profiler_sees_cuda():
            assert set(names) == {"Linear", "PseudoLinear", "addcmul"}
        else:  # a CPU-only build (the simulated GPU): no kernel names, and no error
            assert names is None


@pytest.mark.parametrize("device", DEVICES)
def test_rate_summary_on_each_device(device, one_thread):
    run = L.LESSON.run({"width": 64, "batch": 64, "layers": 1}, device, variants=["Linear"], min_run_time=0.01)
    text = L.rate_summary(run, L.peaks(device))
    assert "GFLOP/s counted as 2·batch·width² FLOPs" in text
    if device == "cuda" and roofline.datasheet(torch.cuda.get_device_name(), torch.float32):
        assert "datasheet peak" in text


@pytest.mark.parametrize("device", DEVICES)
def test_compile_and_compare_explains_or_runs_on_each_device(device, monkeypatch):
    monkeypatch.setattr(compiling, "problem", lambda *a, **k: "no compiler here.")
    assert str(L.compile_and_compare(SMALL, device)) == "torch.compile was not run: no compiler here."


# --- recorded results ----------------------------------------------------------------------------
def test_record_quick_on_cpu(monkeypatch, one_thread):
    monkeypatch.setattr(L, "WIDTHS_CPU", [8, 16])
    monkeypatch.setattr(L, "BATCHES_CPU", [4, 8])
    monkeypatch.setitem(L.REGIME_SHAPES, "cpu", [{"width": 8, "batch": 8, "layers": 2}])
    for p, v in (("width", 16), ("batch", 16)):
        monkeypatch.setattr(L.LESSON.param(p), "cpu", v)
    out = L.record(torch.device("cpu"), quick=True)
    assert set(out["overhead"]) >= {"1-element add", "nn.Linear(1, 1) module call"}
    assert out["regimes"][0]["variants"]["PseudoLinear"]["regime"] in {"overhead", "memory", "compute"}
    assert out["headline"]["variants"]["Linear"]["floor"] > 0
    assert set(out["sweeps"]) == {"width", "batch"}
    assert "compiled" not in out
    bars = {t["name"]: t for t in L.targets("cpu", out)}
    assert bars["04 per-op overhead, a 1-element add (µs, measured)"]["ok"] is True
    assert bars["04 shapes with every variant's regime recorded"]["ok"] is False  # one shape when quick


def _section(fusion, decided=True):
    r = {"median": fusion, "low": fusion * 0.95, "high": fusion * 1.05, "decided": decided}
    return {"compiled": {"params": {"width": 256, "batch": 65536, "layers": 4}, "bytes_bound": 8.0,
                         "fusion": r, "allocator": dict(r, median=3.0),
                         "faults_per_call": {"eager, new outputs": 131080.0}}}


@pytest.mark.parametrize("fusion, decided, ok", [(2.4, True, True), (0.9, True, False), (11.0, True, False),
                                                 (2.4, False, False)])
def test_targets_hold_fusion_to_the_bytes_bound(fusion, decided, ok):
    bar, alloc = L.targets("cpu", _section(fusion, decided))
    assert bar["ok"] is ok and "bytes bound 8.0×" in bar["name"]
    assert alloc["bar"].startswith("info") and "131,080 minor page faults" in alloc["name"]
    assert L.targets("cuda", _section(fusion))[0]["ok"] is None  # a GPU's bars are claim tests


# --- GPU claims (skipped without CUDA); each bar derived from the roofline --------------------------
@pytest.mark.gpu
def test_gpu_width_160_pseudolinear_is_less_than_2x_faster():
    # Roofline at batch B, width N, fp32 (e = 4 B): Linear is compute-bound, 2·B·N² / F; PseudoLinear
    # memory-bound, 2 ops each reading and writing B·N·e, so 4·B·N·e / BW. Their ratio is
    # N·BW / (2·e·F) = 160·BW / (8·F): 1.6 on an A100 (1.55 TB/s, 19.5 TFLOP/s), 1.0 on an H100 SXM,
    # less with TF32. The bar, 2×, is that prediction with 25 % margin; FLOPs alone would say 160×.
    dev = torch.device("cuda")
    p = {"width": 160, "batch": 32768, "layers": 4}
    run = L.LESSON.run(p, dev, variants=["Linear", "PseudoLinear"], min_run_time=0.5)
    ratio = run.timings["Linear"].median / run.timings["PseudoLinear"].median
    assert ratio < 2, f"PseudoLinear {ratio:.2f}× faster than Linear at width 160"


@pytest.mark.gpu
def test_gpu_compiled_chain_launches_one_kernel_where_eager_launches_four():
    # Two layers of x * w + b: eager launches mul, add, mul, add (4 kernels); Inductor fuses the
    # pointwise chain into one kernel that reads x once and writes the output once.
    dev = torch.device("cuda")
    inputs = L.make_inputs({"width": 1024, "batch": 4096, "layers": 2}, dev, torch.float32)
    eager = trace.kernels(L.pseudo_linear, *inputs)
    c = compiling.compile_cold(L.pseudo_linear, *inputs)
    assert c.ok, c.problem
    fused = trace.kernels(c.fn, *inputs)
    assert len(eager) >= 3, (eager, fused)
    assert len(fused) == 1, (eager, fused)


@pytest.mark.gpu
def test_gpu_pseudolinear_5x_faster_than_linear_at_width_8192():
    # Same roofline as above at N = 8192: 8192·BW / (8·F) is 80 on an A100 in fp32 and about 7 on an
    # H100 even with TF32 (495 TFLOP/s, 3.35 TB/s). The bar, 5×, leaves that worst case 30 % margin.
    dev = torch.device("cuda")
    p = {"width": 8192, "batch": 32768, "layers": 1}
    run = L.LESSON.run(p, dev, variants=["Linear", "PseudoLinear"], min_run_time=0.5)
    ratio = run.timings["Linear"].median / run.timings["PseudoLinear"].median
    assert ratio >= 5, f"PseudoLinear only {ratio:.2f}× faster than Linear at width 8192"


@pytest.mark.gpu
def test_gpu_fusion_gain_is_within_the_bytes_bound():
    # On a GPU the caching allocator reuses its blocks (no page faults per call) and no OpenMP threads
    # wait for each other: what fusion saves is bytes, at most eager's bytes over one fused kernel's
    # (2·layers = 8 at 4 layers, from the traces). Bars: above 2× at a memory-bound shape (64 MiB
    # tensors), and at most the bytes bound with the targets' 25 % margin.
    dev = torch.device("cuda")
    p = L.MEMORY_BOUND["cuda"]
    cr = L.compile_and_compare(p, dev, min_run_time=0.5)
    assert cr.compiled.ok, cr.compiled.problem
    eager_b, fused_b = L.fusion_bytes(cr.params)
    ratio = cr.eager.median / cr.fused.median
    assert 2 < ratio <= L.FUSION_MARGIN * eager_b / fused_b, f"fused {ratio:.2f}× eager, bound {eager_b / fused_b:.1f}×"


@pytest.mark.gpu
def test_gpu_linear_launches_no_bias_copy_kernel():
    # cuBLASLt's bias epilogue (Blas.cpp, addmm_out_cuda_impl): F.linear with a 1-D bias launches the GEMM
    # alone, no elementwise copy of the bias before it.
    dev = torch.device("cuda")
    x, W, w, b = L.make_inputs({"width": 256, "batch": 4096, "layers": 1}, dev, torch.float32)
    names = trace.kernels(L.linear, x, W, w, b)
    if names is None:
        pytest.skip("the profiler cannot see CUDA here")
    assert not [n for n in names if "copy" in n.lower() or "elementwise" in n.lower()], names
