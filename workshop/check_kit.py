"""Re-read every figure the workshop kit quotes from where it came from; say which no longer hold.

    python workshop/check_kit.py            # the day before a workshop: prints each problem, exit status 1 if any

The kit (README.md, LESSONS.md, slides.md) quotes three kinds of figure, and each is checked at its source:

- from a notebook's committed outputs (NOTEBOOK_QUOTES): the kit names the commit whose outputs it read
  (LESSONS.md: "read at commit ..."); the phrase must be in the kit page and the pattern must match one cell
  (source and text outputs) of that notebook at that commit. Quotes marked `fact` (op counts, bytes, names:
  the same on every run) must also match the notebook as it is now.
- from a recorded file in lessons_lib/reference/ (RECORDED_QUOTES): the value at a key path, formatted as the
  kit writes it, must be the phrase. The recorded files' table (README.md) must state each file's date,
  threads, load average range and lessons as its `meta` says.
- the Run All table (README.md): each notebook's time, first cell's start to last cell's end, from the
  `metadata.execution` timestamps of the notebook at the kit's commit.

tests/test_rooms.py runs these checks. A notebook re-executed or a file re-recorded after the kit was checked
fails nothing here until the kit's commit is moved: that is the day-before re-read, done by this script.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "workshop"
REF = ROOT / "lessons_lib" / "reference"

if str(KIT) not in sys.path:  # the quotes' module beside this file, also when a test loads this file by path
    sys.path.insert(0, str(KIT))
from kit_quotes import MESSAGE_QUOTES, NOTEBOOK_QUOTES, RECORDED_QUOTES  # noqa: E402


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def kit_commit() -> str:
    """The commit whose notebook outputs the kit read (LESSONS.md: 'read at commit abc1234')."""
    m = re.search(r"read at commit ([0-9a-f]{7,40})", (KIT / "LESSONS.md").read_text())
    if not m:
        raise ValueError("workshop/LESSONS.md names no commit ('read at commit <hash>') for the notebooks it quotes")
    return m.group(1)


def notebook(stem: str, commit: str | None = None) -> dict | None:
    """The notebook (its JSON) as it is now, or at `commit` (None where git or that commit is not here)."""
    folder = "notebooks/solutions" if stem.endswith("_solution") else "notebooks"
    if commit is None:
        return json.loads((ROOT / folder / f"{stem}.ipynb").read_text())
    text = _git("show", f"{commit}:{folder}/{stem}.ipynb")
    return json.loads(text) if text else None


def cell_texts(nb: dict) -> list[str]:
    """Each cell's source and its text outputs, as one string."""
    out = []
    for cell in nb["cells"]:
        parts = ["".join(cell.get("source", ""))]
        for o in cell.get("outputs", []):
            parts.append("".join(o.get("text", "")))
            parts.append("".join(o.get("data", {}).get("text/plain", "")))
        out.append("\n".join(parts))
    return out


def run_all_seconds(nb: dict) -> float:
    """Restart & Run All as committed: the first cell's start to the last cell's end (metadata.execution)."""
    def t(s: str) -> datetime:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))

    spans = [(t(e["iopub.execute_input"]), t(e["shell.execute_reply"]))
             for c in nb["cells"] if (e := c.get("metadata", {}).get("execution"))]
    if not spans:
        raise ValueError("the notebook carries no execution timestamps")
    return (max(b for _, b in spans) - min(a for a, _ in spans)).total_seconds()


def _at(data, path: str):
    for key in path.split("/"):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def check_notebook_quotes(commit: str) -> list[str]:
    problems, cache = [], {}
    for page, phrase, stem, pattern, fact in NOTEBOOK_QUOTES:
        if phrase not in (KIT / page).read_text():
            problems.append(f"workshop/{page} no longer quotes {phrase!r} (drop it from check_kit.NOTEBOOK_QUOTES)")
        for when in ([commit, None] if fact else [commit]):
            if (stem, when) not in cache:
                nb = notebook(stem, when)
                cache[stem, when] = cell_texts(nb) if nb is not None else None
            cells = cache[stem, when]
            if cells is None:
                problems.append(f"notebooks/{stem}.ipynb at commit {when}: not found (no git, or that commit)")
            elif not any(re.search(pattern, c, re.S) for c in cells):
                where = "as it is now" if when is None else f"at commit {when}"
                problems.append(f"workshop/{page} quotes {phrase!r}: notebook {stem} {where} has no cell matching "
                                f"{pattern!r}")
        if not fact:  # a measurement of that run: its numbers move, its wording must still be what the code prints
            if (stem, None) not in cache:
                nb = notebook(stem)
                cache[stem, None] = cell_texts(nb) if nb is not None else None
            shape = wording(pattern)
            if cache[stem, None] is not None and not any(re.search(shape, c, re.S) for c in cache[stem, None]):
                problems.append(f"workshop/{page} quotes {phrase!r} from notebook {stem}'s run at the kit's commit; "
                                f"the notebook as it is now prints nothing of that wording (any numbers): {shape!r}")
    return problems


def wording(pattern: str) -> str:
    """The pattern with every number in it free: 'took 1\\.7 s' -> 'took [\\d.,]+ s' (the wording, not the value);
    a ratio ('0\\.55×') may also be the noise rule's 'not decided ...' on another run."""
    number = r"\d+(?:(?:\\\.|,)\d+)*"
    pattern = re.sub(number + "×", lambda m: r"(?:[\d.,]+×|not decided[^;\n]*)", pattern)
    return re.sub(r"(?<!\\)" + number, lambda m: r"[\d.,]+", pattern)


def check_recorded_quotes() -> list[str]:
    problems = []
    for page, phrase, name, path, scale, fmt in RECORDED_QUOTES:
        value = _at(json.loads((REF / name).read_text())["lessons"], path) * scale
        wrote = fmt.format(value)
        if wrote != phrase:
            problems.append(f"{name} {path} now reads {wrote!r}, the kit quotes {phrase!r}")
        if phrase not in (KIT / page).read_text():
            problems.append(f"workshop/{page} no longer quotes {phrase!r} (drop it from check_kit.RECORDED_QUOTES)")
    return problems


# --- outputs the kit quotes, printed again now by the code that prints them ----------------------------------

WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())}
FIXED = (("lr=0.1)", "lr=0.1, foreach=True)"), ("losses.append(loss.item())", "losses.append(loss.detach())"))


def _diagnose(step: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lessons_lib.diagnose", f"{step}:train_step"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def check_diagnose_example() -> list[str]:
    """README.md's "bring your own model" report: byom_step.py through diagnose now prints every line quoted, in
    order, up to the blind spots (counted), with the exit status quoted; fixed as the text says, it prints no pitfall."""
    text = (KIT / "README.md").read_text()
    m = re.search(r"printed this in about\s+\d+\s+seconds \(exit status (\d): (\w+) pitfalls?\)[^`]*```\n(.*?)\n```",
                  text, re.S)
    if not m:
        return ["workshop/README.md: no quoted diagnose report ('printed this in about N seconds (exit status S: "
                "N pitfalls)' and a fenced block)"]
    rc, count, quoted = int(m.group(1)), WORDS.get(m.group(2), -1), m.group(3).splitlines()
    done = _diagnose(KIT / "byom_step.py")
    printed, problems = done.stdout.splitlines(), []
    if done.returncode != rc:
        problems.append(f"diagnose on byom_step.py now exits {done.returncode}; README.md quotes exit status {rc}")
    found = re.match(r"✗ (\d+) pitfalls? found", printed[0] if printed else "")
    if not found or int(found.group(1)) != count:
        problems.append(f"diagnose on byom_step.py now heads its report {printed[:1]}; README.md says {m.group(2)} "
                        f"pitfalls")
    cut = next((i for i, ln in enumerate(quoted) if re.match(r"\s+- \.\.\. \(the (\w+) blind spots", ln)), len(quoted))
    for i, line in enumerate(quoted[:cut]):
        now = printed[i] if i < len(printed) else "(nothing: the report ends before)"
        if line != now:
            problems.append(f"README.md's diagnose report, line {i + 1}, quotes\n    {line}\n  diagnose now prints\n"
                            f"    {now}")
    if cut < len(quoted):
        said = WORDS.get(re.search(r"the (\w+) blind spots", quoted[cut]).group(1), -1)
        blind = [ln for ln in printed[cut:] if ln.startswith("  - ")]
        if len(blind) != said:
            problems.append(f"README.md's diagnose report says {said} blind spots follow; diagnose now lists "
                            f"{len(blind)}")
    return problems + _check_fixed_example(text)


def _check_fixed_example(text: str) -> list[str]:
    m = re.search(r"the same command prints `(✓ [^`]*?)\.\.\.\)` and exits (\d)", re.sub(r"\s+", " ", text))
    if not m:
        return ["workshop/README.md no longer says what the fixed step prints ('the same command prints `✓ ...` "
                "and exits 0')"]
    source = (KIT / "byom_step.py").read_text()
    for old, new in FIXED:
        if old not in source:
            return [f"workshop/byom_step.py has no {old!r}: say in check_kit.FIXED how the fixes apply now"]
        source = source.replace(old, new)
    with tempfile.TemporaryDirectory() as tmp:
        step = Path(tmp) / "mystep.py"
        step.write_text(source)
        done = _diagnose(step)
    head = done.stdout.splitlines()[:1]
    if done.returncode != int(m.group(2)) or not head or not head[0].startswith(m.group(1)):
        return [f"byom_step.py fixed as README.md says: diagnose now exits {done.returncode} with {head}; README.md "
                f"quotes `{m.group(1)}...)` and exit status {m.group(2)}"]
    return []


def check_explorer_model_columns() -> list[str]:
    """README.md's explorer table: each T4 model lower bound is what explorer_times.py computes now (exactly: it is
    a model, the same on every machine), and each Sweep names the parameter the explorer sweeps first."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("explorer_times", KIT / "explorer_times.py")
    times = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(times)
    readme = (KIT / "README.md").read_text()
    part = readme[readme.index("### How long an explorer run takes"):]
    rows = {(r[0], r[1].split()[0]): r for r in _table_rows(part[:part.find("\n## ")], "0")}
    dev, problems = times.device_mod.pick(), []
    for key, name, make in times.EXPLORERS:
        row = rows.get((key, f"`{name}`"))
        if row is None:
            problems.append(f"README.md's explorer table has no row for lesson {key}'s `{name}`")
            continue
        ex = make(dev)
        first = ex.lesson.params[0].name
        want = [c.replace(" (model lower bound)", "") for c in times.t4_lower_bounds(ex.lesson.key, first,
                                                                                      ex.min_run_time)]
        if row[4:6] != want:
            problems.append(f"README.md's explorer table, lesson {key} `{name}`: T4 (model) {row[4:6]}; "
                            f"explorer_times.py now prints {want}")
        if f"({first})" not in row[3]:
            problems.append(f"README.md's explorer table, lesson {key} `{name}`: its Sweep {row[3]!r} should name "
                            f"({first}), the parameter it sweeps now")
    return problems


def check_message_quotes() -> list[str]:
    import importlib.util
    problems = []
    for page, phrase, module, pattern in MESSAGE_QUOTES:
        if phrase not in (KIT / page).read_text():
            problems.append(f"workshop/{page} no longer quotes {phrase!r} (drop it from kit_quotes.MESSAGE_QUOTES)")
        source = Path(importlib.util.find_spec(module).origin).read_text()
        if not re.search(pattern, source):
            problems.append(f"workshop/{page} quotes {phrase!r}; {module} no longer prints it (no {pattern!r})")
    return problems


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.strip().startswith(f"| {first_cell}")]


def check_run_all_table(commit: str) -> list[str]:
    """README.md's 'Run All' and 'its solution' rows against each notebook's timestamps at the kit's commit."""
    text = (KIT / "README.md").read_text()
    header = _table_rows(text, "notebook")
    if not header:
        return ["workshop/README.md has no Run All table ('| notebook | 00 | ...')"]
    problems, lessons = [], header[0][1:]
    for label, suffix in (("Run All", ""), ("its solution", "_solution")):
        row = _table_rows(text, label)
        if not row:
            problems.append(f"workshop/README.md's Run All table has no '{label}' row")
            continue
        for lesson, cell in zip(lessons, row[0][1:]):
            stem = next(p.stem for p in (ROOT / "notebooks").glob(f"{lesson}_*.ipynb")) + suffix
            nb = notebook(stem, commit)
            if nb is None:
                problems.append(f"notebooks/{stem}.ipynb at commit {commit}: not found")
                continue
            seconds = run_all_seconds(nb)
            if cell != f"{seconds:.0f} s":
                problems.append(f"{stem} at commit {commit} ran {seconds:.1f} s; workshop/README.md says {cell!r}")
    return problems


def check_recorded_files_table() -> list[str]:
    """README.md's table of measured files against each file's meta (date, threads, load range, lessons)."""
    problems = []
    rows = {r[0].strip("`"): r for r in _table_rows((KIT / "README.md").read_text(), "`")}
    for path in sorted(REF.glob("*.json")):
        meta = json.loads(path.read_text())["meta"]
        if meta.get("kind_of_figures") != "measured":
            continue
        row = rows.get(path.name)
        if row is None:
            problems.append(f"workshop/README.md's recorded files table has no row for {path.name}")
            continue
        cond = meta.get("conditions") or {}
        loads = [x for c in cond.values() for x in c["load_average"]]
        lessons = sorted(k[:2] for k in json.loads(path.read_text())["lessons"] if k != "targets")
        want = {"recorded": meta["date"], "threads": str(meta["threads"]),
                "load average": f"{_num(min(loads))}–{_num(max(loads))}"}
        have = dict(zip(["file", "kind", "machine", "recorded", "threads", "beside", "load average", "lessons"], row))
        for key, value in want.items():
            if have.get(key) != value:
                problems.append(f"{path.name}: README.md says {key} {have.get(key)!r}, its meta says {value!r}")
        if _lesson_list(have.get("lessons", "")) != lessons:
            problems.append(f"{path.name}: README.md says lessons {have.get('lessons')!r}, the file holds {lessons}")
    return problems


def _num(x: float) -> str:
    """1.0 -> '1.0', 6.2 -> '6.2', 4.66 -> '4.66': as the table writes a load average."""
    text = f"{x:.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _lesson_list(text: str) -> list[str]:
    """'00–02, 04–07' -> ['00', '01', '02', '04', '05', '06', '07']."""
    out = []
    for part in text.split(","):
        ends = [int(x) for x in re.findall(r"\d\d", part)]
        if ends:
            out += [f"{i:02d}" for i in range(ends[0], ends[-1] + 1)]
    return out


def problems() -> list[str]:
    commit = kit_commit()
    return (check_notebook_quotes(commit) + check_recorded_quotes() + check_run_all_table(commit)
            + check_recorded_files_table() + check_message_quotes() + check_explorer_model_columns()
            + check_diagnose_example())


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) if found else
          f"every quote holds: {len(NOTEBOOK_QUOTES)} from notebooks (commit {kit_commit()}), "
          f"{len(RECORDED_QUOTES)} from recorded files, the Run All table and the recorded files' table")
    sys.exit(1 if found else 0)
