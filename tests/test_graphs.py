"""graphs.py: graph_check on a catalogue of functions known to be safe or unsafe to capture, and the
capture helpers (for real on a GPU; under the simulated GPU in CI; refused with a sentence on a CPU)."""
import pytest
import torch

from lessons_lib import graphs
from lessons_lib.graphs import graph_check
from lessons_lib.lesson05_cuda_graphs import catalogue, exercise, variants

CUDA = torch.cuda.is_available()


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
        assert report.safe and report.hazards == []


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
        eager = entry.fn(*(t.clone() if isinstance(t, torch.Tensor) else t for t in fresh))
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
