"""The CUDA branches, on whatever CUDA device is here (a real GPU, or the test suite's simulated one): the hunt,
the waterfall, the explorer's run and the checker take their device paths. No clock in any assertion."""
import pytest
import torch

from lessons_lib.lesson07_capstone import evidence as V
from lessons_lib.lesson07_capstone import exercise as E
from lessons_lib.lesson07_capstone import explore as X
from lessons_lib.lesson07_capstone import fixes as F
from lessons_lib.lesson07_capstone import model as M

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (real or simulated)")
SMALL = dict(C=32, H=4, E=4, T=6, batch=8)


def test_shape_and_data_follow_the_device():
    x, y = V.data("cuda", dims=SMALL, batches=2)
    assert x.device.type == "cuda" and x.shape == (16, 6, 8)
    slow, fixed = V.pair(dims=SMALL, device="cuda")
    assert next(slow.parameters()).device.type == "cuda"
    losses, outs = M.fixed_train(fixed, x, y, steps=2, batch=8)
    assert losses.device.type == "cuda" and outs.shape == (16, 4)


def test_profile_and_snapshot_on_cuda(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "PROFILE_DIR", tmp_path)
    slow, _ = V.pair(dims=SMALL, device="cuda")
    x, y = V.data("cuda", dims=SMALL)
    p = V.profile_train(slow, M.slow_train, x, y, name="original", batch=8)
    assert p.trace_file.exists()
    s = V.summary(p)  # kernel launches where the profiler sees CUDA; ops dispatched where it cannot
    assert s["launch_kind"] == ("CUDA kernel launches" if p.cuda else "aten ops dispatched") and s["per_step"] >= 0
    assert isinstance(V.memory_snapshot(slow, M.slow_train, x, y), str)


def test_waterfall_and_lesson_run_on_cuda():
    w = F.waterfall("cuda", dims=SMALL, max_time=3.0)
    assert w.device == "GPU" and set(w.peaks) == set(w.names)
    run = X.LESSON.run({"C": 32, "H": 4, "E": 4, "T": 4, "batch": 8}, "cuda", min_run_time=0.01)
    assert set(run.timings) == set(X.STAGES)


def test_graphs_on_cuda_capture_or_say_why():
    cmp, why = F.graphed_step("cuda", max_time=3.0)
    assert cmp is not None or why
    assert F.graph_report("cuda", dims=SMALL).kinds


def test_checker_on_cuda_keeps_its_device_independent_lines():
    torch.manual_seed(0)
    v = E.check_exercise(M.Model(True, 64, 4, 4), M.fixed_train)
    assert all(ok for _, ok, _ in v.on_every_machine().checks)
