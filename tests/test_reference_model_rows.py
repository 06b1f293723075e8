"""The model rows of the recorded files (lessons_lib/reference/*.json) are what the code computes, never hand edits.

A measured file keeps measurements (medians, spreads) beside figures the code derives from them: each variant's
floor and regime from the file's own measured peaks and the variant's traced work (results.run_to_dict), and for
lesson 05's replayed graphs the launch model's replay (explore.model_rows). A model file holds only derived figures,
from a GPU's datasheet and roofline.ASSUMED_LAUNCH (record.model_section). The H200 file's graph rows were once
edited by hand to a floor of one launch (7.15 µs) beside replays of 38 and 78 kernels: these tests recompute them.
"""
import copy
import json
import math

import pytest
import torch

from lessons_lib import launch_queue, results, roofline
from lessons_lib.lesson05_cuda_graphs import explore as explore05

FILES = sorted(results.REFERENCE_DIR.glob("*.json"))


def _load(kind: str) -> list[tuple[str, dict]]:
    out = []
    for path in FILES:
        data = json.loads(path.read_text())
        if data["meta"].get("kind_of_figures") == kind:
            out.append((path.name, data))
    return out


def _sections(lessons: dict):
    """(lesson key, section name, section) of every section holding peaks and variant rows."""
    for key, lesson in lessons.items():
        if not isinstance(lesson, dict):
            continue
        for name, sec in lesson.items():
            if isinstance(sec, dict) and "peaks" in sec and isinstance(sec.get("variants"), dict):
                yield key, name, sec


@pytest.mark.parametrize("name, data", _load("measured"), ids=lambda v: v if isinstance(v, str) else "")
def test_a_measured_files_floors_are_what_the_code_computes_from_its_peaks_and_work(name, data):
    for key, sec_name, sec in _sections(data["lessons"]):
        pk = sec["peaks"]
        if key == "05_cuda_graphs":  # the replayed graphs' rows: the launch model's, recomputed here
            redone = explore05.model_rows(copy.deepcopy(sec))
            for v in explore05.REPLAYED:
                if v in sec["variants"]:
                    got, want = sec["variants"][v], redone["variants"][v]
                    assert (got["floor"], got["kernels"], got["regime"]) == pytest.approx(
                        (want["floor"], want["kernels"], want["regime"])), (name, sec_name, v)
                    assert got["floor"] <= got["median"], (name, sec_name, v, "a floor above the measurement")
        for v, row in sec["variants"].items():
            if "floor" not in row or (key == "05_cuda_graphs" and v in explore05.REPLAYED):
                continue
            terms = (row["flops"] / pk["flops"], row["bytes"] / pk["bandwidth"], row["launches"] * pk["launch"])
            assert row["floor"] == pytest.approx(max(terms), rel=1e-9), (name, key, sec_name, v)
            assert row["regime"] == ("compute", "memory", "overhead")[terms.index(max(terms))], (name, key, v)


@pytest.mark.parametrize("name, data", _load("model"), ids=lambda v: v if isinstance(v, str) else "")
def test_a_model_files_rows_are_what_the_code_computes_now(name, data):
    gpu = data["meta"]["name"].replace("NVIDIA ", "")
    peaks = roofline.datasheet(gpu, torch.float32, tf32=False)
    assert peaks.source in data["meta"]["source"], "regenerate: python -m lessons_lib.record --model " + gpu
    for key, sec_name, sec in _sections(data["lessons"]):
        assert sec["peaks"] == results.peaks_to_dict(peaks), (name, key, "regenerate the model files")
        for v, row in sec["variants"].items():
            assert row["overhead"] == pytest.approx(row["launches"] * peaks.launch), (name, key, v)
            assert row["floor"] == max(row["compute"], row["memory"], row["overhead"]), (name, key, v)
            assert row["regime"] == max(("compute", "memory", "overhead"), key=row.get), (name, key, v)


def test_the_h200_graph_rows_are_the_launch_models_replay_of_38_and_78_kernels():
    data = json.loads((results.REFERENCE_DIR / "h200.json").read_text())["lessons"]["05_cuda_graphs"]
    rows = {k: data[k]["variants"]["CUDA graph"] for k in ("headline", "overhead_bound")}
    assert {k: r["kernels"] for k, r in rows.items()} == {"headline": 38, "overhead_bound": 78}
    for r in rows.values():  # a floor per kernel, not one launch: under the replay measured, above one launch
        assert r["launches"] == 1 and r["kernels"] * launch_queue.KERNEL_MIN < r["floor"] < r["median"]
        assert math.isclose(r["floor"] / r["kernels"], rows["headline"]["floor"] / 38, rel_tol=0.05)


def test_record_writes_a_replayed_graphs_floor_as_the_launch_model_computes_it():
    p = {"width": 512, "batch": 64, "layers": 4}
    section = {"params": p, "dtype": "float32",
               "peaks": {"flops": 5e13, "bandwidth": 4e12, "launch": 7e-6, "source": "test"},
               "variants": {"eager": {"median": 6e-4, "floor": 2.7e-4, "launches": 38},
                            "CUDA graph": {"median": 8e-5, "floor": 7e-6, "launches": 1}}}
    explore05.model_rows(section)
    row = section["variants"]["CUDA graph"]
    per_kernel = launch_queue.KERNEL_MIN + launch_queue.GRAPH_GAP
    assert row["kernels"] == 38 and row["regime"] == "overhead"
    # one replay's launch, then 38 kernels back to back, in steady state over 8 steps (launch_queue.per_step)
    assert row["floor"] == pytest.approx((launch_queue.GRAPH_LAUNCH + 8 * 38 * per_kernel) / 8)
    assert section["variants"]["eager"] == {"median": 6e-4, "floor": 2.7e-4, "launches": 38}  # measured rows as found
