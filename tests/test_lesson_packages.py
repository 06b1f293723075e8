"""Every lesson package (lessons_lib/lessonNN_*/, issue 21): its __init__.py exports exactly the names its
notebook and solution use as `L.<name>` (plus the few that other code shares), and no file of it exceeds
about 400 lines. One test for all lessons: a new lesson is checked the day its package exists."""
import importlib
import json
import pkgutil
import re
import types
from pathlib import Path

import pytest

import lessons_lib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(i.name for i in pkgutil.iter_modules(lessons_lib.__path__)
                  if i.ispkg and re.fullmatch(r"lesson\d\d_\w+", i.name))
# Names a package exports for code other than its notebooks (these may or may not be notebook names too)
SHARED = {
    "lesson03_grouped_linear": {"explorer"},  # tests/test_widgets.py, workshop/explorer_times.py
    "lesson04_launch_overhead": {"explorer", "fixed_model"},  # fixed_model: lesson05_cuda_graphs/on_gpu.py
    "lesson05_cuda_graphs": {"explorer"},
    "lesson06_data_movement": {"cat_explorer"},  # tests/test_widgets.py, workshop/explorer_times.py
}


def _package(name: str):
    return importlib.import_module(f"lessons_lib.{name}")


def _used_by_notebooks(name: str) -> set[str]:
    key = name[len("lesson"):len("lesson") + 2]
    paths = [*ROOT.glob(f"notebooks/{key}_*.ipynb"), *ROOT.glob(f"notebooks/solutions/{key}_*.ipynb")]
    assert len(paths) == 2, f"lesson {key}: expected a notebook and its solution, found {paths}"
    names = set()
    for path in paths:
        cells = json.loads(path.read_text())["cells"]
        source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        names |= set(re.findall(r"\bL\.(\w+)", source))
    return names


def test_every_lesson_is_a_package():
    assert [p[:8] for p in PACKAGES] == [f"lesson{i:02d}" for i in range(len(PACKAGES))] and len(PACKAGES) >= 8
    assert not list((ROOT / "lessons_lib").glob("lesson[0-9][0-9]_*.py")), "a lesson still a single module"


@pytest.mark.parametrize("name", PACKAGES)
def test_the_package_exports_every_name_the_notebooks_use(name):
    L = _package(name)
    missing = sorted(n for n in _used_by_notebooks(name) if not hasattr(L, n))
    assert not missing, f"the notebooks use L.{missing}, which lessons_lib.{name} does not export"


@pytest.mark.parametrize("name", PACKAGES)
def test_the_package_exports_nothing_else(name):
    L = _package(name)
    exported = {n for n, v in vars(L).items() if not n.startswith("__") and n != "annotations"  # _xy (05) counts
                and not (isinstance(v, types.ModuleType) and v.__name__.startswith(L.__name__ + "."))}
    assert exported == _used_by_notebooks(name) | SHARED.get(name, set())


@pytest.mark.parametrize("name", PACKAGES)
def test_every_file_of_the_package_stays_under_about_400_lines(name):
    for path in Path(_package(name).__file__).parent.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, f"{name}/{path.name}"


def test_every_file_of_the_library_stays_under_about_400_lines():
    # the house rule, for the shared modules too (syncs.py had grown to 405)
    root = Path(lessons_lib.__file__).parent
    long = [str(p.relative_to(root)) for p in root.rglob("*.py") if len(p.read_text().splitlines()) > 400]
    assert not long, long
