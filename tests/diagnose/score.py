"""Precision and recall of diagnose over the whole catalogue (issue 32): `python -m tests.diagnose.score`.

Every case of every cases_*.py module runs once (as a reader calls it: diagnose(step, *args), device unset). A
finding is true when the case marks its kind at its line (catalogue.py's markers, written before the tool ran);
"launch-bound step" is a finding about the whole step (its line only points at the busiest line), so it is true
when the case expects one anywhere. Whatever is marked and not found is missed. A case the tool could not run
(it raised, or it gave no verdict) misses everything it marks and counts no false finding.

precision = true / (true + false), recall = true / (true + missed), over every case together.
"""
from __future__ import annotations

import inspect
import os
import sys
import time
from dataclasses import dataclass, field

from . import cases_clean, cases_loops, cases_pitfalls, cases_real, cases_real2, cases_real_clean
from .catalogue import STEP_WIDE, expected, run

MODULES = (cases_pitfalls, cases_loops, cases_clean, cases_real, cases_real2, cases_real_clean)


def cases(modules=MODULES) -> list:
    return [f for m in modules for name, f in inspect.getmembers(m, inspect.isfunction)
            if name.startswith("case_") and f.__module__ == m.__name__]


@dataclass
class Row:
    case: str
    expected: list = field(default_factory=list)  # (kind, "file:line")
    found: list = field(default_factory=list)
    true: list = field(default_factory=list)
    false: list = field(default_factory=list)
    missed: list = field(default_factory=list)
    ran: str = ""  # "" when it ran to a verdict, else why not
    seconds: float = 0.0


def _place(file: str, line: int) -> str:
    return f"{os.path.basename(file)}:{line}"


_ran: dict = {}  # case -> (report or the exception it raised, seconds): test_catalogue's cases run once a process


def report_of(case, diagnose):
    """diagnose on one case, as in a fresh process: distributions validate their arguments (torch's default; the
    first torch.compile in a process turns that off for the whole process: torch/_dynamo/eval_frame.py,
    TorchPatcher). Each case runs once a process; its report (or what it raised) and seconds are kept."""
    from torch.distributions import Distribution

    if case not in _ran:
        before = Distribution._validate_args
        Distribution.set_default_validate_args(__debug__)
        start = time.perf_counter()
        try:
            _ran[case] = (run(case, diagnose), time.perf_counter() - start)
        except Exception as err:  # the tool refused or crashed
            _ran[case] = (err, time.perf_counter() - start)
        finally:
            Distribution.set_default_validate_args(before)
    got = _ran[case][0]
    if isinstance(got, Exception):
        raise got
    return got


def score_case(case, diagnose) -> Row:
    import lessons_lib

    row = Row(case.__name__.removeprefix("case_"))
    want = {(kind, file, line) for _lesson, kind, line, file in expected(case)}
    row.expected = sorted((k, _place(f, n)) for k, f, n in want)
    try:
        report = report_of(case, diagnose)
    except Exception as err:  # the tool refused or crashed: everything marked is missed
        row.ran = f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"
        row.missed = list(row.expected)
        row.seconds = _ran[case][1]
        return row
    row.seconds = _ran[case][1]
    if not isinstance(report, lessons_lib.diagnose.Report) or getattr(report, "error", ""):
        row.ran = f"no verdict: {getattr(report, 'error', '') or type(report).__name__}"
    found = {(f.kind, f.where.file, f.where.line) for f in report.findings}
    row.found = sorted((k, _place(f, n)) for k, f, n in found)
    wide = {k for k, _f, _n in want if k in STEP_WIDE}
    for k, f, n in sorted(found, key=lambda x: (x[0], x[2])):
        if (k, f, n) in want or k in wide:
            row.true.append((k, _place(f, n)))
        else:
            row.false.append((k, _place(f, n)))
    got = {k for k, _f, _n in found}
    row.missed = [(k, _place(f, n)) for k, f, n in sorted(want, key=lambda x: (x[0], x[2]))
                  if (k, f, n) not in found and not (k in STEP_WIDE and k in got)]
    row.true = list(dict.fromkeys(row.true))
    return row


def totals(rows: list[Row]) -> tuple[float, float, int, int, int]:
    tp = sum(len(r.true) for r in rows)
    fp = sum(len(r.false) for r in rows)
    fn = sum(len(r.missed) for r in rows)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    return precision, recall, tp, fp, fn


def _items(items: list) -> str:
    return "; ".join(f"{k} @{p}" for k, p in items) or "-"


def table(rows: list[Row]) -> str:
    from lessons_lib.display import text_table

    body = [("case", "expected", "found", "true", "false", "missed", "s")]
    for r in rows:
        body.append((r.case + (f" [did not run: {r.ran}]" if r.ran else ""), str(len(r.expected)), str(len(r.found)),
                     str(len(r.true)), str(len(r.false)), str(len(r.missed)), f"{r.seconds:.1f}"))
    precision, recall, tp, fp, fn = totals(rows)
    lines = [text_table(body), f"precision {precision:.3f} ({tp} true, {fp} false), "
                               f"recall {recall:.3f} ({tp} of {tp + fn} found), {len(rows)} cases"]
    details = [f"  {r.case}: false {_items(r.false)} | missed {_items(r.missed)}" for r in rows if r.false or r.missed]
    return "\n".join(lines + (["wrong or missed:"] + details if details else []))


def score(modules=MODULES, only=()) -> list[Row]:
    """One Row per case (those whose name or module contains one of `only`, when given)."""
    import lessons_lib

    chosen = [c for c in cases(modules) if not only or any(o in c.__name__ or o in c.__module__ for o in only)]
    return [score_case(c, lessons_lib.diagnose) for c in chosen]


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    print(table(score(only=sys.argv[1:])))
