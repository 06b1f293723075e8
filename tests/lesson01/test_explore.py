"""Lesson 01's explorer and recorded results (explore.py): refuses before allocating, runs small shapes, records."""
import matplotlib.figure
import matplotlib.pyplot as plt
import pytest
import torch

from lessons_lib.lesson01_broadcast_matmul import explore

from .helpers import SEED


def _boom(*args, **kwargs):
    raise AssertionError("allocated inputs for a shape that should have been refused first")


def _on_meta(args, kwargs) -> bool:
    dev = kwargs.get("device", args[1] if len(args) > 1 and not isinstance(args[1], int) else None)
    return dev is not None and torch.device(dev).type == "meta"


@pytest.fixture
def no_allocation(monkeypatch):
    """Fail the test if the lesson makes inputs or torch draws a random tensor on a real device. Tensors
    on `meta` (shapes only: the op traces a floor estimate reads) allocate nothing and are let through.
    The machine's peaks (a small benchmark the floor needs, cached per process) are measured first."""
    from lessons_lib import roofline

    roofline.measure_peaks(torch.device("cpu"), torch.float32)
    real_inputs = explore.LESSON.make_inputs

    def make_inputs(*args, **kwargs):
        if not _on_meta(args, kwargs):
            _boom()
        return real_inputs(*args, **kwargs)

    monkeypatch.setattr(explore.LESSON, "make_inputs", make_inputs)
    for name in ("randn", "rand", "zeros", "ones"):
        real = getattr(torch, name)

        def guarded(*args, _real=real, **kwargs):
            if torch.device(kwargs.get("device") or "cpu").type != "meta":
                _boom()
            return _real(*args, **kwargs)

        monkeypatch.setattr(torch, name, guarded)


@pytest.fixture
def one_thread():
    """For tests that time things only to check plumbing: on a loaded CI machine, two CPU threads
    contending with other jobs can make a 0.1 ms matmul take a scheduler tick, 100 calls a sample."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- the explorer: refuses before allocating, runs small shapes ---------------------------------
def test_explorer_refuses_an_oversized_shape_without_allocating(no_allocation):
    ex = explore.explorer("cpu")
    with pytest.raises(ValueError, match="Make a dimension smaller"):
        ex.run(embed_dims=8192, num_modules=256)
    with pytest.raises(ValueError, match="Make a dimension smaller"):  # a sweep checks every shape first
        ex.sweep("num_modules", [1, 256], embed_dims=8192)


@pytest.mark.parametrize("kwargs, message", [
    ({"embed_dims": 12.5}, "whole number"),
    ({"num_modules": True}, "whole number"),
    ({"embed_dims": "512"}, "whole number"),
    ({"embed_dims": 0}, "between 1 and 8192"),
    ({"num_modules": 257}, "between 1 and 256"),
    ({"heads": 4}, "Unknown parameter"),
    ({"dtype": "float64"}, "dtype must be one of"),
    ({"dtype": "fp16"}, "dtype must be one of"),
])
def test_explorer_rejects_invalid_input_with_a_sentence(no_allocation, kwargs, message):
    with pytest.raises(ValueError, match=message):
        explore.explorer("cpu").run(**kwargs)


def test_explorer_rejects_cuda_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="no usable CUDA"):
        explore.explorer("cpu").run(device="cuda", embed_dims=8)


def test_explorer_runs_a_small_shape_to_a_figure(one_thread):
    ex = explore.explorer("cpu")
    ex.min_run_time = 0.01
    run, fig = ex.run(num_modules=2, num_inputs=3, batch_size=2, embed_dims=8)
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert set(run.timings) == {v.name for v in explore.LESSON.variants}
        assert all(t.median > 0 for t in run.timings.values())
    finally:
        plt.close(fig)



# --- recorded results -------------------------------------------------------------------------
def test_record_quick_on_cpu(monkeypatch, one_thread):
    # record() times THREAD_SHAPE and sweeps around the CPU defaults; smaller features keep this test
    # fast on a busy CPU (the notebook times the real seed shape; record() does not depend on it).
    small = {**SEED, "embed_dims": 64}
    monkeypatch.setattr(explore, "THREAD_SHAPE", small)
    monkeypatch.setattr(explore.LESSON.param("embed_dims"), "cpu", 64)
    out = explore.record(torch.device("cpu"), quick=True)
    head = out["headline"]
    assert head["params"] == small
    assert head["dtype"] == "float32"
    assert set(head["variants"]) == {v.name for v in explore.LESSON.variants}
    assert head["peaks"]["flops"] > 0
    assert head["peaks"]["bandwidth"] > 0
    for row in head["variants"].values():
        assert row["median"] > 0
        assert row["floor"] > 0
        assert row["flops"] == 2 * 208 * (12 * 64) * 64
    assert out["sweeps"]
    for sweep in out["sweeps"].values():
        assert sweep["values"]
        for series in sweep["variants"].values():
            assert len(series["median"]) == len(sweep["values"])
            assert all(m > 0 for m in series["median"])
