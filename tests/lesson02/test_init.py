"""Lesson 02's package (__init__.py): it exports what the notebook and its solution use, and nothing else."""
import json
import re
from pathlib import Path

from lessons_lib import lesson02_autograd_memory as L

NOTEBOOKS = [Path(__file__).parents[2] / "notebooks" / "02_autograd_memory.ipynb",
             Path(__file__).parents[2] / "notebooks" / "solutions" / "02_autograd_memory_solution.ipynb"]
SHARED: set[str] = set()  # explorer (tests/test_widgets.py, workshop/explorer_times.py) is a notebook name too
SUBMODULES = {"variants", "evidence", "evidence_variants", "evidence_compile", "explore", "exercise"}


def _used_by_notebooks() -> set[str]:
    names = set()
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        names |= set(re.findall(r"\bL\.(\w+)", source))
    return names


def test_the_package_exports_every_name_the_notebooks_use():
    missing = sorted(n for n in _used_by_notebooks() if not hasattr(L, n))
    assert not missing, f"the notebooks use L.{missing}, which lessons_lib.lesson02_autograd_memory does not export"


def test_the_package_exports_nothing_else():
    exported = {n for n in vars(L) if not n.startswith("_") and n != "annotations"} - SUBMODULES
    assert exported == _used_by_notebooks() | SHARED


def test_every_file_of_the_package_stays_under_about_400_lines():
    for path in Path(L.__file__).parent.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name
