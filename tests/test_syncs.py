"""The sync detector (lessons_lib/syncs.py): host syncs and copies between devices, with the user's line."""
import pytest
import torch

from lessons_lib.syncs import HostSync, SyncReport, Transfer, copy_blocks, host_syncs, syncs

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


def test_a_masked_assignment_of_a_scalar_is_a_sync_only_where_torch_makes_it_index_put():
    # torch 2.15 rewrites `x[mask] = scalar` as masked_fill_ (no sync); older releases call index_put_.
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    def fn(x):
        x[x < 0] = 0
        return x

    with Ops():
        fn(torch.arange(-2.0, 3.0))
    found = _whats(syncs(fn, torch.arange(-2.0, 3.0)))
    if "masked_fill_" in seen:
        assert found == []
    else:
        assert "index_put_" in seen and found == ["aten.index_put_ (bool mask)"]


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
    assert report.summary().splitlines()[0] == "3 host sync(s), 1 copy(ies) between devices (8 B), 0 pin_memory call(s)"
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
