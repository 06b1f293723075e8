"""The hunt: the profiler's tables, trace file and summary, and the course's tools (no clock in any assertion)."""
import json
from types import SimpleNamespace

import torch

from lessons_lib.lesson07_capstone import evidence as V
from lessons_lib.lesson07_capstone import tools as FF
from lessons_lib.lesson07_capstone import model as M
from lessons_lib.trace import trace_ops

SMALL = dict(C=32, H=4, E=4, T=6, batch=8)


def test_the_tools_find_the_pitfalls():
    f = FF.findings(dims=SMALL)
    o, x = f["original"], f["fixed"]
    assert x["ops"] < 0.3 * o["ops"] and x["launches"] < 0.4 * o["launches"] < o["ops"]
    assert x["gemms"] < o["gemms"]
    assert x["copied"] < o["copied"] and o["largest_copy"][1][0] == SMALL["batch"]  # the broadcast's copy
    assert x["saved"] < 0.5 * o["saved"]
    table = str(FF.findings_table(f, SMALL))
    for lesson in ("01", "02", "03", "04", "06"):
        assert lesson + " (" in table


def test_the_sync_count_is_cudas():
    """On CUDA the original loop waits 5 times a step: the mask's blocking .to(), out[mask] and yb[mask] (nonzero),
    IndexBackward's index_put with the mask (nonzero again), loss.item(). Its x[j] with a CPU 0-dim index read
    host memory: 2 x batch reads a step that wait for nothing (the old count called them 68 syncs at batch 32).
    The fixed loop keeps its indices on the device: no sync."""
    f = FF.findings(dims=SMALL)
    o, x = f["original"], f["fixed"]
    assert o["syncs"] == 5 and x["syncs"] == 0
    assert o["reads"] == 2 * SMALL["batch"] + 4 and x["reads"] == 0
    assert list(o["sync_lines"].values()) == [2, 4, 2, 2]  # two steps
    assert sum(o["read_lines"].values()) == 2 * 2 * SMALL["batch"]
    story = FF.sync_story(o)
    assert "1 host sync at: mask = torch.ones" in story and "wait for nothing" in story and "x[j] for j" in story
    assert "2 host syncs at: " in story and ".0 host" not in story
    # whole counts as a reader writes them: "5", not "5.0" (issue 28: "68.0 host syncs")
    rows = str(FF.findings_table(f, SMALL)).splitlines()
    syncs = next(r for r in rows if r.startswith("host syncs on a GPU")).split("  ")
    assert [c.strip() for c in syncs if c.strip()][1:3] == ["5", "0"]


def test_an_index_on_the_host_is_two_syncs_a_step_on_the_device_none():
    found = FF.index_syncs()
    assert len(found["indices on the host"]) == 2 and "blocking copy" in found["indices on the host"][0]
    assert found["indices on the device"] == []


def test_the_hand_written_chains_are_counted_not_asserted():
    rows = [r for r in str(FF.chain_counts(SMALL)).splitlines()[3:]]
    counts = {r.split()[0]: r.split()[1:3] for r in rows}
    assert counts["norm_by_hand"] == ["10", "3"] and counts["gelu_chain"] == ["9", "5"]
    assert counts["F.layer_norm"] == ["1", "0"] and counts["F.gelu(approximate='tanh')"][:2] == ["1", "0"]


def test_the_broadcast_parts_are_the_ops_autograd_runs():
    """broadcast_parts times the ops one forward + backward of qkv_broadcast dispatches: the copy of each weight
    per batch row, the forward bmm, and backward's weight gradient per batch row (bmm) and its sum over the batch."""
    d = dict(SMALL)
    B, T, C, H = d["batch"], d["T"], d["C"], d["H"]
    D = C // H
    x = torch.randn(B, T, C, requires_grad=True)
    ws = [torch.randn(H, C, D, requires_grad=True) for _ in range(3)]

    def real(x, *ws):
        q, k, v = M.qkv_broadcast(x, *ws)
        (q.sum() + k.sum() + v.sum()).backward()

    ops = [(op.name, op.in_shapes, op.out_shapes[0]) for op in trace_ops(real, x, *ws).compute_ops]
    parts = FF.broadcast_parts("cpu", d)
    for name, fn in parts.items():
        mine = [(op.name, op.in_shapes, op.out_shapes[0]) for op in trace_ops(fn).compute_ops]
        assert mine and all(op in ops for op in mine), (name, mine)
    grads = [op for op in ops if op[0] == "bmm" and op[2] == (B * H, C, D)]
    sums = [op for op in ops if op[0] == "sum" and op[1][0] == (B, H, C, D)]
    assert len(grads) == len(sums) == 3
    cmp = FF.broadcast_costs("cpu", d, max_time=1.0)
    assert set(cmp.names) == set(parts) and "weight copies" in str(FF.broadcast_table(cmp, "cpu", d))


def test_profile_exports_a_chrome_trace_its_tables_and_its_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "PROFILE_DIR", tmp_path / "profiles")
    slow, fixed = V.pair(dims=SMALL)
    x, y = V.data(dims=SMALL)
    ps = [V.profile_train(slow, M.slow_train, x, y, name="original", batch=8),
          V.profile_train(fixed, M.fixed_train, x, y, name="fixed", batch=8)]
    for p in ps:
        assert p.trace_file.exists() and "traceEvents" in json.loads(p.trace_file.read_text())
        assert "Self CPU" in p.table and len(p.table.splitlines()) <= V.TOP + 8
        top = str(p.top())
        assert "self CPU (ms)" in top and "CPU total (ms)" in top and "Optimizer." not in top
        assert p.waits() == {}  # no GPU: the host waits for nothing
    s = [V.summary(p) for p in ps]
    # values read on the host; the fixed loop's one is fused SGD reading its CPU lr tensor (no wait on a GPU)
    assert s[0]["syncs_per_step"] >= 3 and s[1]["syncs_per_step"] <= 1
    assert s[0]["per_step"] > 2 * s[1]["per_step"] and s[0]["launch_kind"] == "aten ops dispatched"
    assert sum(share for _, _, share in s[0]["top"]) <= 1.0
    saved = [V.saved_largest(m, x, y, 8) for m in (slow, fixed)]
    assert saved[0][1] > saved[1][1]
    text = str(V.summary_table(ps, saved))
    assert "values read on the host" in text and "saved for backward, total (ledger)" in text


def test_the_profiler_says_nothing_on_stderr(tmp_path, monkeypatch, capfd):
    """Kineto writes "USDT ... profiler_start/stop" to file descriptor 2 (red in a notebook): silenced."""
    monkeypatch.setattr(V, "PROFILE_DIR", tmp_path)
    slow, _ = V.pair(dims=SMALL)
    x, y = V.data(dims=SMALL)
    capfd.readouterr()
    V.profile_train(slow, M.slow_train, x, y, batch=8, export=False)
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_st" not in err and "Profiler clears events" not in err


def _event(key, count=1, self_cpu=0.0, self_dev=0.0, kernel=False, annotation=False):
    return SimpleNamespace(key=key, count=count, self_cpu_time_total=self_cpu, cpu_time_total=self_cpu,
                           self_device_time_total=self_dev, is_user_annotation=annotation,
                           device_type="DeviceType.CUDA" if kernel else "DeviceType.CPU")


def test_the_gpu_summary_counts_each_kernel_and_each_wait_once():
    """On a GPU an aten row's self CUDA time is its kernels' time, which the kernels' own rows hold too, and the
    optimizer's annotation spans kernels (the H200's "111.69%"), on the host and as a GPU row; an .item() is
    _local_scalar_dense and, under it, cudaMemcpyAsync + cudaStreamSynchronize: one wait. What the H200's tables
    showed besides (2026-11-26): the profiler's own "Activity Buffer Request" at the top of self CPU, the GPU-side
    Optimizer.step row among the kernels, and cudaDeviceSynchronize (the harness's and the profiler's) as a wait."""
    events = [_event("aten::mm", 10, 500.0, 300.0), _event("gemm_kernel", 10, 0.0, 300.0, kernel=True),
              _event("aten::sum", 4, 100.0, 100.0), _event("reduce_kernel", 4, 0.0, 100.0, kernel=True),
              _event("Optimizer.step#SGD.step", 2, 0.0, 450.0, annotation=True),
              _event("Optimizer.step#SGD.step", 2, 0.0, 166.0, kernel=True),
              _event("Activity Buffer Request", 2, 4890.0),
              _event("aten::_local_scalar_dense", 2, 10.0), _event("aten::nonzero", 6, 10.0),
              _event("cudaMemcpyAsync", 8, 40.0), _event("cudaStreamSynchronize", 8, 900.0),
              _event("cudaDeviceSynchronize", 2, 20.0), _event("cudaLaunchKernel", 14, 70.0)]
    p = V.Profile("original", 2, True, "", None, events)
    s = V.summary(p)
    assert [round(share, 3) for _, _, share in s["top"][:2]] == [0.75, 0.25]  # of 400 µs of kernels, not 800
    assert s["syncs_per_step"] == 4 and s["per_step"] == 7 and s["launch_kind"] == "CUDA kernel launches"
    assert s["by"] == "self CUDA" and s["device_ms"] == 0.2 and s["host_ms"] < 1.0  # no profiler, no annotation
    assert p.waits() == {"cudaStreamSynchronize": (4.0, 0.45)}
    by_device = str(p.top(by="device"))
    assert "Optimizer." not in by_device and "aten::mm" in by_device and "gemm_kernel" not in by_device
    by_host = str(p.top())
    assert "Activity Buffer" not in by_host and "cudaStreamSynchronize" in by_host and "Optimizer." not in by_host
    text = str(V.summary_table([p], [([], 0)]))
    assert "by self CUDA time" in text and "GPU busy in kernels" in text


def test_memory_snapshot_says_why_not_on_a_cpu():
    slow, _ = V.pair(dims=SMALL)
    x, y = V.data(dims=SMALL)
    assert V.memory_snapshot(slow, M.slow_train, x, y, batch=8).startswith("No memory snapshot")


def test_self_time_column_by_device():
    assert V._self_key(False) == "self_cpu_time_total"
    assert V._self_key(True) == "self_device_time_total"
    assert torch.device(V.data(dims=SMALL)[0].device).type == "cpu"
