"""Where the course lives, for Colab: the badge, the notebook metadata and the set-up cell.

One place to change if the course is published elsewhere or pinned for a workshop: COURSE_REPO
and REF. REF is a tag or a full commit hash, never a branch: every Colab set-up cell installs the
library at REF and every badge opens the notebook at REF, so a push on the morning of a workshop
changes nothing the room gets, and notebook and library always come from the same commit.

An instructor pins their own (in a fork, or a tag of this repository):

    1. set COURSE_REPO = "you/your-fork" and REF = "<tag or 40-hex commit>" below;
    2. python -m lessons_lib.colab --rewrite      # every notebook's badge, metadata and set-up cell
    3. commit, push, and (for a tag) `git tag <tag> && git push origin <tag>`.

`python -m lessons_lib.colab --check` lists notebooks that are out of step (exit status 1).

On Colab the set-up cell installs the library with `--no-deps`, then the non-torch dependencies
by name (COLAB_DEPS): pip never resolves torch, so Colab's own torch is never replaced.
`setup()` then checks torch against the course's floor and says what to do if it is older.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

COURSE_REPO = "pytorch-gpu-pitfalls/course"
REF = "v0.1.0"  # the release tag (pyproject's version); a 40-hex commit works the same way
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
# pyproject's runtime dependencies less torch (tests/test_notebook_format.py keeps the two in step).
COLAB_DEPS = ("matplotlib>=3.7", "ipywidgets>=7.6", "tqdm>=4.60")

BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\(([^)]*)\)")
ROOT = Path(__file__).resolve().parents[1]


def colab_url(path: str) -> str:
    """The Colab address of a notebook, from its path in the repository (e.g. notebooks/01_x.ipynb)."""
    return f"https://colab.research.google.com/github/{COURSE_REPO}/blob/{REF}/{path}"


def badge_markdown(path: str) -> str:
    return f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(path)})"


def install_spec() -> str:
    return f"lessons-lib @ git+https://github.com/{COURSE_REPO}@{REF}"


METADATA = {
    "accelerator": "GPU",
    "colab": {"gpuType": "T4", "provenance": []},
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def setup_cell_source() -> str:
    """The first code cell of every notebook."""
    deps = " ".join(f'"{d}"' for d in COLAB_DEPS)
    return f'''# NBVAL_IGNORE_OUTPUT
import sys
if "google.colab" in sys.modules:  # Colab: the course at {REF}, without touching Colab's own torch
    %pip install -q --no-deps "{install_spec()}"
    %pip install -q {deps}
try:
    from lessons_lib import setup
except ImportError as err:
    raise SystemExit(f"{{err}}\\nIf the install above failed (no network, or GitHub's rate limit), wait a minute "
                     "and run this cell again; outside Colab, run `pip install -r requirements.txt` in the "
                     "course folder and restart the kernel.") from None
device = setup()'''


# --- rewriting notebooks (the lead runs this; tests run it on copies) --------------------------------


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def _with_badge(text: str, badge: str) -> str:
    """`text` (a first markdown cell) with exactly one badge, right under its title line."""
    lines = BADGE.sub("", text).rstrip("\n").split("\n")
    text = "\n".join(lines[:1] + ["", badge] + lines[1:])
    return re.sub(r"\n{3,}", "\n\n", text)


def rewrite(nb: dict, rel_path: str) -> dict:
    """Canonical metadata, badge and set-up cell in `nb` (in place); outputs and other cells untouched."""
    meta = nb["metadata"]
    for key, value in METADATA.items():
        if key == "language_info":
            meta.setdefault("language_info", {})["name"] = "python"
        elif key == "colab":
            meta.setdefault("colab", {}).update(value)
        else:
            meta[key] = value
    first = nb["cells"][0]
    if first["cell_type"] != "markdown":
        raise ValueError(f"{rel_path}: the first cell must be the markdown title that carries the badge.")
    first["source"] = _with_badge("".join(first["source"]), badge_markdown(rel_path)).splitlines(keepends=True)
    setup = _code_cells(nb)[0]
    if "lessons_lib import setup" not in "".join(setup["source"]):
        raise ValueError(f"{rel_path}: its first code cell is not the set-up cell; fix it by hand first.")
    setup["source"] = setup_cell_source().splitlines(keepends=True)
    return nb


def _dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"  # as nbformat writes it


def rewrite_file(path: Path, root: Path = ROOT) -> bool:
    """Rewrite one notebook file; True when it changed. Idempotent."""
    before = path.read_text()
    after = _dump(rewrite(json.loads(before), path.resolve().relative_to(root.resolve()).as_posix()))
    if after != before:
        path.write_text(after)
    return after != before


def course_notebooks(root: Path = ROOT) -> list[Path]:
    nbs = root / "notebooks"
    return sorted(nbs.glob("[0-9][0-9]_*.ipynb")) + sorted((nbs / "solutions").glob("[0-9][0-9]_*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons_lib.colab", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--rewrite", action="store_true", help="rewrite badge, metadata and set-up cell in place")
    mode.add_argument("--check", action="store_true", help="list notebooks out of step with this module")
    parser.add_argument("--root", type=Path, default=ROOT, help="the course folder (default: this checkout)")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every lesson and solution notebook")
    args = parser.parse_args(argv)
    paths = args.notebooks or course_notebooks(args.root)
    stale = []
    for path in paths:
        if args.rewrite:
            print(("rewrote " if rewrite_file(path, args.root) else "already canonical ") + str(path))
        else:
            text = path.read_text()
            rel = path.resolve().relative_to(args.root.resolve()).as_posix()
            if _dump(rewrite(json.loads(text), rel)) != text:
                stale.append(path)
                print(f"out of step: {path}")
    if args.check and stale:
        print(f"{len(stale)} notebook(s) out of step: run `python -m lessons_lib.colab --rewrite`.")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
