"""`python -m lessons_lib.workspace`: your own working copy of the lessons, opened in JupyterLab.

JupyterLab autosaves every notebook it runs. Run in the clone, that rewrites the committed
`notebooks/*.ipynb`: a dirty git tree, "save your work?" dialogs and `git pull` conflicts. So
the course copies the lessons into `workspace/` (ignored by git) and opens JupyterLab there, on
lesson 00. `git pull` then only ever touches the course's own copies.

Safe by design: a file already in the workspace is never overwritten if you changed it. A lesson
you have not touched is refreshed when the course's copy changes (a manifest remembers, for each
file, the course's version it came from and what was written); one you ran or edited is kept, and
only when the course's copy really changed does the command say so, and how to get the new one.
Each file is written whole or not at all, and a folder it cannot write is one line, not a traceback.

Solutions are left out unless asked for (`--solutions`): in a room they are handed out after each
exercise, and the checkers need nothing from them. A lesson's reference to its solution is made true
in the copy: a link to `solutions/...` when the solution is here, else its name and how to get it.

    python -m lessons_lib.workspace                  # copy (or refresh) and open JupyterLab on lesson 00
    python -m lessons_lib.workspace --copy-only      # copy only
    python -m lessons_lib.workspace --allow-root     # anything unknown goes to `jupyter lab` as is
"""
from __future__ import annotations

import argparse
import hashlib
import json
import difflib
import os
import re
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


class WorkspaceError(Exception):
    """A problem the reader fixes (a folder that is a file, no write permission): printed as one line."""


def course_root() -> Path:
    """The course folder: the current directory if it holds the notebooks, else this package's checkout."""
    here = Path.cwd()
    if (here / "notebooks" / FIRST).exists():
        return here
    return Path(__file__).resolve().parents[1]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(path: Path) -> str:
    return _sha(path.read_bytes())


def sources(root: Path, solutions: bool) -> dict[str, Path]:
    """Workspace-relative name -> course file."""
    nbs = root / "notebooks"
    found = {p.name: p for p in sorted(nbs.glob("[0-9][0-9]_*.ipynb"))}
    if not found:
        raise WorkspaceError(f"No lesson notebooks under {nbs}: run this from the course folder (a clone of it).")
    if solutions:
        found.update({f"solutions/{p.name}": p for p in sorted((nbs / "solutions").glob("[0-9][0-9]_*.ipynb"))})
    return found


# --- solution links: `solutions/NN_x_solution.ipynb` exists in the working copy only after --solutions ----

# `[label](solutions/x)` (relative to notebooks/), or a code span `notebooks/solutions/x` (the course folder's path)
_REF = re.compile(r"\[(?P<label>[^\]\n]*)\]\(\s*<?(?:\./)?(?:notebooks/)?solutions/(?P<file>\d\d_[\w.-]+\.ipynb)>?\s*\)"
                  r"|(?<!\[)`(?:notebooks/)?solutions/(?P<span>\d\d_[\w.-]+\.ipynb)`(?!\])")


def solution_links(text: str, here: set[str], in_course: set[str]) -> str:
    """A lesson's markdown, its solution references made true in the working copy: a link where the solution
    is here (`solutions/` beside the lessons), else the name and how to get it (a link would be a 404).

    Both forms the notebooks use are handled: a link relative to notebooks/ (`[...](solutions/x)`) and a
    code span naming the course folder's path (`notebooks/solutions/x`)."""
    def say(file: str, label: str) -> str:
        if file in here:
            return f"[{label}](solutions/{file})"
        how = ("`python -m lessons_lib.workspace --solutions` copies the solutions into `solutions/` here" if
               file in in_course else "not in this copy of the course: your instructor hands it out")
        return f"`solutions/{file}` ({how})"

    return _REF.sub(lambda m: say(m["file"], m["label"]) if m["file"] else
                    say(m["span"], f"`solutions/{m['span']}`"), text)


def render(raw: bytes, here: set[str], in_course: set[str]) -> bytes:
    """The working copy's bytes of a lesson: the course's own bytes unless a solution reference changes."""
    changed = False
    try:
        nb = json.loads(raw)
        for cell in (c for c in nb["cells"] if c.get("cell_type") == "markdown"):
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            new = solution_links(text, here, in_course)
            if new != text:
                cell["source"], changed = new.splitlines(keepends=True), True
    except (ValueError, KeyError, TypeError, AttributeError):
        return raw  # not a notebook we can read: copy it as it is
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode() if changed else raw


# --- the copy: plan everything, check the folder can take it, then write each file whole ------------------


def _read_manifest(dest: Path) -> tuple[dict[str, dict], str]:
    """name -> {"course": hash of the course file when copied, "copy": hash of what was written}, and a note
    when the record was unreadable (then every file that differs from the course is kept as the reader's)."""
    path = dest / MANIFEST
    if not path.exists():
        return {}, ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (ValueError, OSError) as err:
        return {}, (f"note: {path.name} (this folder's record of what was copied) was unreadable ({type(err).__name__}"
                    "): your files are kept as they are, and a new record is written.")
    out = {}
    for name, entry in data.items():
        if isinstance(entry, str):  # before issue 28 the copy was the course's bytes, and the record one hash
            out[name] = {"course": entry, "copy": entry}
        elif isinstance(entry, dict):
            out[name] = {"course": entry.get("course"), "copy": entry.get("copy")}
    return out, ""


def _write(path: Path, data: bytes) -> None:
    """Write a file whole or not at all: a temporary beside it, then an atomic rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _folder(dest: Path, default: bool) -> None:
    if dest.exists() and not dest.is_dir():
        hint = ("the working copy goes in a folder of that name: move the file away, or choose another folder "
                "with --dir" if default else "name a folder with --dir (it is created if missing)")
        raise WorkspaceError(f"{dest} is a file, not a folder: {hint}.")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WorkspaceError(f"cannot create the folder {dest} ({err.strerror or err}): choose another with --dir."
                             ) from None


def _writable(folders: set[Path]) -> None:
    """Refuse before the first write, not after half of them."""
    for folder in sorted(folders):
        probe = folder if folder.exists() else folder.parent
        if not os.access(probe, os.W_OK):
            raise WorkspaceError(f"cannot write in {probe} (permission denied), where files of the course are due: "
                                 f"make it writable (chmod u+w {probe}) or choose another folder with --dir. Nothing "
                                 "was changed.")


def _save(dest: Path, record: dict, must: bool) -> None:
    """The record of what was copied. In a folder nothing else had to be written to, a read-only one is fine:
    the next run finds the same."""
    try:
        _write(dest / MANIFEST, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    except OSError:
        if must:
            raise


def sync(root: Path, dest: Path, solutions: bool = False, default: bool = False) -> dict[str, list[str]]:
    """Copy the course into `dest`. Returns what happened to each file: copied, updated (the reader never
    changed it), unchanged, edited (the reader's, the course's copy as it was), kept (the reader's, and the
    course's copy changed since), differs (the reader's, no record of what it came from); and notes."""
    _folder(dest, default)
    manifest, note = _read_manifest(dest)
    srcs = sources(root, solutions)
    here = {n.split("/", 1)[1] for n in srcs if n.startswith("solutions/")}
    here |= {p.name for p in (dest / "solutions").glob("*.ipynb")} if (dest / "solutions").is_dir() else set()
    in_course = {p.name for p in (root / "notebooks" / "solutions").glob("*.ipynb")}
    report: dict[str, list[str]] = {k: [] for k in ("copied", "updated", "unchanged", "edited", "kept", "differs")}
    record = {name: dict(entry) for name, entry in manifest.items()}
    writes = []
    for name, src in srcs.items():
        raw = src.read_bytes()
        data = raw if "/" in name else render(raw, here, in_course)
        target, entry, now = dest / name, manifest.get(name), {"course": _sha(raw), "copy": _sha(data)}
        mine = _digest(target) if target.exists() else None
        if mine == now["copy"]:
            kind, record[name] = "unchanged", now
        elif mine is None or (entry and mine == entry["copy"]):  # new here, or never touched by the reader
            kind = "copied" if mine is None else "updated"
            writes.append((name, target, data, now))
        elif entry is None:  # no record: say so once, then follow the course's copy from here
            kind, record[name] = "differs", {"course": now["course"], "copy": None}
        else:  # the reader's work: never overwritten; "changed" only when the course's file did
            kind = "edited" if entry["course"] == now["course"] else "kept"
        report[kind].append(name)
    start = dest / START_HERE
    _writable({t.parent for _n, t, _d, _h in writes} | ({dest} if writes or not start.exists() else set()))
    try:
        for name, target, data, now in writes:
            target.parent.mkdir(parents=True, exist_ok=True)
            _write(target, data)
            record[name] = now
        if not start.exists():
            _write(start, START_TEXT.encode())
    finally:  # what was written is recorded, even when a later file failed
        if record != manifest or note or not (dest / MANIFEST).exists():
            _save(dest, record, must=bool(writes))
    report["notes"] = [note] if note else []
    return report


_SAID = {"copied": "copied", "updated": "updated", "unchanged": "unchanged", "edited": "with your changes",
         "kept": "kept (the course's changed)", "differs": "kept (yours differ)"}


def describe(report: dict[str, list[str]], dest: Path) -> str:
    counts = ", ".join(f"{len(report[k])} {said}" for k, said in _SAID.items() if report.get(k))
    lines = [f"Your working copy: {dest} ({counts}).", *report.get("notes", [])]
    for name in report["kept"]:
        lines.append(f"  kept your {name}: the course's copy changed since you got it. To get the new one, rename "
                     "yours and run this command again.")
    for name in report.get("differs", []):
        lines.append(f"  kept your {name}: it differs from the course's copy (this folder has no record of the "
                     "version it came from). To get the course's, rename yours and run this command again.")
    return "\n".join(lines)


def lab_command(dest: Path, extra: list[str]) -> list[str]:
    """`jupyter lab` rooted at the workspace, on lesson 00: its printed URL, the browser it opens and
    the server's `/` all land there (a default_url, so it holds with --no-browser too)."""
    return [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={dest}",
            f"--LabApp.default_url=/lab/tree/{FIRST}", *extra]


OURS = ("--dir", "--copy-only", "--solutions")
# JupyterLab's own ways to say where: they would fight the --ServerApp.root_dir this command sets.
WHERE = {"--notebook-dir", "--root-dir", "--serverapp.root_dir", "--notebookapp.notebook_dir",
         "--serverapp.notebook_dir"}


def near_miss(option: str) -> str | None:
    """Which of our options `option` (one argparse did not know) was probably meant, or None: a JupyterLab
    option passes through, but `--directory X` must not silently copy into the default folder."""
    name = option.split("=", 1)[0]
    if not name.startswith("-"):
        return None
    if name.lower() in WHERE:
        return "--dir"
    bare = name.lstrip("-").replace("_", "-").lower()
    for ours in OURS:
        word = ours[2:]
        if bare.startswith(word) or (len(bare) >= 3 and word.startswith(bare)):  # --directory, -dir, -solutions
            return ours
    close = difflib.get_close_matches(bare, [o[2:] for o in OURS], n=1, cutoff=0.75)  # --solutons, --copyonly
    return f"--{close[0]}" if close else None


def _refuse(message: str) -> int:
    print(f"python -m lessons_lib.workspace: {message} (--help lists the options)", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons_lib.workspace",
                                     description="Copy the lessons into an ignored folder and open JupyterLab there.",
                                     epilog="Other options go to `jupyter lab`: e.g. --allow-root (containers that run "
                                            "as root), --no-browser, --port 8889.")
    parser.add_argument("--dir", type=Path, default=None, help="where (default: workspace/ in the course folder)")
    parser.add_argument("--copy-only", action="store_true", help="copy, do not start JupyterLab")
    parser.add_argument("--solutions", action="store_true", help="also copy the solutions into solutions/")
    args, extra = parser.parse_known_args(argv)
    for option in extra:
        meant, name = near_miss(option), option.split("=", 1)[0]
        if meant:
            why = ("sets JupyterLab's folder, which this command sets itself" if name.lower() in WHERE
                   else "is not an option of this command")
            return _refuse(f"{name} {why}: did you mean {meant}?")
    if args.copy_only and extra:
        return _refuse(f"--copy-only starts no JupyterLab, so `{' '.join(extra)}` would be ignored: drop it, or drop "
                       "--copy-only.")
    root = course_root()
    dest = (args.dir or root / "workspace").resolve()
    try:
        print(describe(sync(root, dest, solutions=args.solutions, default=args.dir is None), dest))
    except WorkspaceError as err:
        print(f"python -m lessons_lib.workspace: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # a disk that fills up, a folder that vanishes: one line, the files written are whole
        where = f" ({err.filename})" if err.filename else ""
        print(f"python -m lessons_lib.workspace: could not write the working copy in {dest}: "
              f"{err.strerror or err}{where}. Each file is either whole or not written; run again once fixed.",
              file=sys.stderr)
        return 1
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
