"""The catalogue's frame: a case is a function that builds a step and returns (step, args, kwargs[, options]).

Each line where the case's step has a pitfall carries a marker comment, `# expect: NN kind` (NN the lesson, kind a
key of lessons_lib.diagnose.KINDS; several separated by `|`), so the test knows the right line and lesson from the
source itself. A clean case has no marker.
"""
from __future__ import annotations

import inspect
import re

MARK = re.compile(r"#\s*expect:\s*(.+)$")


def expected(case) -> set[tuple[str, str, int]]:
    """{(lesson, kind, line)} from the markers in the case function's source."""
    lines, start = inspect.getsourcelines(case)
    out = set()
    for offset, text in enumerate(lines):
        m = MARK.search(text)
        if m:
            for part in m.group(1).split("|"):
                lesson, kind = part.strip().split(" ", 1)
                out.add((lesson, kind.strip(), start + offset))
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
    file = inspect.getsourcefile(case)
    problems = []
    for lesson, kind, line in sorted(want, key=lambda w: w[2]):
        hits = [f for f in report.of(kind) if f.where.line == line and f.where.file == file]
        if not hits:
            found = [(f.where.line, f.where.text) for f in report.of(kind)]
            problems.append(f"missing {kind} at line {line} (found it at {found})")
        elif hits[0].lesson != lesson:
            problems.append(f"{kind} at line {line}: lesson {hits[0].lesson}, expected {lesson}")
    marked = {(kind, line) for _l, kind, line in want}
    for f in report.findings:
        if (f.kind, f.where.line) not in marked or f.where.file != file:
            problems.append(f"unexpected {f.kind} at {f.where.place}: {f.where.text} — {f.evidence}")
    if report.error:
        problems.append(f"the step stopped: {report.error}")
    return problems
