"""Re-read every figure and output the workshop kit quotes from where it came from; say which no longer hold.

    python workshop/check_kit.py            # the day before a workshop: prints each problem, exit status 1 if any
    python workshop/check_kit.py --update   # first rewrite what the code prints the same everywhere (the diagnose
                                            # report, the T4 model columns) to what it prints now; then check
    python workshop/check_kit.py --now      # read the measured notebook quotes in the notebooks as they are now,
                                            # not at the kit's commit: what moving the kit's commit would take

The kit (README.md, LESSONS.md, slides.md) quotes four kinds of thing, and each is checked at its source:

- a notebook's committed outputs (kit_quotes.NOTEBOOK_QUOTES): the kit names the commit whose outputs it read
  (LESSONS.md: "read at commit ..."); the phrase must be in the kit page and the pattern must match one cell
  (source and text outputs) of that notebook at that commit. Quotes marked `fact` (op counts, bytes, names:
  the same on every run) must also match the notebook as it is now; the others, measurements of that run, must
  match it now in their wording (every number free, a ratio may be 'not decided'): a message reworded since
  is caught, a number re-measured is not.
- a recorded file in lessons_lib/reference/ (kit_quotes.RECORDED_QUOTES): the value at a key path, formatted as
  the kit writes it, must be the phrase. The recorded files' table (README.md) must state each file's date,
  threads, load average range and lessons as its `meta` says.
- what the course's code prints (kit_outputs.py): the diagnose report on byom_step.py, the explorer table's T4
  model bounds, quoted messages: each printed again now and compared line by line.
- the Run All table (README.md): run_all_times.py's table of its recorded file, run_all_times.json.

tests/test_rooms.py runs these checks. A notebook re-executed or a file re-recorded after the kit was checked
fails only the wording check until the kit's commit is moved: that is the day-before re-read (--now).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "workshop"
REF = ROOT / "lessons_lib" / "reference"

if str(KIT) not in sys.path:  # the modules beside this file, also when a test loads this file by path
    sys.path.insert(0, str(KIT))
import kit_outputs  # noqa: E402
from kit_quotes import NOTEBOOK_QUOTES, RECORDED_QUOTES  # noqa: E402


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


def _at(data, path: str):
    for key in path.split("/"):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def check_notebook_quotes(commit: str) -> list[str]:
    problems, cache = [], {}
    for page, phrase, stem, pattern, fact in NOTEBOOK_QUOTES:
        if phrase not in (KIT / page).read_text():
            problems.append(f"workshop/{page} no longer quotes {phrase!r} (drop it from kit_quotes.NOTEBOOK_QUOTES)")
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
            problems.append(f"workshop/{page} no longer quotes {phrase!r} (drop it from kit_quotes.RECORDED_QUOTES)")
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


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.strip().startswith(f"| {first_cell}")]


def problems(now: bool = False) -> list[str]:
    """Every stale quote. now: the measured notebook quotes against the notebooks as they are now."""
    commit = kit_commit()
    return (check_notebook_quotes(None if now else commit) + check_recorded_quotes()
            + check_recorded_files_table() + kit_outputs.check_message_quotes()
            + kit_outputs.check_explorer_model_columns() + kit_outputs.check_diagnose_example()
            + kit_outputs.check_run_all_table())


if __name__ == "__main__":
    args = set(sys.argv[1:])
    if args - {"--update", "--now"}:
        sys.exit(f"check_kit.py: unknown {' '.join(sorted(args - {'--update', '--now'}))}; use --update or --now")
    if "--update" in args:
        print("rewritten in workshop/README.md: " + (", ".join(kit_outputs.update()) or "nothing (all current)"))
    found = problems(now="--now" in args)
    print("\n".join(found) if found else
          f"every quote holds: {len(NOTEBOOK_QUOTES)} from notebooks (commit {kit_commit()}), "
          f"{len(RECORDED_QUOTES)} from recorded files, the outputs the code prints now (diagnose, explorer_times, "
          f"messages), the Run All table and the recorded files' table")
    sys.exit(1 if found else 0)
