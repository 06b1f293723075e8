"""The reader's working copy (python -m lessons_lib.workspace), and a room without solutions/."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lessons_lib import workspace

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture
def course(tmp_path):
    """A small course folder: the real notebooks' names, tiny contents we can change."""
    root = tmp_path / "course"
    (root / "notebooks" / "solutions").mkdir(parents=True)
    for name in LESSONS:
        (root / "notebooks" / name).write_text(json.dumps({"lesson": name}))
        (root / "notebooks" / "solutions" / name.replace(".ipynb", "_solution.ipynb")).write_text("{}")
    return root


def test_copies_the_lessons_and_a_start_here_but_no_solutions(course, tmp_path):
    dest = tmp_path / "ws"
    report = workspace.sync(course, dest)
    assert sorted(report["copied"]) == LESSONS
    listed = sorted(p.name for p in dest.iterdir() if not p.name.startswith("."))
    assert listed[0] == workspace.START_HERE  # the first thing JupyterLab lists
    assert listed[1] == workspace.FIRST == "00_timing_honestly.ipynb"
    assert not (dest / "solutions").exists()  # nothing listed before the lessons
    assert "Start with lesson 00" in (dest / workspace.START_HERE).read_text()


def test_solutions_only_when_asked(course, tmp_path):
    report = workspace.sync(course, tmp_path / "ws", solutions=True)
    assert len([n for n in report["copied"] if n.startswith("solutions/")]) == len(LESSONS)


def test_a_second_run_changes_nothing(course, tmp_path):
    dest = tmp_path / "ws"
    workspace.sync(course, dest)
    report = workspace.sync(course, dest)
    assert report["copied"] == report["updated"] == report["kept"] == []
    assert sorted(report["unchanged"]) == LESSONS


def test_an_edited_copy_is_never_overwritten(course, tmp_path):
    dest = tmp_path / "ws"
    workspace.sync(course, dest)
    mine = dest / LESSONS[1]
    mine.write_text("my work")
    (course / "notebooks" / LESSONS[1]).write_text("the course moved on")
    report = workspace.sync(course, dest)
    assert report["kept"] == [LESSONS[1]]
    assert mine.read_text() == "my work"
    assert "kept your 01_" in workspace.describe(report, dest) and "rename yours" in workspace.describe(report, dest)
    # still kept on the next run: the manifest does not learn the reader's edit as the course's copy
    assert workspace.sync(course, dest)["kept"] == [LESSONS[1]]


def test_an_untouched_copy_follows_the_course(course, tmp_path):
    dest = tmp_path / "ws"
    workspace.sync(course, dest)
    (course / "notebooks" / LESSONS[2]).write_text("updated lesson")
    report = workspace.sync(course, dest)
    assert report["updated"] == [LESSONS[2]]
    assert (dest / LESSONS[2]).read_text() == "updated lesson"


def _no_launch(*a, **k):
    pytest.fail("--copy-only must not start JupyterLab")


def test_copy_only_starts_nothing(course, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(course)
    monkeypatch.setattr(subprocess, "call", _no_launch)
    monkeypatch.setattr(workspace.os, "execv", _no_launch)
    assert workspace.main(["--copy-only", "--dir", str(tmp_path / "ws")]) == 0
    assert "Your working copy" in capsys.readouterr().out


def test_opens_jupyterlab_on_lesson_00_and_passes_its_options_through(course, tmp_path, monkeypatch):
    monkeypatch.chdir(course)
    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd, cwd=None: calls.append((cmd, cwd)) or 0)
    monkeypatch.setattr(workspace.os, "execv", lambda exe, cmd: calls.append((cmd, os.getcwd())) or 0)
    assert workspace.main(["--dir", str(tmp_path / "ws"), "--allow-root", "--no-browser"]) == 0
    (cmd, cwd), = calls
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={(tmp_path / 'ws').resolve()}" in cmd
    assert "--LabApp.default_url=/lab/tree/00_timing_honestly.ipynb" in cmd
    assert {"--allow-root", "--no-browser"} <= set(cmd)
    assert Path(cwd).resolve() == (tmp_path / "ws").resolve()


def test_the_default_workspace_is_ignored_by_git():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "-q", "workspace/00_timing_honestly.ipynb"], cwd=ROOT)
    assert done.returncode == 0, "add /workspace/ to .gitignore"


def test_the_real_course_has_lesson_00():
    assert workspace.FIRST in LESSONS


# --- a room's copy without notebooks/solutions: the checkers need nothing from it --------------------


WHOLE_SOLUTION_LAST = {"07"}  # 07's solution checks the loop's fix first (the model's pitfalls still in it)
# and the whole solution last; the others check the solution first, then show what a wrong answer gets


def _solution_script(path: Path) -> str:
    """The solution notebook's code up to the checker call on its whole solution, set-up cell replaced."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    code = ["".join(c["source"]) for c in cells if "".join(c["source"]).strip()][1:]
    calls = [i for i, c in enumerate(code) if "check_exercise" in c]
    upto = calls[-1] if path.name[:2] in WHOLE_SOLUTION_LAST else calls[0]
    return "\n".join(code[: upto + 1])


@pytest.mark.slow
def test_checkers_pass_the_solutions_in_a_copy_without_the_solutions_folder(tmp_path):
    room = tmp_path / "room"
    shutil.copytree(ROOT / "lessons_lib", room / "lessons_lib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "notebooks", room / "notebooks", ignore=shutil.ignore_patterns("solutions"))
    assert not (room / "notebooks" / "solutions").exists()
    parts = ["import matplotlib\nmatplotlib.use('Agg')\nimport lessons_lib\n"
             "print('from', lessons_lib.__path__[0])\nfrom lessons_lib import setup\ndevice = setup(quiet=True)"]
    for path in sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb")):
        parts.append(f"print('=== {path.name[:2]}')\n" + _solution_script(path))
    script = "\n".join(parts)
    # import from the room's copy only (not the checkout's editable install)
    prelude = f"import sys; sys.path.insert(0, {str(room)!r})\n"
    done = subprocess.run([sys.executable, "-c", prelude + script], cwd=room / "notebooks", capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"from {room / 'lessons_lib'}")
    verdicts = re.split(r"^=== (\d\d)$", done.stdout, flags=re.M)[1:]
    by_lesson = dict(zip(verdicts[::2], verdicts[1::2]))
    assert sorted(by_lesson) == [f"{i:02d}" for i in range(len(LESSONS))]
    for lesson, text in by_lesson.items():
        assert f"Exercise {lesson}" in text and re.search("[✓✗]", text), f"lesson {lesson}: no verdict: {text}"
        last = text[text.rindex(f"Exercise {lesson}"):]  # the solution's final verdict
        if lesson != "00":  # 00 grades sleeps against the wall clock: a loaded machine may fail it (not this test's subject)
            assert "✗" not in last, f"lesson {lesson}'s checker, without solutions/: {last}"
