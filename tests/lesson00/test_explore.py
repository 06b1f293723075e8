"""Lesson 00's recorded results: targets, the record command, the recorded GPU summary."""
import json
import math

import pytest
import torch

from lessons_lib.lesson00_timing import explore


def test_targets_judge_the_recorded_comparisons():
    section = {"demos": {"data_in_timed_region": {"paired_ratios": [3.0, 4.0, 5.0], "wrong": {"median": 1},
                                                   "honest": {"median": 1}}},
               "sim": {"wrong": [5.0, 5.2, 4.9], "harness": [1.3, 1.31, 1.29], "order": [1.2, 1.3, 1.25]}}
    got = {t["name"]: t for t in explore.targets("cpu", section)}
    assert len(got) == 4
    assert [t["ok"] for t in got.values()] == [True, True, True, False]  # the order bar is 1.5
    assert all(isinstance(t["value"], float) and t["bar"] for t in got.values())


@pytest.mark.slow
def test_record_quick_returns_the_documented_keys():
    rec = explore.record(torch.device("cpu"), quick=True)
    json.dumps(rec)  # goes into the recorded-results JSON as it is
    assert rec["quick"] is True
    assert rec["device"] == "cpu"
    assert set(rec["sizes"]) == {"matmul", "rows", "width", "cache_bytes", "rotate_bytes"}
    assert set(rec["demos"]) == {"no_sync", "first_call", "data_in_timed_region", "single_run",
                                 "mean_with_cold_start", "one_thread", "hot_cache"}
    for key, d in rec["demos"].items():
        assert d["shape"]
        assert d["mistake"]
        for side in ("wrong", "honest"):
            t = d[side]
            assert t["median"] > 0, (key, side)
            assert math.isfinite(t["median"]), (key, side)
            assert t["iqr"] >= 0, (key, side)
            assert t["samples"] >= 1
            assert t["method"]
        assert d["wrong"]["method"].startswith("WRONG"), key
        assert not d["honest"]["method"].startswith("WRONG"), key
    assert set(rec["sim"]) == {"wrong", "harness", "order"}
    assert all(len(v) >= 1 and all(x > 0 for x in v) for v in rec["sim"].values())
    assert {t["name"][:2] for t in explore.targets("cpu", rec)} == {"00"}


def test_recorded_gpu_summary_says_each_ratio_through_the_noise_rule(monkeypatch):
    from lessons_lib import results

    section = {"demos": {
        "steady": {"wrong": {"label": "w", "median": 2.0, "iqr": 0.0}, "honest": {"label": "h", "median": 1.0, "iqr": 0.01}},
        "noisy": {"wrong": {"label": "w", "median": 2.0, "iqr": 0.0}, "honest": {"label": "h", "median": 1.0, "iqr": 0.9}},
        "paired": {"wrong": {"label": "w", "median": 3.0, "iqr": 0.0}, "honest": {"label": "h", "median": 1.0, "iqr": 0.0},
                   "paired_ratios": [3.0, 3.1, 2.9] * 3 + [3.0]}}}  # the noise rule decides from 10 rounds
    rec = results.Recorded({"name": "NVIDIA T4", "kind": "cuda", "kind_of_figures": "measured", "torch": "2.13.0",
                            "date": "2026-11-24"}, {explore.KEY: section})
    monkeypatch.setattr(results, "for_lesson", lambda *a, **k: [rec])
    lines = explore.recorded_gpu_summary().splitlines()
    assert "(2×)" in lines[1] and "not decided when recorded" in lines[2] and "(3×)" in lines[3]
    assert "rerun" not in lines[2]  # a recorded figure: its reader cannot rerun the recording


def test_the_recorded_gpu_summary_names_its_conditions_and_the_host_cpu():
    # h200.json is the course's first measured GPU file: every line that replays it says how it was recorded, and
    # the one-thread demo (CPU tensors on every machine) is the GPU machine's host CPU, not the GPU.
    from lessons_lib import results
    from lessons_lib.lesson00_timing import explore as E

    recs = results.for_lesson(E.KEY, gpu_only=True)
    if not recs:
        import pytest
        pytest.skip("no recorded GPU file for lesson 00")
    text = E.recorded_gpu_summary()
    assert "measured" in text and "recorded with" in text and "quick run" in text
    assert "one thread (host CPU," in text
