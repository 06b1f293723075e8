"""The package exports exactly the names its notebooks use, and no file of it exceeds 400 lines."""
import ast
import json
from pathlib import Path

import lessons_lib.lesson07_capstone as L

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = [ROOT / "notebooks" / "07_capstone.ipynb", ROOT / "notebooks" / "solutions" / "07_capstone_solution.ipynb"]


def _used() -> set[str]:
    names = set()
    for nb in NOTEBOOKS:
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            src = "\n".join(line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!"))
                            else line for line in src.splitlines())
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "L":
                    names.add(node.attr)
    return names


def test_exports_are_the_notebooks_names():
    exported = {n for n in vars(L) if not n.startswith("_") and n not in {"annotations", "evidence", "exercise",
                                                                           "explore", "fixes", "model"}}
    assert _used() == exported


def test_no_file_over_400_lines():
    for f in Path(L.__file__).parent.glob("*.py"):
        assert len(f.read_text().splitlines()) <= 400, f.name
