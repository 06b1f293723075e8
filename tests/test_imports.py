"""lessons_lib's own import graph, read from the source (ast), function-level imports included:
it has no cycle, and data flows one way: a lesson package imports the toolkit, never the reverse."""
import ast
import re
from pathlib import Path

import lessons_lib

PKG = Path(lessons_lib.__file__).resolve().parent
LESSON = re.compile(r"^lessons_lib\.lesson\d\d_")


def _modules() -> dict[str, Path]:
    """'lessons_lib.x.y' -> its file, for every module and package of lessons_lib."""
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["lessons_lib", *parts])] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The lessons_lib modules `name` imports anywhere in its source (top level, functions, methods)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            submodules = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules]
            found.update(submodules)
            if len(submodules) < len(node.names):  # `from m import name`: m itself runs
                found.add(module)
    # The front door's lazy names (lessons_lib.__getattr__) import their modules by name.
    if name == "lessons_lib":
        found.update(f"lessons_lib.{m}" for m, _attr in lessons_lib._FRONT_DOOR.values())
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_the_graph_is_read_from_source_with_function_level_imports():
    graph = _graph()
    assert "lessons_lib.timing" in graph["lessons_lib.device"]  # thread_choice imports it inside the function
    assert "lessons_lib.compiling" in graph["lessons_lib.device"]  # compile_problem, likewise
    assert "lessons_lib.trace" in graph["lessons_lib.memory"]
    assert "lessons_lib.grouped_linear" in graph["lessons_lib"]  # the front door
    lessons = [m for m in graph if LESSON.match(m)]
    assert lessons and any("lessons_lib.timing" in graph[m] for m in lessons)  # `from .. import timing` is seen


def test_the_import_graph_has_no_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_toolkit_never_imports_a_lesson():
    graph = _graph()
    toolkit = [m for m in graph if not LESSON.match(m)]
    wrong = {m: sorted(d for d in graph[m] if LESSON.match(d)) for m in toolkit}
    assert not {m: d for m, d in wrong.items() if d}


def test_a_cycle_would_be_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _top_level_imports(name: str, path: Path) -> set[str]:
    """What importing `name` runs: imports in its module body (classes, ifs and trys too), not in functions."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in _modules())
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_the_doctor_and_the_workspace_import_only_the_standard_library():
    """`python -m lessons_lib.doctor` must run where torch is missing or fails to load (issue 28): the package's
    __init__ and the torch-free tools import, at import time, only the standard library and each other."""
    import sys

    modules = _modules()
    free = {"lessons_lib", *(f"lessons_lib.{m}" for m in lessons_lib._TORCH_FREE)}
    assert free <= set(modules)
    wrong = {}
    for name in sorted(free):
        for imported in _top_level_imports(name, modules[name]):
            root = imported.split(".")[0]
            ok = imported in free or (root != "lessons_lib" and root in sys.stdlib_module_names | {"__future__"})
            if not ok:
                wrong.setdefault(name, []).append(imported)
    assert not wrong, f"imports that need more than the standard library: {wrong}"


def test_the_no_torch_rule_would_catch_a_top_level_import(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import os\nimport torch\ntry:\n    from .device import pick\nexcept ImportError:\n    pass\n"
                    "def f():\n    import numpy\n")
    assert _top_level_imports("lessons_lib.m", path) == {"os", "torch", "lessons_lib.device"}
