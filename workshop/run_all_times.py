"""How long Restart & Run All takes for every notebook, first runs included: at load, and with nothing of ours beside.

    python workshop/run_all_times.py            # every notebook and solution, at load then quiet; writes
                                                # workshop/run_all_times.json (10 minutes on 2 cores, 2026-11-28)
    python workshop/run_all_times.py --write    # the same, then puts the table into workshop/README.md
    python workshop/run_all_times.py --table [--write]   # the recorded file's table (runs nothing); into README
    python workshop/run_all_times.py --notebooks 03,07 --no-solutions --out /tmp/t.json   # some only

Each notebook runs as a participant's first Run All does: a fresh kernel (nbclient, the executor of
.ci/execute_notebooks.py) and cold caches (a new, empty TORCHINDUCTOR_CACHE_DIR for each run, so every
torch.compile compiles from scratch). "At load" runs it with two busy-loop processes beside it, which is
what a busy 2-core laptop looks like (a browser, a video call); "quiet" without them. Whatever else runs on
the machine runs too: each figure is recorded with the 1-minute load average at its start and end, and
the run is only as quiet as that says. The time is the wall time of Restart & Run All as a reader waits for
it: the kernel's start-up included. Per cell it keeps the slow cells (1 s or more) and any line a cell
prints about a compile with its seconds, which is what the kit quotes for the first compile.

The notebooks are copied to a scratch folder and executed there: nothing in notebooks/ is written. Where editors
share a checkout, COURSE_NOTEBOOK_LOCKS names a folder of nb-<stem>.lock files, and each copy waits for its lock.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().with_name("run_all_times.json")
README = Path(__file__).resolve().with_name("README.md")
BEGIN, END = "<!-- run_all_times.py: begin -->", "<!-- run_all_times.py: end -->"
COMPILE_LINE = re.compile(r"^.*compil.*\b\d+(\.\d+)? s\b.*$", re.M | re.I)
COMPILED = ("02", "03", "04")  # the lessons whose notebook pays a first compile and prints how long it took


def _executor():
    spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / ".ci" / "execute_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load() -> float:
    return round(os.getloadavg()[0], 2)


@contextlib.contextmanager
def busy_loops(n: int):
    """n processes that spin on a core each, ended on the way out (whatever happens)."""
    procs = [subprocess.Popen(["bash", "-c", "while :; do :; done"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _copy_locked(src: Path, dest: Path) -> None:
    """Copy a notebook while no engineer's write holds its lock (a shared lock: writers take it exclusive)."""
    lock = Path(os.environ.get("COURSE_NOTEBOOK_LOCKS", "")) / f"nb-{src.stem}.lock"
    if "COURSE_NOTEBOOK_LOCKS" not in os.environ or not lock.exists():
        shutil.copyfile(src, dest)
        return
    import fcntl
    with open(lock) as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        shutil.copyfile(src, dest)


def run_once(executor, src: Path, scratch: Path) -> dict:
    """One Restart & Run All of a copy of `src` with a cold compile cache: seconds, load, slow cells, compiles."""
    import nbformat
    work = scratch / src.name
    _copy_locked(src, work)
    cache = tempfile.mkdtemp(prefix="inductor-", dir=scratch)
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # the kernel inherits it: every compile starts cold
    load0, t0 = _load(), time.perf_counter()
    try:
        ok, line = executor.run_one(work, work, timeout=600, allow_errors=True)
    finally:
        seconds = time.perf_counter() - t0
        if old is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = old
    nb = nbformat.read(work, as_version=4)
    cells = []
    for i, cell in enumerate(nb.cells):
        e = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" not in e:
            continue
        took = executor_seconds(e)
        text = "".join(o.get("text", "") for o in cell.get("outputs", []))
        compiles = [m.group(0).strip() for m in COMPILE_LINE.finditer(text)]
        if took >= 1 or compiles:
            cells.append({"cell": i, "first_line": _first_line(cell.source),
                          "seconds": round(took, 2), "compile_lines": compiles})
    return {"seconds": round(seconds, 1), "ok": ok, "executor": line.replace(str(scratch), "<scratch>"),
            "load_start": load0, "load_end": _load(), "slow_cells": cells}


def _first_line(source: str) -> str:
    lines = [ln for ln in source.splitlines() if ln.strip() and not ln.startswith("# NBVAL")]
    return lines[0][:80] if lines else ""


def executor_seconds(e: dict) -> float:
    from datetime import datetime
    t = [datetime.fromisoformat(e[k].replace("Z", "+00:00")) for k in ("iopub.execute_input", "shell.execute_reply")]
    return (t[1] - t[0]).total_seconds()


def _stems(arg: str | None, solutions: bool) -> list[Path]:
    lessons = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if arg:
        want = {a.strip() for a in arg.split(",") if a.strip()}
        unknown = want - {p.name[:2] for p in lessons}
        if unknown:
            raise SystemExit(f"--notebooks {arg!r}: name lessons among {', '.join(p.name[:2] for p in lessons)}.")
        lessons = [p for p in lessons if p.name[:2] in want]
    sols = [ROOT / "notebooks" / "solutions" / f"{p.stem}_solution.ipynb" for p in lessons] if solutions else []
    return lessons + [s for s in sols if s.exists()]


def _machine() -> dict:
    import torch
    from lessons_lib import device as device_mod
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else 0
    return {"cpu": device_mod._cpu_name(), "cores": os.cpu_count(), "memory_gib": round(mem),
            "system": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "torch": torch.__version__, "device": device_mod.describe(device_mod.pick()).line()}


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "notebooks", "lessons_lib"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() or "unknown") + (" (with uncommitted changes)" if dirty else "")


def measure(paths: list[Path], conditions: list[str]) -> dict:
    executor = _executor()
    import nbclient  # noqa: F401  (imported before any clock starts)
    record = {"meta": {**_machine(), "commit": _commit(), "date": time.strftime("%Y-%m-%d %H:%M"),
                       "busy_loops_at_load": 2, "cold": "fresh kernel, empty TORCHINDUCTOR_CACHE_DIR"},
              "runs": {c: {} for c in conditions}}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="run-all-") as scratch:
        for cond in conditions:
            with busy_loops(2 if cond == "at load" else 0):
                for path in paths:
                    r = run_once(executor, path, Path(scratch))
                    record["runs"][cond][path.stem] = r
                    print(f"{cond:8} {path.stem:36} {r['seconds']:6.1f} s  load {r['load_start']}–{r['load_end']}"
                          f"{'' if r['ok'] else '  ' + r['executor']}", flush=True)
    record["meta"]["took_s"] = round(time.perf_counter() - start)
    return record


def _cell(run: dict | None) -> tuple[str, str]:
    if run is None:
        return "–", "–"
    return f"{run['seconds']:.0f} s" + ("" if run["ok"] else " (failed)"), f"{run['load_start']:.1f}–{run['load_end']:.1f}"


def table(record: dict) -> str:
    """The Markdown the kit shows (README.md, between the markers), from a recorded file."""
    m, runs = record["meta"], record["runs"]
    load, quiet = runs.get("at load", {}), runs.get("quiet", {})
    stems = sorted({s for r in runs.values() for s in r if not s.endswith("_solution")})
    lines = [f"Measured by `python workshop/run_all_times.py` on {m['cpu']} ({m['cores']} cores, {m['memory_gib']} GiB; "
             f"torch {m['torch']}), {m['date']}, commit {m['commit']}; {m['took_s'] // 60} minutes in all. Each run "
             f"is a first run: {m['cold']}. Load: the 1-minute load average at each run's start–end (it lags: the first "
             "quiet run starts under the busy loops just ended).",
             "",
             "| notebook | Run All at load (2 busy loops) | load | Run All quiet | load | its solution at load "
             "| its solution quiet |",
             "|---|---|---|---|---|---|---|"]
    for stem in stems:
        (a, la), (q, lq) = _cell(load.get(stem)), _cell(quiet.get(stem))
        sa, sq = _cell(load.get(stem + "_solution"))[0], _cell(quiet.get(stem + "_solution"))[0]
        lines.append(f"| {stem[:2]} | {a} | {la} | {q} | {lq} | {sa} | {sq} |")
    compiles = []
    for stem in stems:
        cells = [c for c in load.get(stem, {}).get("slow_cells", []) if c["compile_lines"]]
        compiles += [f"{stem[:2]} {c['seconds']:.1f} s" for c in cells]
        if not cells and stem[:2] in COMPILED:
            compiles.append(f"{stem[:2]} (no line about a compile found: see COMPILE_LINE)")
    if compiles:
        lines += ["", "The cells with a first compile, at load (the whole cell): " + ", ".join(compiles) + "."]
    # a run's end: the 1-minute average lags, so the first quiet run starts under the busy loops just ended
    busiest = {c: max((r["load_end"] for r in runs[c].values()), default=0) for c in runs}
    if busiest.get("quiet", 0) > m["cores"] + 1:  # two busy loops on its cores alone would give about cores + 1
        lines += ["", f"Not quiet: other work beside these runs kept the load average up to {busiest['quiet']:.1f} "
                      f"in the quiet runs and {busiest.get('at load', 0):.1f} at load, on {m['cores']} cores, busier "
                      f"than two busy loops alone: every column is a busy machine's, and a laptop with free cores is "
                      f"faster."]
    return "\n".join(lines)


def write_readme(record: dict) -> None:
    text = README.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"workshop/README.md has no {BEGIN} ... {END} block to put the table in")
    head, rest = text.split(BEGIN, 1)
    README.write_text(head + BEGIN + "\n" + table(record) + "\n" + END + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notebooks", help="comma-separated lessons (default: all), e.g. 03,07")
    ap.add_argument("--no-solutions", action="store_true", help="leave the solution notebooks out")
    ap.add_argument("--at-load-only", action="store_true", help="leave the quiet runs out")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where the record goes (default {OUT.name} beside this)")
    ap.add_argument("--write", action="store_true", help="also put the table into workshop/README.md")
    ap.add_argument("--table", action="store_true", help="measure nothing: the recorded file's table (--write: into "
                    "README.md)")
    a = ap.parse_args(argv)
    if a.table:
        record = json.loads(a.out.read_text())
        print(table(record))
        if a.write:
            write_readme(record)
        return 0
    record = measure(_stems(a.notebooks, not a.no_solutions), ["at load"] + ([] if a.at_load_only else ["quiet"]))
    a.out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print()
    print(table(record))
    if a.write:
        write_readme(record)
    return 0 if all(r["ok"] for c in record["runs"].values() for r in c.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
