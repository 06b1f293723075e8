"""The reader's line of code behind an op: the innermost frame outside torch and the course's toolkit.

`user_frame()` walks the Python stack from where it is called (inside a dispatch hook, a patched method, an
autograd hook) outwards and returns the first frame that belongs to the reader: not torch's own files, not the
toolkit's (lessons_lib's flat modules, diagnose/ and grouped_linear/), not contextlib or functools. A lesson's
package counts as the reader's code: lesson 07's model is someone's model. The answer carries the file and line
number (so a test can check "the right line") and the source text (what a notebook reader recognises: a cell's
file name changes from run to run, its code does not). syncs.py and graph_report.py keep their own text-only
finders, which print the same text.
"""
from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

_HERE = os.path.dirname(os.path.abspath(__file__))
_TOOLKIT_DIRS = (_HERE, os.path.join(_HERE, "diagnose"), os.path.join(_HERE, "grouped_linear"))
_STDLIB_WRAPPERS = ("contextlib.py", "functools.py", "weakref.py")
_skip_cache: dict[str, bool] = {}


@dataclass(frozen=True)
class Where:
    """A line of the reader's code: file, line number, its source text and the function it is in."""

    file: str
    line: int
    text: str
    function: str = ""

    def __str__(self) -> str:
        return self.text or f"{os.path.basename(self.file)}:{self.line}"

    @property
    def place(self) -> str:
        """file:line, the file's base name only (a notebook cell's full path says nothing)."""
        return f"{os.path.basename(self.file)}:{self.line}"


NOWHERE = Where("?", 0, "", "")


def _skipped(filename: str) -> bool:
    skip = _skip_cache.get(filename)
    if skip is None:
        f = filename.replace("\\", "/")
        folder = os.path.dirname(os.path.abspath(filename)) if not f.startswith("<") else ""
        skip = ("/torch/" in f or f.startswith("<frozen") or f.endswith(_STDLIB_WRAPPERS)
                or folder in _TOOLKIT_DIRS)
        _skip_cache[filename] = skip
    return skip


def source_text(filename: str, lineno: int) -> str:
    """The line's code without a trailing comment (as syncs.py prints it)."""
    return linecache.getline(filename, lineno).strip().split("  #")[0].strip()


def user_frame(depth: int = 1) -> Where:
    """The innermost frame of the reader's code on the current stack (NOWHERE when there is none)."""
    frame = sys._getframe(depth)
    while frame is not None:
        code = frame.f_code
        if not _skipped(code.co_filename):
            return Where(code.co_filename, frame.f_lineno, source_text(code.co_filename, frame.f_lineno),
                         code.co_name)
        frame = frame.f_back
    return NOWHERE
