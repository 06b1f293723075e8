"""What a new user installs: importing the library is silent, and the three install files agree."""
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lessons_lib

ROOT = Path(__file__).resolve().parents[1]


def _modules():
    return sorted(f"lessons_lib.{m.name}" for m in pkgutil.iter_modules(lessons_lib.__path__))


@pytest.mark.own_process
def test_importing_every_module_writes_nothing_to_stderr():
    # A warning at import lands in a notebook cell's output: nbval then fails it, and it scares readers.
    code = "import " + ", ".join(_modules())
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def _requirement(line: str) -> tuple[str, str] | None:
    line = line.split("#")[0].strip().strip('"').strip("',")
    m = re.match(r"^([A-Za-z][A-Za-z0-9_.-]*)\s*(>=\s*[0-9.]+)?", line)
    if not m or line.startswith("-"):
        return None
    name = {"pytorch": "torch"}.get(m.group(1).lower(), m.group(1).lower())
    return name, (m.group(2) or "").replace(" ", "")


def _pyproject() -> dict[str, str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import pytest

        tomllib = pytest.importorskip("tomli")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = data["project"]["dependencies"] + data["project"]["optional-dependencies"]["course"]
    return dict(r for r in map(_requirement, reqs) if r)


def _listed(path: str) -> dict[str, str]:
    pairs = (_requirement(line.lstrip(" -")) for line in (ROOT / path).read_text().splitlines())
    return {n: v for n, v in (p for p in pairs if p) if n not in {"python", "pip", "name", "channels", "dependencies"}}


def test_requirements_txt_has_every_course_dependency_of_pyproject_with_its_floor():
    listed = _listed("requirements.txt")
    assert {n: listed.get(n) for n in _pyproject()} == _pyproject()


def test_environment_yml_has_every_course_dependency_of_pyproject_with_its_floor():
    listed = _listed("environment.yml")
    assert {n: listed.get(n) for n in _pyproject()} == _pyproject()


def test_readme_gives_the_cpu_install_before_command_1_and_ends_command_1_in_the_working_copy():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", readme, re.S).group(1)
    commands = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert commands[0] == "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert commands[1] == "pip install -r requirements.txt && python -m lessons_lib.workspace"
    assert commands[2] == 'pip install -e ".[test]" && python -m pytest'
    assert "--allow-root" in readme and "root" in readme[readme.index("--allow-root") - 300:]


# --- moved from test_toolkit.py ------------------------------------------------------------------
def test_an_old_torch_gets_a_clear_message(monkeypatch):
    import sys

    import lessons_lib

    monkeypatch.setitem(sys.modules, "torch.utils._python_dispatch", None)  # as if torch lacked it
    with pytest.raises(ImportError, match="needs PyTorch 2.9 or newer"):
        lessons_lib._check_torch()
