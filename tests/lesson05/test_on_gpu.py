"""Lesson 05 (CUDA graphs, seed 003): the GPU paths (on_gpu.py): on a CPU each explains itself; under the simulated GPU
the CUDA branches run."""
import pytest
import torch

from lessons_lib.lesson05_cuda_graphs import on_gpu
from .helpers import CUDA, _solution


# --- without a GPU: every GPU-only function explains itself ------------------------------------------
@pytest.mark.skipif(CUDA, reason="the CPU path")
def test_gpu_only_functions_explain_themselves_on_a_cpu():
    for text in (on_gpu.kept_reference_demo("cpu"), on_gpu.check_graphed(device="cpu"),
                 on_gpu.graphed_callables_ratio(device="cpu"), on_gpu.failed_capture_demo("cpu"),
                 on_gpu.graph_parts(device="cpu")):
        assert "No CUDA GPU" in text
    cmp = on_gpu.compare_on_gpu(device="cpu")
    assert cmp.run is None and "predicted" in str(cmp)
    assert "no CUDA graphs" in on_gpu.reduce_overhead_note("cpu")
    assert [v.name for v in on_gpu.gpu_lesson("cpu").variants] == ["eager"]


def test_old_torch_without_make_graphed_callables_or_reduce_overhead_is_explained(monkeypatch):
    from lessons_lib import graphs

    monkeypatch.setattr(graphs, "has_graphs", lambda: True)
    monkeypatch.delattr(torch.cuda, "make_graphed_callables", raising=False)
    assert "no torch.cuda.make_graphed_callables" in graphs.graphed_callables_problem()
    assert not graphs.has_graphed_callables()
    monkeypatch.delattr(torch.compiler, "cudagraph_mark_step_begin", raising=False)
    assert "no mode='reduce-overhead'" in graphs.reduce_overhead_problem("cuda")


def test_the_reduce_overhead_note_states_the_documented_facts(monkeypatch):
    from lessons_lib import graphs

    monkeypatch.setattr(graphs, "reduce_overhead_problem", lambda _dev: None)
    note = on_gpu.reduce_overhead_note("cpu")
    assert "cudagraph_dynamic_shape_warn_limit" in note and "raises an error" in note
    assert "cudagraph_mark_step_begin" in note


def test_seed_model_bytes_by_hand():
    # width 2, batch 3, layers 1: weights 3·2·(4 + 2) + 3·2·2·2 = 60; activations 6·(2 + 4)·3·2 = 216
    assert on_gpu.seed_model_bytes({"width": 2, "batch": 3, "layers": 1}) == 4 * (2 * 60 + 216)


def test_the_graphed_band_lies_between_one_and_the_whole_step_model(monkeypatch):
    from types import SimpleNamespace

    times = {"Linear": 3e-5, "PseudoLinear": 6e-5}  # a whole-step model where Linear's graph is twice as fast
    monkeypatch.setattr(on_gpu, "gpu_model", lambda p, dev, kind: SimpleNamespace(graphed_s=times[kind]))
    low, high, whole = on_gpu.graphed_band({}, "cuda")
    assert whole == 0.5 and low == 0.5 / on_gpu.LEFTOVER_MARGIN and high == on_gpu.LEFTOVER_MARGIN
    # the H200 (torch 2.11): eager 1.35, make_graphed_callables 0.86, then 1.02 in a second run (paired rounds), inside
    # a band like this one
    assert low <= 0.86 <= high and low <= 1.02 <= high


# --- under the simulated GPU: the CUDA branches run ------------------------------------------------------
@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_the_gpu_lesson_has_a_graph_variant_that_matches_eager():
    assert "CUDA graph" in [v.name for v in on_gpu.gpu_lesson("cuda").variants]
    assert on_gpu.check_graphed({"width": 16, "batch": 4, "layers": 2}, "cuda").count("✓") == 2


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_the_kept_reference_demo_shows_the_overwrite():
    assert "`first is cap.static_outputs`: True" in on_gpu.kept_reference_demo("cuda")


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_the_seed_experiment_refuses_a_shape_that_does_not_fit_before_allocating(monkeypatch):
    from lessons_lib import graphs

    monkeypatch.setattr(graphs, "graphed_callables_problem", lambda: None)
    monkeypatch.setattr(torch, "randn", lambda *a, **k: pytest.fail("allocated"))
    text = on_gpu.graphed_callables_ratio(16384, batch=1 << 20, layers=64, device="cuda")
    assert isinstance(text, str) and "16384" in text


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_a_failed_capture_is_shown_then_cleaned_up(monkeypatch):
    from lessons_lib.lesson05_cuda_graphs import catalogue

    made = catalogue._xy

    def made_outside(device):  # inside, their pageable copy fails first and ends the capture cleanly (the H200 run)
        assert not torch.cuda.is_current_stream_capturing(), "the demo made its inputs inside the capture"
        return made(device)

    monkeypatch.setattr(catalogue, "_xy", made_outside)
    text = on_gpu.failed_capture_demo("cuda")
    assert "operation not permitted" in text and "recover_from_failed_capture" in text
    assert text.count("the one from before") == 1 and text.endswith("torch.randn works")
    assert "if the failure left it there" in text  # the empty capture is said to run, not to have found a flag
    torch.randn(2, device="cuda")


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_the_seed_experiment_teaches_the_accumulate_grad_warning_and_drops_cublas_context_noise(monkeypatch):
    import warnings

    from lessons_lib import graphs

    def experiment(*_a):  # what the H200 printed to stderr in cell 6, and one warning the lesson does not teach
        warnings.warn("Attempting to run cuBLAS, but there was no current CUDA context! Attempting to set the "
                      "primary context...")
        warnings.warn(on_gpu.ACCUMULATE_GRAD_WARNING + " the stream of the node that produced the incoming "
                      "gradient. This may incur unnecessary synchronization and break CUDA graph capture ...")
        warnings.warn("something else")
        return {"params": {}}

    monkeypatch.setattr(graphs, "graphed_callables_problem", lambda: None)
    monkeypatch.setattr(on_gpu, "_seed_experiment", experiment)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = on_gpu.graphed_callables_ratio(16, batch=4, layers=2, device="cuda")
    assert [str(w.message) for w in seen] == ["something else"]
    assert r["warned"] == [on_gpu.ACCUMULATE_GRAD_WARNING + " the stream of the node that produced the incoming "
                           "gradient."]


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_graph_parts_time_the_replay_and_the_input_copies_apart(monkeypatch):
    made, xs = [], []
    make, step = on_gpu.make_inputs, on_gpu.eager_step
    monkeypatch.setattr(on_gpu, "make_inputs", lambda *a: made.append(make(*a)) or made[-1])
    monkeypatch.setattr(on_gpu, "eager_step", lambda *t: xs.append(t[0]) or step(*t))
    parts = on_gpu.graph_parts({"width": 16, "batch": 4, "layers": 2}, "cuda", max_time=1.0)
    # eager is timed on leaves of its own: on the graph's static leaves, whose AccumulateGrad nodes the graph's output
    # keeps alive from the capture stream, each gradient would wait across streams (the H200 warned of it here)
    static, timed = made[0][0], xs[4:]  # three warm-up calls and the capture, then the timed eager calls
    assert all(x is static for x in xs[:4]) and timed and all(x is made[2][0] for x in timed)
    assert set(parts.comparison.names) == {"eager", "graph replay", "graph replay + copies in"}
    assert parts.copy_bytes == 2 * 4 * (2 * 4 * 16 + 2 * 2 * 16) and 0 < parts.copies_model < 1
    said = str(parts)  # each line the measured ratio, or (on a busy machine) the noise rule's not-decided sentence
    assert "replay alone" in said or said.startswith("not decided on this run"), said
    assert "predicts" in said.splitlines()[1]  # the copies' model, whatever the rounds decided


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_the_notebooks_cells_after_the_failed_capture_run_on_cuda(one_thread):
    """What cells 33-42 call on a GPU, in the notebook's order and in one process (the H200 run stopped at cell 35:
    nothing after it has run on a GPU), at a small shape: each prints, none raises, and CUDA still works after."""
    import matplotlib.pyplot as plt

    from lessons_lib.lesson05_cuda_graphs import exercise, explore

    assert on_gpu.failed_capture_demo("cuda").endswith("torch.randn works")
    cmp = on_gpu.compare_on_gpu({"width": 16, "batch": 4, "layers": 2}, "cuda", min_run_time=0.01)
    text = str(cmp)
    assert cmp.run is not None and "measured: eager takes" in text and "replay alone" in text
    assert on_gpu.reduce_overhead_note("cuda")
    ex = explore.explorer("cuda")
    bundle = ex._repr_mimebundle_()  # the widget and its picture of recorded results, as the cell displays it
    assert "text/plain" in bundle and "cuda" in ex.device_w.options
    plt.close("all")
    for step in (exercise.exercise_starter, _solution):
        verdict = str(exercise.check_exercise(step))
        assert "[GPU]" in verdict and "Traceback" not in verdict
    assert (torch.randn(4, device="cuda") * 0).sum().item() == 0.0


def test_the_reduce_overhead_compile_is_announced_before_it_starts(monkeypatch, capsys):
    # issue 34 §1: no cold compile is silent. The compile itself needs a GPU and Triton: stand-ins here, on the CPU.
    import torch

    from lessons_lib.lesson05_cuda_graphs import on_gpu

    printed_at_first_call = []

    def compile_stand_in(fn, **kwargs):
        def first(*args):
            printed_at_first_call.append(capsys.readouterr().out)
            return fn(*args)
        return first

    monkeypatch.setattr(on_gpu.graphs, "reduce_overhead_problem", lambda dev: None)
    monkeypatch.setattr(on_gpu.torch, "compile", compile_stand_in)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)
    x, w, b = (torch.randn(*s, requires_grad=True) for s in ((4, 8), (8, 8), (8,)))
    g = torch.randn(4, 8)
    on_gpu._prepare_reduce_overhead(None, x, w, b, g)
    assert printed_at_first_call[0].startswith("Compiling pseudo_linear (torch.compile, backend \"inductor, mode=")
