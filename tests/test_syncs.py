"""The sync detector (lessons_lib/syncs.py): host syncs and copies between devices, with the user's line."""
import pytest
import torch

from lessons_lib.syncs import HostSync, SyncReport, Transfer, copy_blocks, cuda_syncs, host_syncs, syncs

SIMULATED = getattr(torch.cuda, "_course_simulated", None)


def _whats(report):
    return [e.what for e in report.syncs]


@pytest.mark.parametrize("code, what, line", [
    (lambda x: x.sum().item(), "Tensor.item()", "lambda x: x.sum().item()"),
    (lambda x: x.cpu(), "Tensor.cpu()", "lambda x: x.cpu()"),
    (lambda x: x.tolist(), "Tensor.tolist()", "lambda x: x.tolist()"),
    (lambda x: x.numpy(), "Tensor.numpy()", "lambda x: x.numpy()"),
    (lambda x: print(x), "Tensor.__repr__()", "lambda x: print(x)"),
    (lambda x: 1 if x.sum() else 0, "aten._local_scalar_dense", "lambda x: 1 if x.sum() else 0"),
    (lambda x: x[x > 0], "aten.index (bool mask)", "lambda x: x[x > 0]"),
    (lambda x: torch.nonzero(x), "aten.nonzero", "lambda x: torch.nonzero(x)"),
    (lambda x: torch.masked_select(x, x > 0), "aten.masked_select", "lambda x: torch.masked_select(x, x > 0)"),
    (lambda x: float(x.sum()), "aten._local_scalar_dense", "lambda x: float(x.sum())"),
])
def test_each_kind_of_hidden_sync_is_one_entry_with_its_line(code, what, line, capsys):
    report = syncs(code, torch.arange(-2.0, 3.0))
    assert _whats(report) == [what]
    assert line in report.syncs[0].where  # the lambda's own line of source


def test_a_masked_assignment_of_a_tensor_is_a_sync_too():
    def fn(x):
        x[x < 0] = torch.zeros(2)
        return x

    assert _whats(syncs(fn, torch.arange(-2.0, 3.0))) == ["aten.index_put_ (bool mask)"]


def test_a_masked_assignment_of_a_scalar_is_never_a_sync():
    """`x[mask] = 0` does not sync on any torch the course supports, whichever op it dispatches:
    2.15's Python indexing calls masked_fill_ itself; older releases call index_put_, which ATen turns
    into masked_fill_ (TensorAdvancedIndexing.cpp, _index_put_impl_ / canDispatchToMaskedFill: one
    mask, a one-element CPU value; on a CUDA tensor THPVariable_setitem makes the value a CPU tensor),
    and masked_fill_ reads a CPU value without waiting for the GPU (cuda/Indexing.cu). The torch.profiler
    shows the masked_fill_ on 2.13 (see CUDA_KERNEL_SYNCS). History: aa78586 made the test follow
    2.15's dispatch; this makes the detector agree with ATen on every version."""
    def fn(x):
        x[x < 0] = 0
        return x

    assert _whats(syncs(fn, torch.arange(-2.0, 3.0))) == []
    # still a sync: a value of several elements, accumulate, or two masks (nonzero of the mask)
    assert _whats(syncs(lambda x: x.index_put_((x < 0,), torch.tensor(1.0), accumulate=True),
                        torch.arange(-2.0, 3.0))) == ["aten.index_put_ (bool mask)"]


# A catalogue of ops whose CUDA sync (or its absence) was established from ATen's source, each with the
# source beside it (see syncs.CUDA_KERNEL_SYNCS). The detector must flag them on a CPU run too: the read
# happens inside ATen's CUDA code, below the dispatcher, so on a GPU it is invisible to a dispatch trace.
_I = torch.tensor([1, 3, 3, 0])
_X = torch.tensor([0.1, 0.7, 0.4, 0.9])
SYNCS_ON_CUDA = [
    ("bincount", lambda: torch.bincount(_I), "aten.bincount"),  # cuda/SummaryOps.cu, _bincount_cuda_template
    ("histc, default range", lambda: torch.histc(_X, bins=4), "aten.histc"),  # SummaryOps.cu, _histc_cuda_template
    ("equal", lambda: torch.equal(_X, _X + 0), "aten.equal"),  # cuda/Equal.cpp, cuda_equal: .all().item()
    ("allclose", lambda: torch.allclose(_X, _X), "aten.allclose"),  # TensorCompare.cpp, allclose: .item()
    ("linalg.inv", lambda: torch.linalg.inv(torch.eye(2)), "aten._linalg_check_errors"),  # BatchLinearAlgebra.cpp
    ("one_hot without num_classes", lambda: torch.nn.functional.one_hot(_I), "F.one_hot (no num_classes)"),  # Onehot.cpp
    ("repeat_interleave, tensor repeats", lambda: _X.repeat_interleave(_I), "aten.repeat_interleave"),  # Repeat.h
    ("nonzero", lambda: torch.nonzero(_X > 0.5), "aten.nonzero"),  # cuda/Nonzero.cu, memcpy_and_sync
    ("torch.where(cond)", lambda: torch.where(_X > 0.5), "aten.nonzero"),  # one-argument where is nonzero
]
CLEAN_ON_CUDA = [  # false alarms the detector must not raise
    ("histc with a range", lambda: torch.histc(_X, bins=4, min=0, max=1)),  # SummaryOps.cu: min != max, no read
    ("one_hot with num_classes", lambda: torch.nn.functional.one_hot(_I, 4)),  # Onehot.cpp: CUDA skips the checks
    ("linalg.inv_ex", lambda: torch.linalg.inv_ex(torch.eye(2))),  # no _linalg_check_errors
    ("nonzero_static", lambda: torch.nonzero_static(_X > 0.5, size=4)),  # Nonzero.cu: no copy back
    ("bucketize", lambda: torch.bucketize(_X, torch.tensor([0.2, 0.5]))),  # cuda/Bucketization.cu: one kernel
    ("multinomial", lambda: torch.multinomial(_X, 2)),  # Distributions.cpp, multinomial_out: _assert_async
    ("repeat_interleave with output_size", lambda: _X.repeat_interleave(_I, output_size=7)),  # Repeat.h
    ("masked_fill with a CPU scalar", lambda: _X.masked_fill(_X > 0.5, 0.0)),  # cuda/Indexing.cu
    ("topk", lambda: _X.topk(2)),
    ("where(cond, a, b)", lambda: torch.where(_X > 0.5, _X, 0.0)),
    ("index_select", lambda: _X.index_select(0, _I)),
]


@pytest.mark.parametrize("name, fn, what", SYNCS_ON_CUDA, ids=[c[0] for c in SYNCS_ON_CUDA])
def test_ops_that_sync_inside_atens_cuda_code_are_flagged_on_any_device(name, fn, what):
    report = syncs(fn)
    assert _whats(report) == [what]
    if what not in ("aten.nonzero", "aten.repeat_interleave"):
        assert "syncs on CUDA" in report.syncs[0].why


@pytest.mark.parametrize("name, fn", CLEAN_ON_CUDA, ids=[c[0] for c in CLEAN_ON_CUDA])
def test_ops_that_do_not_sync_on_cuda_come_out_clean(name, fn):
    assert _whats(syncs(fn)) == []


def test_the_table_of_cuda_syncs_names_its_source_and_what_was_checked():
    from lessons_lib.syncs import CUDA_KERNEL_SYNCS

    for op, (where, when, checked) in CUDA_KERNEL_SYNCS.items():
        assert ".c" in where or ".h" in where, op  # a source file
        assert when and set(checked.split("; ")) <= {"src", "2.13", "2.14.1", "2.13 (CPU reads too)"}, op


def test_the_summary_states_what_the_detector_cannot_see():
    text = syncs(lambda x: x * 2, torch.ones(2)).summary()
    assert "not seen:" in text and "dispatcher" in text and "0-dim" in text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a GPU or the simulated one)")
def test_masked_fill_with_a_gpu_value_tensor_is_a_sync_on_a_gpu():
    x = torch.ones(4, device="cuda")
    assert _whats(syncs(lambda x: x.masked_fill(x > 0, torch.tensor(0.0, device="cuda")), x)) == [
        "aten.masked_fill (GPU value tensor)"]
    assert _whats(syncs(lambda x: x.masked_fill(x > 0, torch.tensor(0.0)), x)) == []


def test_pure_device_code_has_no_syncs_and_no_copies():
    report = syncs(lambda x: (x * 2 + 1).relu().sum(0), torch.ones(3, 4))
    assert len(report) == 0 and report.syncs == [] and report.transfers == []
    assert "no host syncs" in report.table()


def test_a_sync_in_a_loop_counts_once_per_pass():
    def fn(x, n):
        total = 0.0
        for _ in range(n):
            total += x.sum().item()  # one sync per pass
        return total

    for n in (1, 5, 9):
        report = syncs(fn, torch.ones(4), n)
        assert len(report.syncs) == n
        assert list(report.lines().values()) == [n]
    # host_syncs (lessons 00 and 05) keeps its older answer: one entry per line in a row
    assert len(host_syncs(fn, torch.ones(4), 9)) == 1


def test_print_of_a_tensor_is_one_sync_not_one_per_value(capsys):
    report = syncs(lambda x: print(x), torch.randn(50))
    assert _whats(report) == ["Tensor.__repr__()"]


def test_a_copy_to_another_device_is_a_transfer_with_its_bytes_and_line():
    def fn(x):
        y = x.to("meta")  # meta stands in for a second device on a CPU-only machine
        z = torch.empty(3, 5, device="meta")
        z.copy_(x)
        return y, z

    report = syncs(fn, torch.ones(3, 5))
    assert [(t.what, t.src, t.dst, t.nbytes) for t in report.transfers] == [
        ("aten._to_copy", "cpu", "meta", 60), ("aten.copy_", "cpu", "meta", 60)]
    assert report.transfers[0].where == 'y = x.to("meta")'
    assert report.transfer_bytes == 120
    assert report.syncs == []  # no GPU on either side: nothing to wait for
    assert not any(t.blocking for t in report.transfers)


def test_a_dtype_conversion_on_one_device_is_not_a_transfer():
    report = syncs(lambda x: (x.to(torch.float64), x.to("cpu"), x.clone()), torch.ones(4))
    assert report.transfers == [] and report.syncs == []


def test_transfer_rules_for_host_and_gpu():
    """What blocks, from PyTorch's copy_ on CUDA (see syncs.py's docstring)."""
    assert copy_blocks("cpu", "cuda", non_blocking=False, host_pinned=False)
    assert copy_blocks("cpu", "cuda", non_blocking=False, host_pinned=True)  # pinned alone is not enough
    assert not copy_blocks("cpu", "cuda", non_blocking=True, host_pinned=True)
    assert not copy_blocks("cpu", "cuda", non_blocking=True, host_pinned=False)  # staged by the driver
    assert copy_blocks("cuda", "cpu", non_blocking=True, host_pinned=False)  # into pageable: returns when done
    assert not copy_blocks("cuda", "cpu", non_blocking=True, host_pinned=True)
    assert copy_blocks("cuda", "cpu", non_blocking=False, host_pinned=True)
    assert not copy_blocks("cuda", "cuda", non_blocking=False, host_pinned=None)
    assert not copy_blocks("cpu", "meta", non_blocking=False, host_pinned=False)


def test_transfers_name_their_direction_and_why():
    h2d = Transfer("aten.copy_", "cpu", "cuda", 4, False, False, True, "x")
    assert h2d.direction == "host → device" and "staged" in h2d.why.replace("stages", "staged")
    d2h = Transfer("aten._to_copy", "cuda", "cpu", 4, True, False, False, "x")
    assert d2h.direction == "device → host" and "waits" in d2h.why
    pin = Transfer("aten._pin_memory", "cpu", "cpu", 4, False, True, False, "x")
    assert pin.direction == "host → pinned host" and "reused" in pin.why


def test_the_detector_restores_the_tensor_methods_even_when_fn_raises():
    before = (torch.Tensor.item, torch.Tensor.cpu, torch.Tensor.__repr__)

    def boom(x):
        x.item()
        raise KeyError("reader's bug")

    with pytest.raises(KeyError):
        syncs(boom, torch.ones(1))
    assert (torch.Tensor.item, torch.Tensor.cpu, torch.Tensor.__repr__) == before
    repr(torch.ones(2))  # printing works again, and is not recorded by anyone


def test_the_report_reads_well():
    def fn(x):
        for _ in range(3):
            x.sum().item()
        return x.to("meta")

    report = syncs(fn, torch.ones(2))
    assert isinstance(report, SyncReport)
    assert report.summary().splitlines()[0] == "3 host syncs, 1 copy between devices (8 B), 0 pin_memory calls"
    # counts in words (display.count): it printed "3 host sync(s), 1 copy(ies) ..., 0 pin_memory call(s)"
    one = syncs(lambda x: x.sum().item(), torch.ones(2)).summary().splitlines()[0]
    assert one == "1 host sync, 0 copies between devices (0 B), 0 pin_memory calls"
    assert "3 × sync at  x.sum().item()" in report.summary()
    assert all(isinstance(e, (HostSync, Transfer)) for e in report)
    assert "cpu → meta" in report.table()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a GPU or the simulated one)")
def test_copies_between_host_and_gpu_are_found_and_blocking_ones_are_syncs():
    def fn(x):
        g = x.cuda()  # blocking: a sync
        h = x.to("cuda", non_blocking=True)  # pageable source: staged, not a stream sync
        back = (g + h).cpu()  # a sync and a copy
        return back

    report = syncs(fn, torch.ones(4, 4))
    dirs = [(t.direction, t.blocking, t.nbytes) for t in report.transfers]
    assert dirs == [("host → device", True, 64), ("host → device", False, 64), ("device → host", True, 64)]
    assert len(report.syncs) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or bool(SIMULATED), reason="needs a real CUDA GPU")
def test_the_detector_agrees_with_cuda_sync_debug_mode():
    """On a GPU, set_sync_debug_mode("warn") warns once per sync; the detector must count the same."""
    import warnings

    def fn(x):
        a = x.sum().item()
        b = x.cpu()
        c = x[x > 0]
        d = torch.nonzero(x)
        e = x.tolist()
        f = 1 if x.sum() > 0 else 0
        g = torch.ones(8).cuda()
        return a, b, c, d, e, f, g

    x = torch.randn(64, device="cuda")
    torch.cuda.synchronize()
    found = syncs(fn, x)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    warned = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(found.syncs) == 7
    assert len(warned) == len(found.syncs), [str(w.message) for w in warned]


def test_repeat_interleave_with_tensor_repeats_syncs_unless_given_its_output_size():
    x, r = torch.arange(3.0), torch.tensor([1, 2, 3])
    assert _whats(syncs(lambda x, r: x.repeat_interleave(r), x, r)) == ["aten.repeat_interleave"]
    assert _whats(syncs(lambda x, r: x.repeat_interleave(r, output_size=6), x, r)) == []
    assert _whats(syncs(lambda x: x.repeat_interleave(2), x)) == []


# --- the CUDA view (cuda_syncs): CUDA's semantics, on any machine -------------------------------------------
# The arguments live on the device (meta stands in for it without a GPU); tensors made without device= stay on
# the host. Each rule below is checked against ATen's source in sync_table.dispatch_sync's docstring.

def _cuda_whats(fn, *args):
    return [e.what for e in cuda_syncs(fn, *args).syncs]


def test_cuda_view_a_host_read_of_a_host_index_is_not_a_sync():
    """x[j] with a CPU 0-dim index reads j on the host (TensorIndexing.h: item() then select): no device wait."""
    x, idx = torch.randn(6, 3), torch.tensor([4, 1])
    fn = lambda x: torch.stack([x[j] for j in idx])  # noqa: E731
    assert _cuda_whats(fn, x) == []
    assert _whats(syncs(fn, x)) == ["aten._local_scalar_dense"] * 2  # the older view counts every host read


def test_cuda_view_an_index_tensor_on_the_host_is_a_blocking_copy():
    """x[idx] with idx on the host: ATen copies idx to the device first (make_info: .to(), blocking)."""
    x, idx = torch.randn(6, 3), torch.tensor([4, 1])
    assert _cuda_whats(lambda x: x[idx], x) == ["aten.index (index on the host)"]
    assert _cuda_whats(lambda x, i: x[i], x, idx) == []  # an argument: on the device too
    assert _whats(syncs(lambda x: x[idx], x)) == []  # the older view never saw it


def test_cuda_view_moving_a_host_tensor_blocks_unless_non_blocking():
    def fn(x):
        mask = torch.ones(len(x), dtype=torch.bool).to(x.device)  # made on the host, moved every call
        order = torch.arange(len(x)).to(x.device, non_blocking=True)
        return x[mask], order

    report = cuda_syncs(fn, torch.randn(5))
    assert _whats(report) == ["aten._to_copy (cpu → cuda)", "aten.index (bool mask)"]
    assert [(t.direction, t.blocking) for t in report.transfers] == [("host → device", True), ("host → device", False)]
    assert "on a CUDA GPU" in report.summary()


def test_cuda_view_values_read_on_the_host_only_when_they_live_on_the_device():
    def fn(x):
        a = x.sum().item()  # a device value: a sync
        b = torch.tensor(3.0).item()  # a host value: none
        c = x.tolist()  # a sync, with a stand-in list on meta
        return a, b, c

    report = cuda_syncs(fn, torch.randn(4))
    assert _whats(report) == ["Tensor.item()", "Tensor.tolist()"]


def test_cuda_view_backward_of_a_boolean_index_is_a_sync_too():
    """IndexBackward0 keeps the boolean mask; backward calls index_put with it (FunctionsManual.cpp,
    index_backward), whose expandTensors runs nonzero on the device: a second sync."""
    def fn(x, mask):
        x[mask].sum().backward()

    x = torch.randn(5, requires_grad=True)
    whats = _cuda_whats(fn, x, x.detach() > 0)
    assert whats[0] == "aten.index (bool mask)" and len(whats) == 2 and "bool mask" in whats[1]


def test_cuda_view_leaves_the_callers_module_and_tensors_alone():
    lin, x = torch.nn.Linear(3, 2), torch.randn(4, 3)
    before = lin.weight.detach().clone()
    report = cuda_syncs(lambda m, x: m(x).sum().item(), lin, x)
    assert _whats(report) == ["Tensor.item()"]
    assert lin.weight.device.type == "cpu" and torch.equal(lin.weight, before) and x.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a GPU or the simulated one)")
def test_cuda_view_runs_on_the_gpu_itself_when_the_arguments_are_there():
    x, idx = torch.randn(6, 3, device="cuda"), torch.tensor([4, 1])
    assert _cuda_whats(lambda x: (x[idx], x.sum().item(), torch.stack([x[j] for j in idx])), x) == [
        "aten.index (index on the host)", "Tensor.item()"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or bool(SIMULATED), reason="needs a real CUDA GPU")
def test_the_cuda_view_agrees_with_cuda_sync_debug_mode():
    """The lesson-07 pitfalls on a real GPU: set_sync_debug_mode("warn") warns once per sync; the CUDA view
    must count the same (x[j] with a CPU index: none; x[idx] with a CPU idx and its backward's index_put with
    the same CPU idx, .to(), x[mask] and its backward, .item(): one each)."""
    import warnings

    idx = torch.tensor([3, 1, 2])

    def fn(x):
        xb = torch.stack([x[j] for j in idx])  # host reads of a host index: no sync
        xi = x[idx]  # the index copied to the device: a sync
        mask = torch.ones(len(xb), dtype=torch.bool).to(x.device)  # a blocking copy: a sync
        # xb[mask]: nonzero on the device, a sync
        (xb[mask].sum() + xi.sum()).backward()  # nonzero in backward, the CPU idx copied again: two syncs
        return xb.sum().item()  # a sync

    x = torch.randn(8, 4, device="cuda", requires_grad=True)
    torch.cuda.synchronize()
    found = cuda_syncs(fn, x)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    warned = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(found.syncs) == 6
    assert len(warned) == len(found.syncs), [str(w.message) for w in warned]


# --- a watch must not turn a compiled function back into eager code (compiling.EagerWatch) ---------------
def test_syncs_leaves_a_compiled_function_compiled():
    from .stays_compiled import check

    def step(x):
        return (x.sin() * 2).sum()

    x = torch.randn(8)
    check(lambda f: syncs(f, x), step, x)


def test_cuda_syncs_leaves_a_compiled_function_compiled():
    from .stays_compiled import check

    def step(x):
        return (x.cos() + 1).mean()

    x = torch.randn(8)
    check(lambda f: cuda_syncs(f, x), step, x)
