"""graphs.py: graph_check on a catalogue of functions known to be safe or unsafe to capture, and the
capture helpers (for real on a GPU; under the simulated GPU in CI; refused with a sentence on a CPU)."""
import pytest
import torch

from lessons_lib import graph_optim, graphs
from lessons_lib.graphs import graph_check
from lessons_lib.lesson05_cuda_graphs import catalogue, exercise, variants

CUDA = torch.cuda.is_available()
SIMULATED = bool(getattr(torch.cuda, "_course_simulated", None))


def test_the_catalogue_has_at_least_15_entries_safe_and_unsafe():
    verdicts = [e.verdict for e in catalogue.CATALOGUE]
    assert len(verdicts) >= 15
    assert verdicts.count("safe") >= 5 and verdicts.count("fails") >= 5 and verdicts.count("frozen") >= 2


@pytest.mark.parametrize("entry", catalogue.CATALOGUE, ids=[e.name for e in catalogue.CATALOGUE])
def test_graph_check_gets_every_catalogue_verdict_right_on_cpu(entry):
    report = catalogue.check_entry(entry, "cpu")
    assert report.verdict == entry.expected_report, report.table()
    assert set(entry.kinds) <= set(report.kinds), report.table()
    if entry.verdict == "safe":
        assert report.hazards == [] and (report.safe or not entry.eager_on_cpu), report.table()


def _copy(t):
    """A copy of an input for the eager side of a comparison: a leaf like the original, with its gradient
    (a plain clone of a parameter is not a leaf and has no .grad)."""
    return graphs._static_copy(t) if isinstance(t, torch.Tensor) else t


def _eager(entry, inputs):
    """What test_gpu_capture_confirms_graph_checks_verdict compares a replay with: the entry's function, eager,
    on copies of the inputs."""
    return entry.fn(*(_copy(t) for t in inputs))


@pytest.mark.parametrize("entry", [e for e in catalogue.CATALOGUE if e.verdict == "safe" and e.eager_on_cpu],
                         ids=[e.name for e in catalogue.CATALOGUE if e.verdict == "safe" and e.eager_on_cpu])
def test_every_safe_entrys_eager_side_runs_on_cpu_as_the_gpu_test_calls_it(entry):
    # the GPU test's eager side once cloned a parameter into a non-leaf without .grad: a TypeError on the H200
    out = _eager(entry, entry.inputs(torch.device("cpu")))
    assert all(torch.isfinite(t).all() for t in _tuple(out))


def test_every_catalogue_entry_names_its_source():
    assert all(e.source for e in catalogue.CATALOGUE)


def test_a_0_dim_host_constant_is_frozen_not_a_failure():
    # CUDA passes a 0-dim CPU operand to the kernel by value (TensorIterator's CPU scalar): it captures.
    report = graph_check(lambda x: x * torch.tensor(2.0), torch.ones(3))
    assert report.verdict == "frozen" and report.kinds == ["frozen host tensor"]
    on_meta = graph_check(lambda x: x * torch.tensor(2.0), torch.ones(3, device="meta"))
    assert on_meta.verdict == "frozen"


def test_a_tensor_made_on_the_host_then_moved_is_a_copy_even_where_the_move_is_a_no_op():
    fn = variants.noise_from_host
    report = graph_check(fn, *catalogue._xy("cpu"))  # on a CPU run .to(x.device) does nothing...
    assert report.verdict == "fails" and report.kinds == ["host↔device copy"]  # ...on a GPU it is a pageable copy
    assert "randn" in report.hazards[0].what
    assert graph_check(variants.noise_on_device, *catalogue._xy("cpu")).safe  # made with device=: no copy


def test_a_number_from_pythons_random_is_frozen():
    report = graph_check(variants.noise_scale_from_random, *catalogue._xy("cpu"))
    assert report.kinds == ["frozen Python value"] and "random.random()" in report.hazards[0].what


def test_a_cpu_learning_rate_tensor_is_frozen_when_the_other_inputs_are_on_the_device():
    p = torch.ones(4, device="meta")
    assert graph_check(lambda p, lr: p - lr * p, p, torch.tensor(0.1)).kinds == ["frozen host tensor"]
    # on a CPU run a 0-dim argument could live on either side: not flagged, and listed among the blind spots
    report = graph_check(lambda p, lr: p - lr * p, torch.ones(4), torch.tensor(0.1))
    assert report.safe and "0-dim tensor arguments" in report.summary()


def test_fused_attentions_rng_state_on_the_host_is_not_a_frozen_tensor():
    # The H200 (2026-11-26) printed "frozen host tensor: a 0-dim CPU tensor used by
    # aten._scaled_dot_product_efficient_attention_backward" for lesson 07's fixed step, whose real capture then
    # matched eager exactly: eager, the forward makes its dropout seed and offset on the host; under capture on the
    # device (attention.cu, Note [Seed and Offset Device]). The same call with a real 0-dim host operand is frozen.
    q, k, v = (torch.empty(2, 2, 8, 16, device="meta", requires_grad=True) for _ in range(3))

    def step(q, k, v, seed, offset):
        out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
        return torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            out, q, k, v, None, out, lse, seed, offset, 0.0, [True, True, True, False], False)

    assert graph_check(step, q, k, v, torch.tensor(0), torch.tensor(0)).safe
    scaled = graph_check(lambda q, k, v, s, o: step(q * s, k, v, s, o), q, k, v, torch.tensor(2.0), torch.tensor(0))
    assert scaled.kinds == ["frozen host tensor"] and "aten.mul" in scaled.hazards[0].what


def test_the_backward_of_a_boolean_index_is_a_sync_not_a_data_dependent_shape():
    # index_put with a bool mask writes a tensor of fixed shape, but turns the mask into indices with nonzero
    x, w, b, y = exercise.exercise_inputs(7, 3)
    kinds = {h.what: h.kind for h in graph_check(exercise.exercise_starter, x, w, b, y).hazards}
    assert kinds["aten.index (bool mask)"] == "data-dependent shape"
    assert kinds["aten.index_put (bool mask)"] == "mask to indices"


def test_every_verdict_prints_what_graph_check_cannot_see():
    for fn in (variants.mlp, variants.log_item, variants.scale_by_float):
        inputs = (catalogue._xy("cpu")[0], 0.1) if fn is variants.scale_by_float else catalogue._xy("cpu")
        text = str(graph_check(fn, *inputs))
        assert "what graph_check cannot see" in text and "dispatcher" in text
    assert str(graph_check(variants.mlp, *catalogue._xy("cpu"))).startswith("✓ no hazard seen")


def test_the_catalogue_table_labels_the_expected_verdict_and_matches_it():
    text = str(catalogue.catalogue_table())
    assert "expected (source)" in text and "as expected" in text and "agrees" not in text
    assert "✗" not in text


@pytest.mark.parametrize("entry", catalogue.CATALOGUE, ids=[e.name for e in catalogue.CATALOGUE])
def test_graph_check_gets_every_catalogue_verdict_right_on_meta_too(entry):
    """On meta the inputs stand where a GPU's would: host tensors are told apart by device, not by origin."""
    report = catalogue.check_entry(entry, "meta")
    assert report.verdict == entry.expected_report, report.table()
    assert set(entry.kinds) <= set(report.kinds), report.table()


def test_a_hazard_names_the_users_line_of_code():
    report = graph_check(variants.log_item, *catalogue._xy("cpu"))
    assert [(h.kind, h.where) for h in report.hazards] == [("host sync", "LOSSES.append(loss.item())")]


def test_on_meta_a_value_read_stops_the_function_but_its_hazard_is_kept():
    x, w = (t.to("meta") for t in catalogue._xy("cpu"))
    report = graph_check(variants.log_item, x, w)
    assert report.verdict == "fails" and "meta" in report.error


def test_safe_code_is_safe_on_meta_too():
    x, w = (t.to("meta") for t in catalogue._xy("cpu"))
    assert graph_check(variants.mlp, x, w).safe


def test_a_copy_between_devices_is_found_on_meta():
    report = graph_check(lambda x: x.to("cpu") * 2, torch.ones(3, device="meta"))
    assert report.kinds == ["host↔device copy"]


def test_the_same_shapes_and_path_on_another_call_are_safe():
    x, w = catalogue._xy("cpu")
    assert graph_check(variants.mlp, x, w, also=[(torch.randn(8, 8), torch.randn(8))]).safe


def test_what_the_function_prints_is_not_shown(capsys):
    graph_check(variants.print_loss, *catalogue._xy("cpu"))
    assert capsys.readouterr().out == ""


def test_graph_check_leaves_synchronize_and_optimizer_hooks_as_they_were():
    from torch.optim import optimizer

    before_sync = torch.cuda.synchronize
    before_hooks = len(optimizer._global_optimizer_pre_hooks), len(optimizer._global_optimizer_post_hooks)
    graph_check(variants.device_sync, *catalogue._xy("cpu"))
    graph_check(variants.adam_step, *catalogue._sgd_inputs("cpu"))
    assert torch.cuda.synchronize is before_sync
    assert (len(optimizer._global_optimizer_pre_hooks), len(optimizer._global_optimizer_post_hooks)) == before_hooks


def test_an_optimizer_built_with_capturable_is_not_flagged_for_it():
    # capturable=True needs its state on a GPU to step; the check reads the flag before the step runs
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    opt = torch.optim.Adam([p], lr=torch.tensor(0.1), capturable=True)
    report = graph_check(lambda: opt.step())
    assert "optimizer" not in report.kinds and "frozen Python value" not in report.kinds


def _one_param(device="cpu"):
    p = torch.nn.Parameter(torch.ones(4, device=device))
    p.grad = torch.ones(4, device=device)
    return p


def test_a_tensor_lr_with_sgd_without_fused_is_a_failing_capture_named_once():
    # foreach / for-loop SGD pass alpha=-lr: a tensor lr is read on the host (a sync on the device)
    for options in ({}, {"foreach": False}):
        opt = torch.optim.SGD([_one_param()], lr=torch.tensor(0.1), **options)
        report = graph_check(lambda: opt.step())
        assert report.verdict == "fails" and report.kinds == ["optimizer lr"], report.table()
        assert "fused=True" in report.hazards[0].fix and "alpha=-lr" in report.hazards[0].fix


def test_a_tensor_lr_with_fused_sgd_or_capturable_adam_is_not_flagged():
    opt = torch.optim.SGD([_one_param()], lr=torch.tensor(0.1), fused=True)
    assert graph_check(lambda: opt.step()).safe
    adam = torch.optim.Adam([_one_param()], lr=torch.tensor(0.1), capturable=True)  # steps only on a GPU
    assert graph_check(lambda: adam.step()).hazards == []


def test_the_advice_for_a_frozen_float_lr_fits_the_optimizer():
    sgd = torch.optim.SGD([_one_param()], lr=0.1, momentum=0.9, foreach=True)  # what lesson 07 captures
    (h,) = graph_check(lambda: sgd.step()).hazards
    assert h.kind == "frozen Python value" and "fused=True" in h.fix and "alpha=-lr" in h.fix
    adam = torch.optim.Adam([_one_param()], lr=0.1, capturable=True)
    assert [h.fix for h in graph_check(lambda: adam.step()).hazards if h.kind == "frozen Python value"] == \
        [graph_optim.lr_advice(adam)]
    assert "capturable=True" in graph_optim.lr_advice(adam) and "fused" not in graph_optim.lr_advice(adam)
    adagrad = torch.optim.Adagrad([_one_param()], lr=0.1)  # no capturable option, and its fused kernel takes a float
    assert "keep it fixed" in graph_optim.lr_advice(adagrad)


def test_a_cpu_lr_tensor_beside_device_parameters_is_frozen_with_the_optimizers_advice():
    # meta stands where a GPU's parameters would: the CPU lr is read at capture (fused SGD: lr.item() in its kernel)
    opt = torch.optim.SGD([_one_param("meta")], lr=0.1, fused=True)
    opt.param_groups[0]["lr"] = torch.tensor(0.1)
    hazards = graph_check(lambda: opt.step()).hazards
    assert [h.kind for h in hazards] == ["frozen host tensor"] and "device=" in hazards[0].fix


def test_an_adam_step_without_capturable_is_one_optimizer_hazard_not_also_a_host_sync():
    adam = torch.optim.Adam([_one_param()], lr=torch.tensor(0.1))
    kinds = graph_check(lambda: adam.step()).kinds
    assert kinds == ["optimizer"], kinds  # its step count's .item() is that hazard


def test_the_report_says_what_to_do():
    report = graph_check(variants.positives_mask, *catalogue._xy("cpu"))
    assert "torch.where" in report.table() and "✗" in report.table()


@pytest.mark.skipif(CUDA, reason="the CPU path")
def test_capture_without_cuda_is_refused_with_a_sentence():
    assert "No CUDA GPU" in graphs.no_graphs_reason()
    with pytest.raises(ValueError, match="No CUDA GPU"):
        graphs.capture(variants.mlp, *catalogue._xy("cpu"))
    assert graphs.try_capture(variants.mlp, *catalogue._xy("cpu"))[0] is None
    assert "no CUDA graphs" in graphs.reduce_overhead_problem("cpu")


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_capture_replays_into_the_same_output_tensor():
    x = torch.zeros(4, device="cuda")
    cap = graphs.capture(lambda t: t * 2 + 1, x)
    first = cap.replay(torch.ones(4, device="cuda"))
    kept = first.clone()
    second = cap.replay(torch.full((4,), 10.0, device="cuda"))
    assert second is first  # the kept reference now holds the second replay's values
    assert kept.cpu().tolist() == [3.0] * 4 and first.cpu().tolist() == [21.0] * 4


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_a_failed_capture_is_explained_with_its_hazard_and_cuda_still_works():
    cap, problem = graphs.try_capture(variants.log_item, *catalogue._xy("cuda"))
    assert cap is None and "host sync" in problem and "loss.item()" in problem
    assert (torch.ones(2, device="cuda") * 2).sum().item() == 4.0


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_a_replay_refuses_another_shape():
    cap = graphs.capture(variants.mlp, *catalogue._xy("cuda"))
    with pytest.raises(ValueError, match="static shapes"):
        cap.replay(torch.randn(16, 8, device="cuda"), torch.randn(8, device="cuda"))


# --- a failed capture leaves the process as it found it ----------------------------------------------
# On the H200 (torch 2.11) lesson 05 crashed at the first torch.randn after a failed capture of .item():
# "Offset increment outside graph capture encountered unexpectedly". tests/simgpu models what CUDAGraph.cpp
# leaves behind (the generator's capture flag, the pool still allocating, the side stream current).


def _process_state():
    """The current stream, and under the simulated GPU its bookkeeping: captures under way, the generator flag."""
    state = {"stream": torch.cuda.current_stream()}
    if SIMULATED:
        from tests.simgpu import tensors as sim

        state.update(underway=list(sim.ALLOCATOR.captures_underway), generator=sim.generator_capturing[0])
    return state


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_a_failed_capture_leaves_the_stream_the_pool_and_the_generator_as_they_were():
    before, inputs = _process_state(), catalogue._xy("cuda")
    torch.cuda.empty_cache()
    reserved = torch.cuda.memory_reserved()
    cap, problem = graphs.try_capture(variants.log_item, *inputs)
    assert cap is None and _process_state() == before
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() <= reserved  # the failed capture's private pool is released
    torch.randn(4, device="cuda")  # raised "Offset increment outside graph capture" on the H200
    assert "not permitted" in problem  # the op's own error, not capture_end's "previous error during capture"
    cap = graphs.capture(variants.noise_on_device, *catalogue._xy("cuda"))  # and a later capture still works
    assert not torch.equal(cap.replay(*catalogue._xy("cuda")).clone(), cap.replay(*catalogue._xy("cuda")))


@pytest.mark.skipif(not SIMULATED, reason="the simulated GPU's model of a failed capture")
def test_the_simulated_gpu_reproduces_the_h200_crash_and_the_public_recovery_undoes_it():
    stream, pool, graph = torch.cuda.current_stream(), torch.cuda.graph_pool_handle(), torch.cuda.CUDAGraph()
    inputs = catalogue._xy("cuda")  # made inside, their pageable copy would fail first (and cleanly) on a GPU
    with pytest.raises(RuntimeError, match="previous error during capture"):
        with torch.cuda.graph(graph, pool=pool):
            variants.log_item(*inputs)
    assert torch.cuda.current_stream() is not stream  # torch.cuda.graph.__exit__ raised before restoring it
    with pytest.raises(RuntimeError, match="Offset increment outside graph capture"):
        torch.randn(4, device="cuda")
    done = graphs.recover_from_failed_capture(stream, torch.cuda.graph.default_capture_stream, pool, graph)
    assert len(done) == 3 and "private pool" in done[1]
    assert _process_state() == {"stream": stream, "underway": [], "generator": False}
    torch.randn(4, device="cuda")


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_a_failed_captures_empty_graph_warning_stays_quiet_and_other_warnings_pass(monkeypatch):
    # On the H200 every capture that failed before CUDA saw a kernel (a pageable copy, an optimizer's health check)
    # printed "The CUDA Graph is empty" from capture_end: the failure's echo. A capture that works keeps its warnings.
    import warnings

    end = torch.cuda.CUDAGraph.capture_end

    def warn_then_end(self):
        warnings.warn("The CUDA Graph is empty. This usually means that the graph was attempted to be captured on "
                      "wrong device or stream.")
        return end(self)

    def refused(x, w):  # fails as Copy.cu's check does: under capture only, before CUDA sees anything
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU "
                               "tensor is pinned.")
        return x @ w

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", warn_then_end)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cap, problem = graphs.try_capture(refused, *catalogue._xy("cuda"))
        assert cap is None and "Cannot copy" in problem and not seen
        graphs.capture(variants.mlp, *catalogue._xy("cuda"))
    assert [str(w.message)[:23] for w in seen] == ["The CUDA Graph is empty"]


@pytest.mark.skipif(not CUDA, reason="needs CUDA (a GPU, or the simulated one)")
def test_the_private_pool_is_measured_from_an_emptied_cache():
    # torch.cuda.graph empties the cache on entry: read before it, 64 MiB cached elsewhere came out as -64 MiB
    # (lesson 05 printed "private pool -24.0 MiB" on the H200)
    held = torch.empty(16 * 2**20, device="cuda")
    del held
    cap = graphs.capture(lambda t: t * 2 + 1, torch.zeros(4, device="cuda"))
    assert 0 <= cap.pool_bytes <= 2 * 2**20  # at most one 2 MiB segment of the small-block pool


class _FakeStream:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_recovery_restores_the_stream_closes_the_pool_and_clears_the_generator_on_cpu(monkeypatch):
    """The recovery's decisions with torch.cuda replaced by fakes (no GPU, no simulation)."""
    calls, current = [], [_FakeStream("side")]

    class Graph:
        def capture_begin(self, *a, **k):
            calls.append("capture_begin")

        def capture_end(self):
            calls.append("capture_end")

        def reset(self):
            calls.append("reset")

    for name, fn in {"current_stream": lambda *a: current[0], "set_stream": lambda s: current.__setitem__(0, s),
                     "stream": lambda s: s, "is_current_stream_capturing": lambda: False, "CUDAGraph": Graph,
                     "Stream": lambda: _FakeStream("new"), "current_device": lambda: 0,
                     "synchronize": lambda *a: None, "empty_cache": lambda: None}.items():
        monkeypatch.setattr(torch.cuda, name, fn, raising=False)
    ended = []

    def end(device, pool):
        if pool in ended:
            raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
        ended.append(pool)

    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", end, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_releasePool", lambda device, pool: calls.append(f"release {pool}"),
                        raising=False)
    caller = _FakeStream("caller")
    done = graphs.recover_from_failed_capture(caller, _FakeStream("side"), (0, 7), Graph())
    assert current[0] is caller and calls == ["release (0, 7)", "capture_begin", "capture_end", "reset"]
    assert len(done) == 3
    calls.clear()  # capture_end got as far as ending the pool itself: the graph object releases it, not us
    done = graphs.recover_from_failed_capture(caller, None, (0, 7), None)
    assert calls == ["capture_begin", "capture_end", "reset"] and len(done) == 1
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", type("Placeholder", (), {}))  # a CPU build's
    assert not graphs._close_pool((0, 8))


@pytest.mark.gpu
def test_gpu_a_failed_capture_then_random_numbers_on_the_device():
    """The H200's crash, on a real GPU: fail a capture (graphs.try_capture, then torch.cuda.graph by hand and the
    public recovery), then draw random numbers and capture again."""
    stream = torch.cuda.current_stream()
    assert graphs.try_capture(variants.log_item, *catalogue._xy("cuda"))[0] is None
    assert torch.cuda.current_stream() == stream
    torch.randn(4, device="cuda")
    pool, graph, inputs = torch.cuda.graph_pool_handle(), torch.cuda.CUDAGraph(), catalogue._xy("cuda")
    variants.log_item(*inputs)  # warm-up, and inputs made outside: made inside, their pageable copy fails first,
    with pytest.raises(RuntimeError, match="previous error during capture"):  # cleanly (the H200, torch 2.11)
        with torch.cuda.graph(graph, pool=pool):
            variants.log_item(*inputs)
    graphs.recover_from_failed_capture(stream, torch.cuda.graph.default_capture_stream, pool, graph)
    assert torch.cuda.current_stream() == stream
    torch.randn(4, device="cuda")
    cap = graphs.capture(variants.dropout, *catalogue._xy("cuda"))
    assert not torch.equal(cap.replay(*catalogue._xy("cuda")).clone(), cap.replay(*catalogue._xy("cuda")))


@pytest.mark.gpu
def test_gpu_a_device_tensor_lr_reaches_the_replay_with_fused_sgd():
    # the advice graph_check gives for a learning rate that changes (lesson 07 relies on it)
    p = torch.nn.Parameter(torch.ones(8, device="cuda"))
    p.grad = torch.ones(8, device="cuda")
    lr = torch.tensor(0.1, device="cuda")
    opt = torch.optim.SGD([p], lr=lr, fused=True)
    cap = graphs.capture(lambda: opt.step(), copy_inputs=False)
    lr.fill_(0.5)
    before = p.detach().clone()
    cap.replay()
    assert torch.allclose(before - p.detach(), torch.full_like(before, 0.5))


# --- on a real GPU: capture confirms every verdict ---------------------------------------------------


def _close(a, b) -> bool:
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    return all(torch.allclose(x.float(), y.float(), rtol=1e-4, atol=1e-5) for x, y in zip(a, b))


@pytest.mark.gpu
@pytest.mark.parametrize("entry", catalogue.CATALOGUE, ids=[e.name for e in catalogue.CATALOGUE])
def test_gpu_capture_confirms_graph_checks_verdict(entry):
    dev = torch.device("cuda")
    inputs = entry.inputs(dev)
    cap, problem = graphs.try_capture(entry.fn, *inputs)
    if entry.verdict == "fails" and "shape change" not in entry.kinds:
        assert cap is None, f"{entry.name}: capture succeeded, graph_check said it fails"
        assert (torch.ones(1, device=dev) + 1).item() == 2.0  # the CUDA context is still usable
        return
    assert cap is not None, problem
    if "shape change" in entry.kinds:  # a replay cannot take another shape
        with pytest.raises((ValueError, RuntimeError)):
            cap.replay(*entry.also(dev)[0])
    elif "graph-safe RNG" in entry.source:  # each replay draws new numbers
        a = cap.replay(*inputs).clone()
        assert not torch.equal(a, cap.replay(*inputs))
    elif entry.verdict == "safe":
        fresh = entry.inputs(dev)
        eager = _eager(entry, fresh)
        assert _close([t.clone() for t in _tuple(cap.replay(*fresh))], eager)


def _tuple(x):
    return x if isinstance(x, (tuple, list)) else (x,)


@pytest.mark.gpu
def test_gpu_a_python_float_is_frozen_into_the_replay():
    x = torch.randn(8, 8, device="cuda")
    cap = graphs.capture(variants.scale_by_float, x, 0.1)
    assert torch.allclose(cap.replay(x, 0.2), x * 0.1)  # not x * 0.2: the float was captured


@pytest.mark.gpu
def test_gpu_a_changed_float_lr_does_not_reach_the_replay():
    (p,) = catalogue._sgd_inputs("cuda")
    cap = graphs.capture(variants.sgd_step, p)
    static = cap.static_inputs[0]
    variants.sgd_step.state["opt"].param_groups[0]["lr"] = 0.5
    before = static.detach().clone()
    cap.replay(static)
    assert torch.allclose(before - static.detach(), 0.1 * static.grad)  # still lr 0.1


@pytest.mark.gpu
def test_gpu_a_python_counter_branch_is_frozen_into_the_replay():
    x, w = catalogue._xy("cuda")
    cap = graphs.capture(variants.every_other_step, x, w)
    replayed = cap.replay(x, w).clone()
    eager = [variants.every_other_step(x, w) for _ in range(2)]
    assert not all(torch.allclose(replayed, e) for e in eager)


def test_graph_check_leaves_a_compiled_function_compiled():
    # graph_check's op watch (graph_hazards._Watch) is a dispatch mode: compiling.EagerWatch keeps Dynamo from
    # marking the function's code as skipped while it watches
    from .stays_compiled import check

    def step(x):
        return (x.tanh() * 3).sum()

    x = torch.randn(8)
    check(lambda f: graph_check(f, x), step, x)


def test_control_flow_counts_its_ops_in_words():
    def step(x, fast):
        return x.neg() if fast else x.neg().exp()

    report = graph_check(step, torch.randn(4), True, also=[(torch.randn(4), False)])
    assert [h.what for h in report.hazards if h.kind == "control flow"] == ["1 op, then 2 ops"]  # was "1 ops"
