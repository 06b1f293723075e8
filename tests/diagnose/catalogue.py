"""The catalogue's frame: a case is a function that builds a step and returns (step, args, kwargs[, options]).

Each line where the case's step has a pitfall carries a marker comment, `# expect: NN kind` (NN the lesson, kind a
key of lessons_lib.diagnose.KINDS; several separated by `|`), so the test knows the right line and lesson from the
source itself. A line outside the case's function (a model shared by several cases, in real_models.py) carries
`# expect[name]: NN kind`, name the case's without its `case_` prefix. A clean case has no marker.
"""
from __future__ import annotations

import glob
import inspect
import os
import re

MARK = re.compile(r"#\s*expect:\s*(.+)$")
STEP_WIDE = ("launch-bound step",)  # about the whole step: its line only points at the busiest line, any line will do
NAMED = re.compile(r"#\s*expect\[(\w+)\]:\s*(.+)$")
HERE = os.path.dirname(os.path.abspath(__file__))


def _parts(text: str):
    for part in text.split("|"):
        lesson, kind = part.strip().split(" ", 1)
        yield lesson, kind.strip()


def expected(case) -> set[tuple[str, str, int, str]]:
    """{(lesson, kind, line, file)} from the markers in the case function's source and the named markers for it
    in the catalogue's files."""
    lines, start = inspect.getsourcelines(case)
    file = inspect.getsourcefile(case)
    out = set()
    for offset, text in enumerate(lines):
        m = MARK.search(text)
        if m:
            out |= {(lesson, kind, start + offset, file) for lesson, kind in _parts(m.group(1))}
    name = case.__name__.removeprefix("case_")
    for path in sorted(glob.glob(os.path.join(HERE, "*.py"))):
        with open(path, encoding="utf-8") as f:
            for number, text in enumerate(f, 1):
                m = NAMED.search(text)
                if m and m.group(1) == name:
                    out |= {(lesson, kind, number, path) for lesson, kind in _parts(m.group(2))}
    return out


def run(case, diagnose, **extra):
    """diagnose on the case's step (its options first, then `extra`)."""
    built = case()
    fn, args, kwargs = built[:3]
    options = dict(built[3]) if len(built) > 3 else {}
    options.update(extra)
    return diagnose(fn, *args, **kwargs, **options)


def check(case, report) -> list[str]:
    """What is wrong with `report` for `case`: missing findings, findings on the wrong line, extra kinds."""
    want = expected(case)
    problems = []
    for lesson, kind, line, file in sorted(want, key=lambda w: (w[3], w[2])):
        hits = [f for f in report.of(kind) if (f.where.line == line and f.where.file == file) or kind in STEP_WIDE]
        if not hits:
            found = [(f.where.line, f.where.text) for f in report.of(kind)]
            problems.append(f"missing {kind} at line {line} (found it at {found})")
        elif hits[0].lesson != lesson:
            problems.append(f"{kind} at line {line}: lesson {hits[0].lesson}, expected {lesson}")
    marked = {(kind, line, file) for _l, kind, line, file in want}
    wide = {kind for _l, kind, _n, _f in want if kind in STEP_WIDE}
    for f in report.findings:
        if (f.kind, f.where.line, f.where.file) not in marked and f.kind not in wide:
            problems.append(f"unexpected {f.kind} at {f.where.place}: {f.where.text} — {f.evidence}")
    if report.error:
        problems.append(f"the step stopped: {report.error}")
    return problems
