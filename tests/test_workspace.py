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


# --- issue 28: what the command says, solution links, one-line refusals ------------------------------------


def test_a_notebook_the_reader_ran_is_not_said_to_have_changed_in_the_course(course, tmp_path):
    dest = tmp_path / "ws"
    workspace.sync(course, dest)
    for name in LESSONS[:3]:  # the reader ran three lessons: JupyterLab saved their outputs
        (dest / name).write_text("outputs of my run")
    report = workspace.sync(course, dest)
    assert report["kept"] == [] and sorted(report["edited"]) == LESSONS[:3]
    said = workspace.describe(report, dest)
    assert "course's copy changed" not in said and "rename" not in said and "3 with your changes" in said
    (course / "notebooks" / LESSONS[1]).write_text("the course moved on")  # now the course's copy did change
    report = workspace.sync(course, dest)
    assert report["kept"] == [LESSONS[1]] and sorted(report["edited"]) == [LESSONS[0], LESSONS[2]]
    said = workspace.describe(report, dest)
    assert said.count("the course's copy changed") == 1 and f"kept your {LESSONS[1]}" in said
    assert (dest / LESSONS[1]).read_text() == "outputs of my run"


def test_a_manifest_written_before_issue_28_still_tells_untouched_from_edited(course, tmp_path):
    dest = tmp_path / "ws"
    workspace.sync(course, dest)
    old = {name: entry["course"] for name, entry in json.loads((dest / workspace.MANIFEST).read_text()).items()}
    (dest / workspace.MANIFEST).write_text(json.dumps(old))  # the old format: name -> hash of the course file
    (dest / LESSONS[0]).write_text("mine")
    (course / "notebooks" / LESSONS[2]).write_text("updated lesson")
    report = workspace.sync(course, dest)
    assert report["edited"] == [LESSONS[0]] and report["updated"] == [LESSONS[2]] and report["kept"] == []


def _relative_links(notebook: Path) -> list[str]:
    """Every link target in a notebook's markdown that is a file path (not a web address or an anchor)."""
    found = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            found += re.findall(r"\]\(\s*<?([^)\s>]+)>?\s*\)", text) + re.findall(r'(?:href|src)="([^"]+)"', text)
    return [t for t in found if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


@pytest.mark.parametrize("solutions", [False, True])
def test_every_link_in_the_working_copy_resolves(tmp_path, solutions):
    dest = tmp_path / "ws"
    workspace.sync(ROOT, dest, solutions=solutions)
    copied = sorted(dest.rglob("*.ipynb"))
    assert len(copied) == len(LESSONS) * (2 if solutions else 1)
    dead = [f"{nb.relative_to(dest)} -> {t}" for nb in copied for t in _relative_links(nb)
            if not (nb.parent / t.split("#")[0]).exists()]
    assert not dead, dead
    for name in LESSONS:  # and every lesson still names its solution: a link, or how to get it
        text = (dest / name).read_text(encoding="utf-8")
        solution = name.replace(".ipynb", "_solution.ipynb")
        if solutions:
            assert f"](solutions/{solution})" in text, name
        else:
            assert f"`solutions/{solution}` (`python -m lessons_lib.workspace --solutions` copies" in text, name


def test_solution_references_in_both_forms():
    here, course = {"01_x_solution.ipynb"}, {"01_x_solution.ipynb", "02_y_solution.ipynb"}
    link = "A solution is in [`solutions/01_x_solution.ipynb`](solutions/01_x_solution.ipynb)."
    span = "The solution is in\n`notebooks/solutions/01_x_solution.ipynb`."
    assert workspace.solution_links(link, here, course) == link
    assert workspace.solution_links(span, here, course) == ("The solution is in\n[`solutions/01_x_solution.ipynb`]"
                                                            "(solutions/01_x_solution.ipynb).")
    absent = workspace.solution_links(link.replace("01_x", "02_y"), here, course)
    assert "](" not in absent and "--solutions` copies the solutions into `solutions/` here" in absent
    room = workspace.solution_links(span.replace("01_x", "03_z"), here, course)
    assert "](" not in room and "your instructor hands it out" in room


@pytest.mark.parametrize("raw", [b"{", b"[]", b'{"cells": [1]}', b'{"cells": [{"cell_type": "markdown"}]}'])
def test_a_notebook_it_cannot_read_is_copied_as_it_is(raw):
    assert workspace.render(raw, set(), set()) == raw


def test_links_follow_the_solutions_into_an_untouched_copy_only(course, tmp_path):
    for name in LESSONS[:2]:
        sol = name.replace(".ipynb", "_solution.ipynb")
        nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": [f"See [it](solutions/{sol})."]}]}
        (course / "notebooks" / name).write_text(json.dumps(nb))
    dest = tmp_path / "ws"
    workspace.sync(course, dest)
    assert "](solutions/" not in (dest / LESSONS[0]).read_text()
    (dest / LESSONS[1]).write_text((dest / LESSONS[1]).read_text() + " ")  # the reader ran this one
    report = workspace.sync(course, dest, solutions=True)
    assert LESSONS[0] in report["updated"] and "](solutions/" in (dest / LESSONS[0]).read_text()
    assert LESSONS[1] in report["edited"] and report["kept"] == []  # the reader's copy is left alone
    assert workspace.sync(course, dest)["updated"] == []  # solutions/ is here now: the links stay


def _main(capsys, *args):
    status = workspace.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_dir_naming_a_file_is_one_line(course, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(course)
    (tmp_path / "notes.txt").write_text("mine")
    status, _out, err = _main(capsys, "--copy-only", "--dir", str(tmp_path / "notes.txt"))
    assert status == 1 and "is a file, not a folder" in _one_line(err)
    status, _out, err = _main(capsys, "--copy-only", "--dir", str(tmp_path / "notes.txt" / "sub"))
    assert status == 1 and "cannot create the folder" in _one_line(err)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_file_named_workspace_in_the_clone_is_one_line(course, monkeypatch, capsys):
    monkeypatch.chdir(course)
    (course / "workspace").write_text("not a folder")
    status, _out, err = _main(capsys, "--copy-only")
    assert status == 1 and "move the file away, or choose another folder with --dir" in _one_line(err)


def test_a_read_only_folder_is_one_line_and_nothing_is_written(course, tmp_path, monkeypatch, capsys):
    """Simulated (the tests may run as root, whom permissions do not stop): os.access says no."""
    monkeypatch.chdir(course)
    empty, ws = tmp_path / "empty", tmp_path / "ws"
    empty.mkdir()
    workspace.sync(course, ws)
    (course / "notebooks" / LESSONS[2]).write_text("an update is due")
    before = {p: p.read_bytes() for p in ws.iterdir()}
    monkeypatch.setattr(workspace.os, "access", lambda path, mode: False)
    for folder in (empty, ws):
        status, _out, err = _main(capsys, "--copy-only", "--dir", str(folder))
        assert status == 1 and "permission denied" in _one_line(err) and "Nothing was changed" in err
    assert list(empty.iterdir()) == [] and {p: p.read_bytes() for p in ws.iterdir()} == before
    (course / "notebooks" / LESSONS[2]).write_text(json.dumps({"lesson": LESSONS[2]}))  # nothing due: no refusal
    assert _main(capsys, "--copy-only", "--dir", str(ws))[0] == 0


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_really_read_only_folder(course, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(course)
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    status, _out, err = _main(capsys, "--copy-only", "--dir", str(ro))
    assert status == 1 and "permission denied" in _one_line(err) and list(ro.iterdir()) == []


@pytest.mark.parametrize("manifest", ["", '{"00_timing_honestly.ipynb": {"cou', "[]", "\xff\xfe"])
def test_an_unreadable_manifest_is_a_note_and_keeps_every_file(course, tmp_path, capsys, monkeypatch, manifest):
    monkeypatch.chdir(course)
    dest = tmp_path / "ws"
    workspace.sync(course, dest)
    (dest / LESSONS[0]).write_text("my run")
    (dest / workspace.MANIFEST).write_bytes(manifest.encode("latin-1"))
    status, out, err = _main(capsys, "--copy-only", "--dir", str(dest))
    assert status == 0 and err == ""
    assert out.count("was unreadable") == 1 and f"kept your {LESSONS[0]}: it differs" in out
    assert (dest / LESSONS[0]).read_text() == "my run"
    status, out, _err = _main(capsys, "--copy-only", "--dir", str(dest))  # a new record: quiet from now on
    assert "was unreadable" not in out and "kept your" not in out and "1 with your changes" in out


def test_a_write_that_fails_midway_leaves_whole_files_and_a_true_record(course, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(course)
    dest = tmp_path / "ws"
    real, written = workspace._write, []

    def disk_full_at_the_third(path, data):
        if len(written) == 2:
            raise OSError(28, "No space left on device", str(path))
        real(path, data)
        written.append(path.name)

    monkeypatch.setattr(workspace, "_write", disk_full_at_the_third)
    status, _out, err = _main(capsys, "--copy-only", "--dir", str(dest))
    assert status == 1 and "No space left on device" in _one_line(err)
    assert sorted(p.name for p in dest.iterdir()) == sorted(written)  # no temporary, no half file
    monkeypatch.setattr(workspace, "_write", real)
    report = workspace.sync(course, dest)
    assert sorted(report["unchanged"]) == sorted(written) and report["kept"] == report["differs"] == []


def test_atomic_write_leaves_no_half_file(tmp_path, monkeypatch):
    target = tmp_path / "a.ipynb"
    target.write_text("before")
    monkeypatch.setattr(workspace.os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(OSError):
        workspace._write(target, b"after")
    assert target.read_text() == "before" and [p.name for p in tmp_path.iterdir()] == ["a.ipynb"]


@pytest.mark.parametrize("args, meant", [(["--directory", "X"], "--dir"), (["--dirs", "X"], "--dir"),
                                         (["-dir", "X"], "--dir"), (["--notebook-dir=X"], "--dir"),
                                         (["--ServerApp.root_dir=X"], "--dir"), (["--solutons"], "--solutions"),
                                         (["--copyonly"], "--copy-only"), (["--copy_only"], "--copy-only")])
def test_a_near_miss_of_our_options_is_refused_before_copying(course, monkeypatch, capsys, args, meant):
    monkeypatch.chdir(course)
    monkeypatch.setattr(workspace.os, "execv", _no_launch)
    monkeypatch.setattr(subprocess, "call", _no_launch)
    status, out, err = _main(capsys, *args)
    assert status == 2 and f"did you mean {meant}?" in _one_line(err)
    assert out == "" and not (course / "workspace").exists()


@pytest.mark.parametrize("option", ["--allow-root", "--no-browser", "--port", "--ip=0.0.0.0", "--ServerApp.token=x",
                                    "--debug", "--app-dir=/x", "--dev-mode", "--core-mode", "--collaborative",
                                    "--LabApp.default_url=/lab", "--browser=firefox", "--autoreload"])
def test_jupyterlab_options_are_not_near_misses(option):
    assert workspace.near_miss(option) is None


def test_copy_only_with_jupyterlab_options_is_refused(course, monkeypatch, capsys):
    monkeypatch.chdir(course)
    status, _out, err = _main(capsys, "--copy-only", "--port", "8889")
    assert status == 2 and "would be ignored" in _one_line(err) and not (course / "workspace").exists()


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
@pytest.mark.own_process
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
