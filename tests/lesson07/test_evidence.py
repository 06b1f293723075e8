"""The hunt: the profiler's table and trace file, its summary, and the course's tools (no clock in any assertion)."""
import json

import torch

from lessons_lib.lesson07_capstone import evidence as V
from lessons_lib.lesson07_capstone import model as M

SMALL = dict(C=32, H=4, E=4, T=6, batch=8)


def test_the_tools_find_the_pitfalls():
    f = V.findings(dims=SMALL)
    o, x = f["original"], f["fixed"]
    assert x["ops"] < 0.3 * o["ops"]
    assert x["gemms"] < o["gemms"]
    assert x["copied"] < o["copied"] and o["largest_copy"][1][0] == SMALL["batch"]  # the broadcast's copy
    assert x["saved"] < 0.5 * o["saved"]
    assert o["syncs"] >= 3 and x["syncs"] == 0
    table = str(V.findings_table(f))
    for lesson in ("01", "02", "03", "04", "06"):
        assert f"\n" in table and lesson + " (" in table


def test_profile_exports_a_chrome_trace_and_its_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "PROFILE_DIR", tmp_path / "profiles")
    slow, fixed = V.pair(dims=SMALL)
    x, y = V.data(dims=SMALL)
    ps = [V.profile_train(slow, M.slow_train, x, y, name="original", batch=8),
          V.profile_train(fixed, M.fixed_train, x, y, name="fixed", batch=8)]
    for p in ps:
        assert p.trace_file.exists() and "traceEvents" in json.loads(p.trace_file.read_text())
        assert "Self CPU" in p.table and len(p.table.splitlines()) <= V.TOP + 8
    s = [V.summary(p) for p in ps]
    assert s[0]["syncs_per_step"] >= 3 and s[1]["syncs_per_step"] == 0
    assert s[0]["per_step"] > 2 * s[1]["per_step"] and s[0]["launch_kind"] == "aten ops dispatched"
    saved = [V.saved_largest(m, x, y, 8) for m in (slow, fixed)]
    assert saved[0][1] > saved[1][1]
    text = str(V.summary_table(ps, saved))
    assert "host syncs per step" in text and "saved for backward, total (ledger)" in text


def test_memory_snapshot_says_why_not_on_a_cpu():
    slow, _ = V.pair(dims=SMALL)
    x, y = V.data(dims=SMALL)
    assert V.memory_snapshot(slow, M.slow_train, x, y).startswith("No memory snapshot")


def test_self_time_column_by_device():
    assert V._self_key(False) == "self_cpu_time_total"
    assert V._self_key(True) == "self_device_time_total"
    assert torch.device(V.data(dims=SMALL)[0].device).type == "cpu"
