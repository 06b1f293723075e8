"""Room set-ups: binder/ (repo2docker, CPU-only rooms) and docker/Dockerfile (a JupyterHub with GPUs).

The Binder test asks repo2docker itself for the Dockerfile it would build (`--no-build --debug`
needs no Docker daemon); it skips, saying so, where repo2docker is not installed
(`pip install jupyter-repo2docker`).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lessons_lib import colab

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REQ = re.compile(r"^([A-Za-z][A-Za-z0-9_.-]*)\s*((?:[<>=!~]=?\s*[0-9][0-9A-Za-z.+*]*\s*,?\s*)*)$")


def _parse(line: str) -> tuple[str, str] | None:
    line = line.split("#")[0].strip().strip('"').strip("'")
    m = REQ.match(line)
    return (m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")) if m else None


def _requirements(path: Path) -> dict[str, str]:
    return dict(r for r in map(_parse, path.read_text().splitlines()) if r)


def _satisfies_floor(spec: str, floor: str) -> bool:
    """`spec` (a floor like >=2.9 or a pin like ==2.13.0+cpu) admits no version below `floor` (>=X)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if spec == floor:
        return True
    pin = re.fullmatch(r"==([0-9][0-9A-Za-z.+]*)", spec)
    return bool(pin) and Version(pin.group(1)) in SpecifierSet(floor)


TOP = _requirements(ROOT / "requirements.txt")


def test_top_level_requirements_parse():
    assert TOP["torch"].startswith(">=") and {"jupyterlab", "ipywidgets"} <= set(TOP)


# --- binder/ -----------------------------------------------------------------------------------------


BINDER = ROOT / "binder" / "requirements.txt"


def test_binder_installs_cpu_torch_the_widgets_and_the_course():
    text = BINDER.read_text()
    lines = [ln.split("#")[0].strip() for ln in text.splitlines() if ln.split("#")[0].strip()]
    assert f"--extra-index-url {CPU_INDEX}" in lines
    binder = _requirements(BINDER)
    assert binder["torch"].startswith("==") and binder["torch"].endswith("+cpu"), "pin a +cpu build: never CUDA"
    assert "." in lines, "the course itself"
    for name, floor in TOP.items():
        assert name in binder, f"binder/requirements.txt lacks {name}"
        assert _satisfies_floor(binder[name], floor), f"{name}: {binder[name]} vs requirements.txt {floor}"


def _repo2docker() -> list[str] | None:
    exe = os.environ.get("REPO2DOCKER") or shutil.which("repo2docker")
    if exe:
        return [exe]
    try:
        import repo2docker  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "repo2docker"]


def test_repo2docker_builds_from_binder_with_the_cpu_index_and_the_course(tmp_path):
    cmd = _repo2docker()
    if cmd is None:
        pytest.skip("repo2docker is not installed (`pip install jupyter-repo2docker`; no Docker daemon needed)")
    # a clean copy of the tracked layout (not the reader's workspace or virtual environments)
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".git", ".venv*", "workspace", "__pycache__",
                                                              "*.egg-info", "_build"))
    done = subprocess.run([*cmd, "--no-build", "--debug", str(repo)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    dockerfile = done.stdout + done.stderr
    assert "FROM " in dockerfile, "repo2docker printed no Dockerfile"
    # repo2docker read binder/ (not the top-level requirements.txt or pyproject.toml) ...
    installs = re.findall(r'RUN \$\{KERNEL_PYTHON_PREFIX\}/bin/pip install --no-cache-dir -r "([^"]+)"', dockerfile)
    assert installs == ["binder/requirements.txt"], installs
    assert not re.search(r"pip install --no-cache-dir \.\s*$", dockerfile, re.M), "the top level was read as a package"
    # ... copied the whole repository before installing it (the course is a local path)
    assert dockerfile.index("COPY --chown") < dockerfile.index("COPY --chown=0:0 src/ ") < dockerfile.index(
        'install --no-cache-dir -r "binder/requirements.txt"')
    assert re.search(r"Building conda environment for python=3\.1[0-9]", dockerfile)
    # and the file that Dockerfile installs names the CPU index, a +cpu torch and the course
    installed = (repo / installs[0]).read_text()
    assert CPU_INDEX in installed and re.search(r"^torch==[0-9.]+\+cpu$", installed, re.M)
    assert re.search(r"^\.$", installed, re.M)


def test_readme_has_a_binder_badge_that_opens_lesson_00():
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"\(https://mybinder\.org/v2/gh/([^/]+/[^/]+)/([^?)]+)\?urlpath=([^)]+)\)", readme)
    assert m, "a Binder badge in the README"
    assert (m.group(1), m.group(2)) == (colab.COURSE_REPO, colab.REF)
    assert m.group(3).endswith("00_timing_honestly.ipynb")


# --- docker/Dockerfile (JupyterHub with GPUs) ------------------------------------------------------


DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", joined, re.M)]


def _pip_installs(steps) -> list[list[str]]:
    """The arguments of every `pip install` in a RUN step."""
    found = []
    for kind, args in steps:
        if kind != "RUN":
            continue
        lexer = shlex.shlex(args, posix=True, punctuation_chars="&;|")
        lexer.whitespace_split = True
        command: list[str] = []
        for word in [*lexer, ";"]:
            if word in ("&&", ";", "||", "|"):
                if len(command) > 2 and command[0].endswith("pip") and command[1] == "install":
                    found.append(command[2:])
                command = []
            else:
                command.append(word)
    return found


def test_dockerfile_parses_with_a_pinned_cuda_base():
    steps = _instructions(DOCKERFILE.read_text())
    kinds = [k for k, _ in steps]
    assert kinds[0] == "FROM" and set(kinds) <= {"FROM", "ENV", "RUN", "USER", "COPY", "WORKDIR", "ENTRYPOINT",
                                                  "CMD", "ARG", "LABEL", "EXPOSE"}
    base = steps[0][1]
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-[a-z]+-ubuntu\d\d\.\d\d(@sha256:[0-9a-f]{64})?", base), base


def test_dockerfile_installs_match_requirements_txt():
    installs = _pip_installs(_instructions(DOCKERFILE.read_text()))
    reqs: dict[str, str] = {}
    for args in installs:
        reqs.update(r for r in map(_parse, (a for a in args if not a.startswith("-"))) if r)
    for name, floor in TOP.items():
        assert name in reqs, f"docker/Dockerfile does not install {name} (requirements.txt: {name}{floor})"
        assert _satisfies_floor(reqs[name], floor), f"{name}: Dockerfile {reqs[name]} vs requirements.txt {floor}"
    torch_line = next(a for a in installs if any(x.startswith("torch") for x in a))
    assert re.search(r"download\.pytorch\.org/whl/cu\d+", " ".join(torch_line)), "torch's CUDA build, pinned index"
    assert "jupyterhub" in reqs, "JupyterHub's single-user server"


def test_dockerfile_installs_the_course_and_copies_notebooks_safely():
    text = DOCKERFILE.read_text()
    steps = _instructions(text)
    assert any(k == "COPY" and a.split()[-2] == "." for k, a in steps), "the repository is copied in"
    assert any("/opt/course" in a for a in sum(_pip_installs(steps), [])), "the course is pip-installed"
    cmd = next(a for k, a in steps if k == "CMD")
    assert "lessons_lib.workspace --copy-only" in cmd and "jupyterhub-singleuser" in cmd


def test_dockerfile_leaves_solutions_out_unless_asked():
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG WITH_SOLUTIONS=0$", text, re.M)
    assert 'if [ "$WITH_SOLUTIONS" != 1 ]; then rm -rf /opt/course/notebooks/solutions; fi' in text


# --- the workshop kit --------------------------------------------------------------------------------


KIT = ROOT / "workshop"
LESSON_IDS = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _local_links(path: Path) -> list[str]:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
    return [ln for ln in links if not re.match(r"[a-z]+:", ln)]


def test_readme_links_the_kit_and_the_rooms():
    readme = (ROOT / "README.md").read_text()
    for target in ("workshop/README.md", "workshop/JUPYTERHUB.md", "binder/", "docker/Dockerfile"):
        assert f"]({target})" in readme, target


def test_kit_links_resolve():
    for page in ("README.md", "LESSONS.md", "JUPYTERHUB.md", "NOTES.md"):
        for link in _local_links(KIT / page):
            assert (KIT / link).exists(), f"workshop/{page} links to a missing {link}"


def _section(text: str, lesson: str) -> str:
    m = re.search(rf"^## {lesson} · .*?(?=^## \d\d · |\Z)", text, re.M | re.S)
    assert m, f"workshop/LESSONS.md has no section for lesson {lesson}"
    return m.group(0)


@pytest.mark.parametrize("lesson", LESSON_IDS)
def test_every_lesson_has_its_kit(lesson):
    part = _section((KIT / "LESSONS.md").read_text(), lesson)
    objectives = re.search(r"\*\*Objectives\.\*\*(.*?)\*\*Predict", part, re.S).group(1)
    assert len(re.findall(r"^\d\. ", objectives, re.M)) == 3
    questions = re.search(r"\*\*Predict, then run\.?\*\*(.*?)\*\*Discussion", part, re.S).group(1)
    answers = re.findall(r"^\d\. \*\".*?\"\* — ", questions, re.M | re.S)
    assert 2 <= len(answers) <= 3, f"lesson {lesson}: {len(answers)} predict-then-run questions with answers"
    discussion = re.search(r"\*\*Discussion\.\*\*(.*?)\*\*Projector figure:\*\*", part, re.S).group(1)
    assert len(re.findall(r"^\* ", discussion, re.M)) == 2
    assert re.search(r"\*\*Projector figure:\*\* §\d", part)


GPU_NAME = r"\b(T4|H100|A100|H200)\b"
TIME = r"\d+(\.\d+)? ?(ms|µs|s)\b"
LABEL = r"model|reported|measured|assumed|not yet verified"


def test_kit_labels_every_gpu_figure_it_quotes():
    """A T4/A100/H100/H200 time in LESSONS.md sits in a sentence that names its kind (measured/reported/model)."""
    text = (KIT / "LESSONS.md").read_text()
    for sentence in re.split(r"(?<=[.:;])\s", text):
        if re.search(GPU_NAME, sentence) and re.search(TIME, sentence):
            assert re.search(LABEL, sentence, re.I), sentence


@pytest.mark.parametrize("page", ["README.md", "NOTES.md", "slides.md"])
def test_slides_and_readme_label_every_gpu_figure(page):
    """In the slides and the README, a paragraph or table with a GPU's time names its kind (tables label their
    header or caption, so the unit checked is a block between blank lines)."""
    for block in re.split(r"\n\s*\n", (KIT / page).read_text()):
        if re.search(GPU_NAME, block) and re.search(TIME, block):
            assert re.search(LABEL, block, re.I), block[:300]


def test_kit_names_only_reference_files_that_exist():
    """Measured figures are quoted with their file; a file the kit names must be on disk."""
    ref = ROOT / "lessons_lib" / "reference"
    for page in ("README.md", "LESSONS.md", "JUPYTERHUB.md", "NOTES.md"):
        text = (KIT / page).read_text()
        for name in set(re.findall(r"`([a-z0-9-]+\.json)`", text)):
            assert (ref / name).exists(), f"workshop/{page} names {name}, not in lessons_lib/reference/"


def test_kit_explorer_times_label_the_t4_bound_as_a_model():
    notes = (KIT / "NOTES.md").read_text()
    table = notes[notes.index("## How long an explorer run takes"):]
    assert "Run, T4 (model lower bound)" in table and "Sweep, T4 (model lower bound)" in table
    assert re.search(r"load average [\d.]+ at the start", table), "the measured columns need the load they ran under"
    script = (KIT / "explorer_times.py").read_text()
    assert "(model lower bound)" in script and "harness_seconds" in script


def test_kit_explorer_times_cover_every_explorer_and_the_first_half_precision_run():
    notes = (KIT / "NOTES.md").read_text()
    table = notes[notes.index("## How long an explorer run takes"):]
    rows = {m.group(1) for m in re.finditer(r"^\| (\d\d) \| `", table, re.M)}
    assert rows == set(LESSON_IDS), f"explorer times for lessons {sorted(rows)}, the course has {LESSON_IDS}"
    assert "explorer(training=True)" in table, "lesson 03's second explorer, the training step"
    assert re.search(r"first \*\*float16\*\* Run took\s+[\d.]+ s \(this machine's peaks [\d.]+ s", table)
    script = (KIT / "explorer_times.py").read_text()
    assert "L07.explorer" in script and "training=True" in script and "--first-dtypes" in script


# --- the kit against the course: which lessons it teaches, the slides, and every figure at its source ----------


def _check_kit():
    spec = importlib.util.spec_from_file_location("check_kit", KIT / "check_kit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _syllabi() -> dict[str, str]:
    readme = (KIT / "README.md").read_text()
    part = readme[readme.index("## Syllabi"):readme.index("## Bring your own model")]
    return {m.group(1): m.group(2) for m in re.finditer(r"^### (.+?)\n(.*?)(?=^### |\Z)", part, re.M | re.S)}


def test_kit_covers_every_lesson_and_places_07_and_03():
    readme = (KIT / "README.md").read_text()
    assert f"for every lesson {LESSON_IDS[0]}–{LESSON_IDS[-1]}" in readme, "README.md: LESSONS.md's lesson range"
    syllabi = _syllabi()
    full = next(v for k, v in syllabi.items() if k.startswith("Full day"))
    half = next(v for k, v in syllabi.items() if k.startswith("Half day"))
    short = next(v for k, v in syllabi.items() if k.startswith("90 minutes"))
    assert {m for m in re.findall(r"\*\*(\d\d)\*\*", full)} == set(LESSON_IDS), "the full day teaches every lesson"
    assert {"03", "07"} <= set(re.findall(r"\*\*(\d\d)\*\*", half)), "the half day has 03 (short) and 07"
    assert "Not in 90 minutes: lesson 07" in short, "90 minutes says why 07 is not in it"
    two = next(v for k, v in syllabi.items() if k.startswith("2 hours"))
    assert {"00", "01", "04"} <= set(re.findall(r"\*\*(\d\d)\*\*", two)), "2 hours teaches what 90 minutes does"
    for name, table in syllabi.items():  # each table's rows follow the clock without gaps, to the length it names
        times = re.findall(r"^\| (\d):(\d\d)–(\d):(\d\d) \|", table, re.M)
        for (a, b, c, d), (e, f, _, _) in zip(times, times[1:]):
            assert (int(c), int(d)) == (int(e), int(f)), f"{name}: {c}:{d} is followed by {e}:{f}"
        length = re.search(r"(\d+(?:\.\d+)?) (minutes|hours)", name)
        minutes = float(length.group(1)) * (1 if length.group(2) == "minutes" else 60)
        assert int(times[-1][2]) * 60 + int(times[-1][3]) == minutes, f"{name}: the last row ends at the hour it names"


def _slides() -> list[str]:
    return [s.strip() for s in re.split(r"\n---\n", (KIT / "slides.md").read_text())]


def test_slides_two_per_lesson_with_its_title_and_the_rules_of_thumb():
    """Each lesson: its question and mechanism on a slide titled as its notebook, then its measured table, fix and
    rule of thumb on the next (one slide held all four and ran off the page: tests/test_slides.py)."""
    slides = _slides()
    lessons: dict[str, list[str]] = {}
    for s in slides:
        if m := re.match(r"## (\d\d) · ", s):
            lessons.setdefault(m.group(1), []).append(s)
    assert sorted(lessons) == LESSON_IDS
    for lesson, (first, second) in lessons.items():
        nb = json.loads(next((ROOT / "notebooks").glob(f"{lesson}_*.ipynb")).read_text())
        title = "".join(nb["cells"][0]["source"]).splitlines()[0].lstrip("# ").strip()
        assert first.splitlines()[0] == f"## {title}", f"slide {lesson} is titled as its notebook: {title}"
        for part, slide in (("**Question.**", first), ("**Mechanism.**", first), ("**Fix.**", second),
                            ("**Rule of thumb.**", second)):
            assert part in slide, f"lesson {lesson}'s slides lack {part} where the syllabi expect it"
    rules = next(s for s in slides if s.startswith("## Rules of thumb"))
    assert re.findall(r"^\* \*\*(\d\d)\*\* ", rules, re.M) == LESSON_IDS, "one rule a lesson, in order, on one slide"
    assert any(s.startswith("## Bring your own model") for s in slides)
    assert not list(KIT.glob("*.png")), "the deck is text: no images in workshop/"


def test_kit_quotes_match_their_sources():
    """Figures quoted from a notebook match its committed output at the commit the kit names (facts match it now,
    measurements match it now in their wording); figures from a recorded file match the file; the recorded-files
    table matches each file's meta."""
    check = _check_kit()
    if check._git("rev-parse", "--verify", f"{check.kit_commit()}^{{commit}}") is None:
        pytest.skip(f"no git history with commit {check.kit_commit()} here (an archive or a shallow clone)")
    problems = check.check_notebook_quotes(check.kit_commit()) + check.check_recorded_quotes() \
        + check.check_recorded_files_table()
    assert not problems, "\n".join(problems)


def test_kit_quotes_what_the_code_prints_now():
    """The diagnose report on byom_step.py (and on it fixed), the explorer table's T4 model bounds and the quoted
    messages are what the code prints now, line by line (python workshop/check_kit.py --update rewrites the first
    two)."""
    out = _check_kit().kit_outputs
    problems = out.check_diagnose_example() + out.check_explorer_model_columns() + out.check_message_quotes()
    assert not problems, "\n".join(problems)


def test_kit_run_all_table_is_the_measured_one():
    problems = _check_kit().kit_outputs.check_run_all_table()
    assert not problems, "\n".join(problems)


def test_check_kit_catches_a_stale_output(tmp_path, monkeypatch):
    """A kit whose report, T4 bound or Run All table is stale fails: each check reads the pages it is given."""
    out = _check_kit().kit_outputs
    end = out._module("run_all_times").END
    readme, notes = (KIT / "README.md").read_text(), (KIT / "NOTES.md").read_text()
    report = out.REPORT.search(readme).group(6).splitlines()
    readme = readme.replace(report[1], report[1] + " (an older wording)").replace(end, "| 99 | 1 s |\n" + end)
    row = next(r for r in notes.splitlines() if r.startswith("| 06 | `cat_explorer`"))
    cells = row.split(" | ")
    notes = notes.replace(row, " | ".join(cells[:5] + ["≥ 48.3 s"] + cells[6:]))
    for name, text in (("README", readme), ("NOTES", notes)):
        (tmp_path / f"{name}.md").write_text(text)
        monkeypatch.setattr(out, name, tmp_path / f"{name}.md")
    assert any("line 2, quotes" in p for p in out.check_diagnose_example())
    assert any("lesson 06 `cat_explorer`: T4 (model)" in p for p in out.check_explorer_model_columns())
    assert any("not the table of run_all_times.json" in p for p in out.check_run_all_table())
    assert out.update() == ["README.md's diagnose report", "NOTES.md's T4 columns of lesson 06 `cat_explorer`"]
    assert not out.check_diagnose_example() and not out.check_explorer_model_columns()


def test_check_kit_wording_frees_numbers_and_undecided_ratios():
    wording = _check_kit().wording
    shape = wording(r"Conv1d / loop: 0\.55×; took 1\.7 s on 2 threads")
    assert re.search(shape, "Conv1d / loop: not decided on this run (spread 40%): rerun; took 11.9 s on 1 threads")
    assert not re.search(shape, "Conv1d / loop: 0.5×; first call, tracing and compiling, took 11.9 s on 1 threads")


def test_run_all_times_table_names_each_runs_load_and_says_when_quiet_was_not():
    times = _check_kit().kit_outputs._module("run_all_times")
    run = {"seconds": 61.4, "ok": True, "load_start": 2.04, "load_end": 3.96,
           "slow_cells": [{"cell": 31, "first_line": "x", "seconds": 12.3, "compile_lines": ["compiling took 11.9 s"]}]}
    record = {"meta": {"cpu": "CPU", "cores": 2, "memory_gib": 8, "torch": "2.13", "date": "d", "commit": "c",
                       "took_s": 600, "cold": "cold"},
              "runs": {"at load": {"04_x": run, "04_x_solution": {**run, "seconds": 5.0}},
                       "quiet": {"04_x": {**run, "load_start": 0.5, "load_end": 0.9}}}}
    text = times.table(record)
    assert "| 04 | 61 s | 2.0–4.0 | 61 s | 0.5–0.9 | 5 s | – |" in text
    assert "first compile, at load (the whole cell): 04 12.3 s." in text and "Not quiet" not in text
    record["runs"]["quiet"]["04_x"]["load_end"] = 9.0
    assert "Not quiet: other work beside these runs kept the load average up to 9.0" in times.table(record)
    record["runs"]["at load"]["04_x"]["slow_cells"] = []
    assert "04 (no line about a compile found" in times.table(record)


def test_run_all_times_busy_loops_end_with_the_block():
    times = _check_kit().kit_outputs._module("run_all_times")
    with pytest.raises(RuntimeError), times.busy_loops(2):
        pids = [int(p) for p in subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True,
                                               text=True).stdout.split()]
        assert len(pids) >= 2
        raise RuntimeError("a failing notebook")
    assert all(not Path(f"/proc/{p}").exists() or "Z" in Path(f"/proc/{p}/stat").read_text().split()[2]
               for p in pids), "the busy loops outlived the measurement"
