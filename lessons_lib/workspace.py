"""`python -m lessons_lib.workspace`: your own working copy of the lessons, opened in JupyterLab.

JupyterLab autosaves every notebook it runs. Run in the clone, that rewrites the committed
`notebooks/*.ipynb`: a dirty git tree, "save your work?" dialogs and `git pull` conflicts. So
the course copies the lessons into `workspace/` (ignored by git) and opens JupyterLab there, on
lesson 00. `git pull` then only ever touches the course's own copies.

Safe by design: a file already in the workspace is never overwritten if you changed it. A lesson
you have not touched is refreshed when the course's copy changes (a manifest remembers what was
copied); one you ran or edited is kept, and the command says how to get the new version.

Solutions are left out unless asked for (`--solutions`): in a room they are handed out after each
exercise, and the checkers need nothing from them.

    python -m lessons_lib.workspace                  # copy (or refresh) and open JupyterLab on lesson 00
    python -m lessons_lib.workspace --copy-only      # copy only
    python -m lessons_lib.workspace --allow-root     # anything unknown goes to `jupyter lab` as is
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FIRST = "00_timing_honestly.ipynb"
MANIFEST = ".course-manifest.json"  # name -> hash of the course file last copied
START_HERE = "00_START_HERE.md"  # sorts first among the files JupyterLab lists
START_TEXT = """# Start with lesson 00

This folder is **your working copy** of the course *PyTorch GPU performance pitfalls*.
Run, edit and save here freely: git ignores this folder, so `git pull` in the course
folder never conflicts with your work.

1. Open **`00_timing_honestly.ipynb`** and run it top to bottom (Run > Run All Cells).
   Every later lesson measures with the harness it builds.
2. Then 01, 02, ... in order: each stands on the ones before.
3. Something odd (widgets show as text, a slow GPU)? Run `python -m lessons_lib.doctor`
   in a terminal: it names the problem and the one command that fixes it.

Solutions: `notebooks/solutions/` in the course folder, or
`python -m lessons_lib.workspace --solutions` copies them here.
After a `git pull`, run `python -m lessons_lib.workspace --copy-only` to bring in updated
lessons; your edited copies are kept.
"""


def course_root() -> Path:
    """The course folder: the current directory if it holds the notebooks, else this package's checkout."""
    here = Path.cwd()
    if (here / "notebooks" / FIRST).exists():
        return here
    return Path(__file__).resolve().parents[1]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sources(root: Path, solutions: bool) -> dict[str, Path]:
    """Workspace-relative name -> course file."""
    nbs = root / "notebooks"
    found = {p.name: p for p in sorted(nbs.glob("[0-9][0-9]_*.ipynb"))}
    if not found:
        raise SystemExit(f"No lesson notebooks under {nbs}: run this from the course folder (a clone of it).")
    if solutions:
        found.update({f"solutions/{p.name}": p for p in sorted((nbs / "solutions").glob("[0-9][0-9]_*.ipynb"))})
    return found


def sync(root: Path, dest: Path, solutions: bool = False) -> dict[str, list[str]]:
    """Copy the course into `dest`. Returns what happened to each file: copied, updated, unchanged, kept."""
    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = dest / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    report: dict[str, list[str]] = {"copied": [], "updated": [], "unchanged": [], "kept": []}
    for name, src in sources(root, solutions).items():
        target = dest / name
        new = _digest(src)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
            report["copied"].append(name)
        elif _digest(target) == new:
            report["unchanged"].append(name)
        elif _digest(target) == manifest.get(name):  # the reader never changed it: safe to refresh
            shutil.copyfile(src, target)
            report["updated"].append(name)
        else:  # the reader's work: never overwritten
            report["kept"].append(name)
            continue
        manifest[name] = new
    start = dest / START_HERE
    if not start.exists():
        start.write_text(START_TEXT)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return report


def describe(report: dict[str, list[str]], dest: Path) -> str:
    counts = ", ".join(f"{len(v)} {k}" for k, v in report.items() if v)
    lines = [f"Your working copy: {dest} ({counts})."]
    for name in report["kept"]:
        lines.append(f"  kept your {name}: the course's copy changed since. To get the new one, rename yours "
                     "and run this command again.")
    return "\n".join(lines)


def lab_command(dest: Path, extra: list[str]) -> list[str]:
    """`jupyter lab` rooted at the workspace, on lesson 00: its printed URL, the browser it opens and
    the server's `/` all land there (a default_url, so it holds with --no-browser too)."""
    return [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={dest}",
            f"--LabApp.default_url=/lab/tree/{FIRST}", *extra]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons_lib.workspace",
                                     description="Copy the lessons into an ignored folder and open JupyterLab there.",
                                     epilog="Other options go to `jupyter lab`: e.g. --allow-root (containers that run "
                                            "as root), --no-browser, --port 8889.")
    parser.add_argument("--dir", type=Path, default=None, help="where (default: workspace/ in the course folder)")
    parser.add_argument("--copy-only", action="store_true", help="copy, do not start JupyterLab")
    parser.add_argument("--solutions", action="store_true", help="also copy the solutions into solutions/")
    args, extra = parser.parse_known_args(argv)
    root = course_root()
    dest = (args.dir or root / "workspace").resolve()
    print(describe(sync(root, dest, solutions=args.solutions), dest))
    if args.copy_only:
        return 0
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        print("Running as root (a container?): JupyterLab refuses to start unless you add --allow-root.")
    print(f"Opening JupyterLab on {FIRST} (Ctrl+C twice to stop it).")
    sys.stdout.flush()
    if os.name == "posix":  # become JupyterLab: a signal to this process reaches the server, no orphan
        os.chdir(dest)
        os.execv(sys.executable, lab_command(dest, extra))
        return 0  # not reached: execv replaces this process
    try:
        return subprocess.call(lab_command(dest, extra), cwd=dest)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
