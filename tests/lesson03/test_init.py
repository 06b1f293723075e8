"""Lesson 03's package (__init__.py): it exports what the notebook and its solution use, and nothing else."""
import json
import re
from pathlib import Path

from lessons_lib import lesson03_grouped_linear as L

NOTEBOOKS = [Path(__file__).parents[2] / "notebooks" / "03_grouped_linear.ipynb",
             Path(__file__).parents[2] / "notebooks" / "solutions" / "03_grouped_linear_solution.ipynb"]
SHARED = {"explorer"}  # also used by tests/test_widgets.py and workshop/explorer_times.py


def _used_by_notebooks() -> set[str]:
    names = set()
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        names |= set(re.findall(r"\bL\.(\w+)", source))
    return names


def test_the_package_exports_every_name_the_notebooks_use():
    missing = sorted(n for n in _used_by_notebooks() if not hasattr(L, n))
    assert not missing, f"the notebooks use L.{missing}, which lessons_lib.lesson03_grouped_linear does not export"


def test_the_package_exports_nothing_else():
    submodules = {"variants", "lessons", "evidence", "inside", "crossover", "explore", "exercise"}
    exported = {n for n in vars(L) if not n.startswith("_") and n != "annotations"} - submodules
    assert exported == _used_by_notebooks() | SHARED
