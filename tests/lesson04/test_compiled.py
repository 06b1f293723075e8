"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): torch.compile: feature detection, the
recording backend, kernels in generated code, the compiled comparison and training step (compiled.py and the compiling
toolkit module)."""
import pytest
import torch

from lessons_lib import compiling, timing, trace
from lessons_lib.lesson04_launch_overhead import compiled, lessons, variants
from .helpers import DEVICES, SMALL


# --- compiling: feature detection and the recording backend (no Inductor compile here) --------------
def test_compile_problem_is_a_sentence_or_none():
    why = compiling.problem("cpu")
    assert why is None or why.endswith(".")


def test_no_torch_compile_is_explained(monkeypatch):
    monkeypatch.delattr(torch, "compile")
    assert "has no torch.compile" in compiling.problem("cpu")
    c = compiling.compile_cold(variants.pseudo_linear, *lessons.make_inputs(SMALL, "cpu", torch.float32))
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

    c = compiling.compile_cold(variants.pseudo_linear, *lessons.make_inputs(SMALL, "cpu", torch.float32),
                               backend=broken)
    assert not c.ok
    assert "backend exploded" in c.problem


def test_prepare_refuses_with_a_sentence_when_it_cannot_compile(monkeypatch):
    monkeypatch.setattr(compiling, "problem", lambda *a, **k: "no compiler here.")
    with pytest.raises(ValueError, match="no compiler here"):
        lessons._prepare_compiled(variants.pseudo_linear, *lessons.make_inputs(SMALL, "cpu", torch.float32))


def test_compile_and_compare_explains_instead_of_raising(monkeypatch):
    monkeypatch.setattr(compiling, "problem", lambda *a, **k: "no compiler here.")
    out = compiled.compile_and_compare(SMALL, "cpu")
    assert str(out) == "torch.compile was not run: no compiler here."


def test_recording_backend_sees_one_graph_of_two_ops_a_layer():
    rec = compiled.fused_graphs({"width": 16, "batch": 8, "layers": 3})
    assert rec.problem is None
    assert rec.breaks == 0
    fwd = rec.of_kind("forward")[0].ops
    assert fwd.count("mul") == 3
    assert fwd.count("add") == 3
    assert rec.of_kind("dynamo")[0].ops.count("mul") == 3


def test_recording_backend_records_the_backward_graph_for_training():
    rec = compiled.fused_graphs({"width": 16, "batch": 8, "layers": 2}, training=True)
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
    out = compiled.compiled_training_check({"width": 8, "batch": 4, "layers": 2}, "cpu")
    assert "aot_eager_decomp_partition" in out
    assert "✓ all 2 variants match" in out


# --- the compiled comparison says which regime each shape is in --------------------------------------
def test_compiled_run_names_the_regimes_and_slower_is_slower():
    def fake(median):
        return timing.Timing("x", median, 0.0, [median], 1, "", "cpu")

    big, small = {"width": 256, "batch": 16384, "layers": 4}, {"width": 16, "batch": 16, "layers": 4}
    cr = compiled.CompiledRun(compiling.Compiled(fn=print, backend="inductor", cold_s=2.0), big, correct="✓",
                              eager=fake(2.0), fused=fake(1.0), small=(fake(1.0), fake(2.0)), small_params=small,
                              regimes={lessons._shape(big): ("memory", "memory"),
                                       lessons._shape(small): ("overhead", "overhead")})
    text = str(cr)
    assert "eager PseudoLinear memory-bound" in text
    assert "eager PseudoLinear overhead-bound" in text
    assert "compiled is 2.00× faster" in text
    assert "compiled is 2.00× slower" in text
    assert "ate the gain" in text


@pytest.mark.parametrize("device", DEVICES)
def test_compile_and_compare_explains_or_runs_on_each_device(device, monkeypatch):
    monkeypatch.setattr(compiling, "problem", lambda *a, **k: "no compiler here.")
    assert str(compiled.compile_and_compare(SMALL, device)) == "torch.compile was not run: no compiler here."


# --- a trace must not turn a compiled function back into eager code ---------------------------------
def _counting_backend():
    calls = []

    def backend(gm, example_inputs):
        def run(*args):
            calls.append(1)
            return gm.forward(*args)
        return run

    return backend, calls


def test_a_trace_on_meta_leaves_a_compiled_function_compiled():
    # Dynamo skips a frame called under a dispatch mode and keeps that skip for the code object: before the
    # fix, one trace_ops of the compiled function (on meta) made every later call run eagerly (the H200's
    # "fused 1.00x eager").
    backend, calls = _counting_backend()
    fn = torch.compile(variants.pseudo_linear, backend=backend, dynamic=True)
    inputs = lessons.make_inputs(SMALL, "cpu", torch.float32)
    fn(*inputs)
    trace.trace_ops(fn, *trace.on_meta(*inputs))
    before = len(calls)
    fn(*inputs)
    assert len(calls) == before + 1, "the compiled graph no longer runs after a trace"


@pytest.mark.parametrize("device", DEVICES)
def test_compile_and_compare_times_the_compiled_graph(device, monkeypatch):
    # On CUDA, Lesson.check_correct traces each variant on meta (may_use_tf32: GEMMs and convolutions differ in
    # TF32 by default), the compiled one too: the timed "compiled" side must still run the compiled graph.
    backend, calls = _counting_backend()
    real = compiling.compile_cold
    monkeypatch.setattr(compiling, "compile_cold",
                        lambda fn, *inputs, **kw: real(fn, *inputs, backend=backend, dynamic=True))
    cr = compiled.compile_and_compare(SMALL, device, min_run_time=0.01)
    assert cr.compiled.ok, cr.compiled.problem
    timed = cr.fused.calls_per_sample * len(cr.fused.samples)
    assert len(calls) >= timed, f"{len(calls)} compiled calls for {timed} timed ones"
