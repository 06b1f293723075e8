"""Recorded results (results.py): files round-trip, an empty record says so, committed files name their hardware."""
import json

import pytest

from lessons_lib import device, results


# --- results -------------------------------------------------------------------------------
def test_results_round_trip_and_keep_other_lessons(tmp_path):
    info = device.describe("cpu")
    results.save(info, {"a": {"x": 1}}, tmp_path)
    path = results.save(info, {"b": {"y": 2}}, tmp_path)
    data = json.loads(path.read_text())
    assert data["lessons"] == {"a": {"x": 1}, "b": {"y": 2}}
    for key in ("name", "torch", "date", "kind"):
        assert data["meta"][key]
    (path.parent / "broken.json").write_text("{not json")
    with pytest.warns(UserWarning, match="broken.json"):
        assert len(results.load_all(tmp_path)) == 1


def test_describe_recorded_is_honest_when_empty(tmp_path):
    assert "No recorded results" in results.describe_recorded("nothing", tmp_path)


def test_committed_reference_files_name_their_hardware():
    for rec in results.load_all():
        for key in ("name", "kind", "torch", "date"):
            assert rec.meta.get(key), f"{rec.path.name} lacks {key}"
