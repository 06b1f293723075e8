"""The CUDA branches, on whatever CUDA device is here (a real GPU, or the test suite's simulated one): the hunt,
the waterfall, the shipped step as one CUDA graph, the explorer's run and the checker take their device paths.
No clock in any assertion."""
import pytest
import torch

from lessons_lib.lesson07_capstone import evidence as V
from lessons_lib.lesson07_capstone import exercise as E
from lessons_lib.lesson07_capstone import explore as X
from lessons_lib.lesson07_capstone import fixes as F
from lessons_lib.lesson07_capstone import gpu as G
from lessons_lib.lesson07_capstone import model as M

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (real or simulated)")
SMALL = dict(C=32, H=4, E=4, T=6, batch=8)


def test_shape_and_data_follow_the_device():
    x, y = V.data("cuda", dims=SMALL, batches=2)
    assert x.device.type == "cuda" and x.shape == (16, 6, 8)
    slow, fixed = V.pair(dims=SMALL, device="cuda")
    assert next(slow.parameters()).device.type == "cuda"
    opt = M.optimizer(fixed)
    lr = opt.param_groups[0]["lr"]
    assert opt.defaults["fused"] and lr.device.type == "cuda" and lr.dtype == torch.float32  # FusedSgdKernel.cu
    losses, outs = M.fixed_train(fixed, x, y, steps=2, batch=8, opt=opt)
    assert losses.device.type == "cuda" and outs.shape == (16, 4)
    assert all(i.device.type == "cuda" for i in M.batches(16, 2, 8, device=x.device))


def test_profile_and_snapshot_on_cuda(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "PROFILE_DIR", tmp_path)
    slow, _ = V.pair(dims=SMALL, device="cuda")
    x, y = V.data("cuda", dims=SMALL)
    p = V.profile_train(slow, M.slow_train, x, y, name="original", batch=8)
    assert p.trace_file.exists()
    s = V.summary(p)  # kernel launches where the profiler sees CUDA; ops dispatched where it cannot
    assert s["launch_kind"] == ("CUDA kernel launches" if p.cuda else "aten ops dispatched") and s["per_step"] >= 0
    assert "self CPU" in str(p.top()) and isinstance(V.memory_snapshot(slow, M.slow_train, x, y, batch=8), str)


def test_the_peak_is_measured_on_the_device_the_batch_is_on(monkeypatch):
    """A zero-argument closure has no tensor to read the device from: step_peak passes it (the H200 printed a
    CPU profiler's "40 B" for a GPU step)."""
    from lessons_lib import memory_timeline

    seen = []
    real = memory_timeline.measured_peaks
    monkeypatch.setattr(memory_timeline, "measured_peaks", lambda fn, *a, **k: seen.append(k.get("device")) or
                        real(fn, *a, **k))
    slow, _ = V.pair(dims=SMALL, device="cuda")
    x, y = V.data("cuda", dims=SMALL)
    F.step_peak(slow, x[:8], y[:8])
    assert seen and torch.device(seen[0]).type == "cuda"


def test_waterfall_and_lesson_run_on_cuda():
    w = F.waterfall("cuda", dims=SMALL, max_time=3.0)
    assert w.device == "GPU" and set(w.peaks) == set(w.names)
    run = X.LESSON.run({"C": 32, "H": 4, "E": 4, "T": 4, "batch": 8}, "cuda", min_run_time=0.01)
    assert set(run.timings) == set(X.STAGES)


def test_record_on_cuda_takes_the_gpus_shape_and_its_target_is_the_shipped_step(monkeypatch):
    """The H200 (2026-11-26) recorded --quick at the CPU's shape and wrote the CPU's target as "n/a on this device"."""
    from lessons_lib import graphs

    monkeypatch.setitem(M.SHAPE, "cuda", dict(SMALL))
    for p in X.LESSON.params:
        monkeypatch.setattr(p, "gpu", SMALL[p.name])
    rec = X.record("cuda", quick=True)
    assert rec["waterfall"]["shape"] == SMALL and rec["headline"]["params"] == SMALL
    names = [t["name"] for t in X.targets("cuda", rec)]
    assert not any("(CPU)" in t["bar"] for t in X.targets("cuda", rec))
    if graphs.has_graphs():
        assert set(rec["shipped"]["median_per_step"]) == {"original", "fixed, eager", X.SHIPPED}
        assert "one CUDA graph" in names[0] and "T=6, batch=8" in names[0]


def test_the_shipped_step_replays_one_graph_with_eagers_numbers():
    """GraphedTrain: capture's warm-up trains three steps; the weights and momentum are put back after it, so
    replays follow the eager fixed loop step by step (the same weights and batches)."""
    from lessons_lib import graphs

    if not graphs.has_graphs():
        pytest.skip(graphs.no_graphs_reason())
    gap = G.graphed_agreement("cuda", steps=4, dims=SMALL)
    assert gap is not None and gap < 1e-5
    cmp, why = G.shipped_comparison("cuda", steps=2, max_time=2.0, dims=SMALL)
    assert cmp is not None, why
    assert set(cmp.names) == {"original", "fixed, eager", "fixed, one CUDA graph"}


def test_graph_check_on_cuda_says_what_it_saw():
    reports = G.graph_reports("cuda", dims=SMALL)
    assert all(G.graph_words(r) for r in reports.values())
    assert "frozen Python value" in list(reports.values())[0].kinds


def test_checker_on_cuda_keeps_its_device_independent_lines():
    def my_qkv(h, w, H):
        B, T, C = h.shape
        return torch.nn.functional.linear(h, w).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4).unbind(0)

    torch.manual_seed(0)
    v = E.check_exercise(M.Model(True, 64, 4, 4, qkv=my_qkv), M.fixed_train)
    assert all(ok for _, ok, _ in v.on_every_machine().checks)
