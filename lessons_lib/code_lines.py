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
import re
import sys
import sysconfig
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
        """file:line, the file's base name only; a Jupyter cell as the reader sees it: "cell [12], line 3"
        (its file name, a hash like 309528591.py, says nothing)."""
        cell = cell_number(self.file)
        return f"cell [{cell}], line {self.line}" if cell is not None else f"{os.path.basename(self.file)}:{self.line}"


NOWHERE = Where("?", 0, "", "")
_LIB_DIRS = tuple(sorted({os.path.realpath(p) for k in ("stdlib", "platstdlib", "purelib", "platlib")
                          if (p := sysconfig.get_paths().get(k))}))
_lib_cache: dict[str, bool] = {}


def library_file(filename: str) -> bool:
    """Code of Python, of an installed package, or of the course's toolkit (a lesson's package is the reader's,
    as in user_frame): what a tool that runs a reader's step does not copy, and whose frames are not the reader's."""
    lib = _lib_cache.get(filename)
    if lib is None:
        real = os.path.realpath(filename) if not filename.startswith("<") else filename
        lib = filename.startswith("<frozen") or real.startswith(_LIB_DIRS) or os.path.dirname(real) in _TOOLKIT_DIRS
        _lib_cache[filename] = lib
    return lib


def library_type(cls) -> bool:
    """A class defined by Python, an installed package or the toolkit (or in C: no file)."""
    module = sys.modules.get(getattr(cls, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    return module is None or file is None or library_file(file)
_OLD_CELL = re.compile(r"<ipython-input-(\d+)-")


def cell_number(filename: str) -> int | None:
    """The execution count of the IPython cell compiled under this file name (the latest run of that code), or
    None outside IPython or for a real file. IPython keeps the map in its compiler (CachingCompiler.cache):
    `format_code_name` is what its own tracebacks print ("Cell In[12], line 3") from."""
    old = _OLD_CELL.match(filename)
    if old:
        return int(old.group(1))
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    compiler = getattr(shell, "compile", None)
    named = getattr(compiler, "format_code_name", None)
    try:
        label = named(filename) if named is not None else None
    except Exception:  # another IPython's compiler: no name for it
        label = None
    if label and str(label[1]).startswith("In[") and str(label[1])[3:-1].isdigit():
        return int(str(label[1])[3:-1])
    number = getattr(compiler, "_filename_map", {}).get(filename)
    return number if isinstance(number, int) and number > 0 else None


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
