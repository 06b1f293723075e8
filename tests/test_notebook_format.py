"""Every notebook and solution in canonical form (as NVIDIA's accelerated-computing-hub keeps one).

Checked: Colab metadata asking for a GPU, an "Open in Colab" badge in the first cell pointing at
the notebook's own path, the canonical set-up cell, outputs in execution order, no stored errors,
no machine paths, and a solution for every exercise.

    python -m tests.test_notebook_format --fix notebooks/*.ipynb notebooks/solutions/*.ipynb

rewrites metadata, badge and set-up cell from lessons_lib.colab (outputs are left alone).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from lessons_lib import colab

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))
ALL = NOTEBOOKS + SOLUTIONS
MACHINE_PATH = re.compile(r"/(work|tmp|root|home)/[A-Za-z0-9_.-]+/")
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\(([^)]*)\)")


def _rel(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _code(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]


ids = [p.name for p in ALL]


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_metadata_asks_colab_for_a_gpu(path):
    meta = _load(path)["metadata"]
    assert (meta.get("accelerator"), meta.get("colab", {}).get("gpuType")) == ("GPU", "T4")


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_kernel_is_python3(path):
    meta = _load(path)["metadata"]
    assert (meta["kernelspec"]["name"], meta["language_info"]["name"]) == ("python3", "python")


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_first_cell_has_a_badge_to_this_notebook(path):
    first = "".join(_load(path)["cells"][0]["source"])
    assert BADGE.findall(first) == [colab.colab_url(_rel(path))]


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_setup_cell_is_the_canonical_one(path):
    assert "".join(_code(_load(path))[0]["source"]) == colab.setup_cell_source()


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_outputs_are_in_execution_order(path):
    counts = [c["execution_count"] for c in _code(_load(path))]
    assert counts == list(range(1, len(counts) + 1)), "run Restart & Run All before committing"


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_no_stored_errors(path):
    errors = [o for c in _code(_load(path)) for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert errors == []


@pytest.mark.parametrize("path", ALL, ids=ids)
def test_no_machine_paths(path):
    leaks = [c["source"][:1] for c in _code(_load(path)) if MACHINE_PATH.search(json.dumps(c.get("outputs", [])))]
    assert leaks == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_exercise_has_a_solution(path):
    has_exercise = any(c["cell_type"] == "markdown" and "Exercise" in "".join(c["source"]) for c in _load(path)["cells"])
    solution = path.parent / "solutions" / f"{path.stem}_solution.ipynb"
    assert solution.exists() or not has_exercise


def fix(path: Path) -> None:
    """Canonical metadata, badge and set-up cell; nothing else changes."""
    nb = _load(path)
    meta = nb["metadata"]
    for key, value in colab.METADATA.items():
        if key == "language_info":
            meta.setdefault("language_info", {})["name"] = "python"
        elif key == "colab":
            meta.setdefault("colab", {}).update(value)
        else:
            meta[key] = value
    first = nb["cells"][0]
    text = BADGE.sub("", "".join(first["source"])).rstrip("\n")
    lines = text.split("\n")
    badge = colab.badge_markdown(_rel(path))
    lines = lines[:1] + ["", badge] + [ln for ln in lines[1:] if ln.strip() or True]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    first["source"] = text.splitlines(keepends=True)
    code = _code(nb)
    code[0]["source"] = colab.setup_cell_source().splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] != "--fix":
        sys.exit("usage: python -m tests.test_notebook_format --fix NOTEBOOK...")
    for p in args[1:]:
        fix(Path(p))
        print("fixed", p)
