"""The catalogue (issue 29): each known pitfall is found, on its line, with its lesson; each clean step reports
nothing. Every case runs once a process, on meta copies of its arguments (nothing of the case's is touched); test_score
reads the same reports (score.report_of)."""
import inspect

import pytest

import lessons_lib

from . import cases_clean, cases_loops, cases_pitfalls, cases_real, cases_real2, cases_real_clean
from .catalogue import check, expected
from .score import report_of


def _cases(module):
    return [f for name, f in inspect.getmembers(module, inspect.isfunction) if name.startswith("case_")
            and f.__module__ == module.__name__]


PITFALLS = _cases(cases_pitfalls) + _cases(cases_loops)
CLEAN = _cases(cases_clean)
REAL, REAL_CLEAN = _cases(cases_real) + _cases(cases_real2), _cases(cases_real_clean)  # scored: test_score.py


def test_the_catalogue_is_big_enough_and_covers_every_kind():
    assert len(PITFALLS) >= 20 and len(CLEAN) >= 10 and len(REAL) + len(REAL_CLEAN) >= 15
    kinds = {kind for case in PITFALLS + REAL for _l, kind, _line, _file in expected(case)}
    assert kinds == set(lessons_lib.diagnose.KINDS), set(lessons_lib.diagnose.KINDS) - kinds
    assert all(expected(case) for case in PITFALLS + REAL)
    assert not any(expected(case) for case in CLEAN + REAL_CLEAN)


@pytest.mark.parametrize("case", PITFALLS, ids=lambda c: c.__name__[5:])
def test_each_pitfall_is_found_on_its_line_with_its_lesson(case):
    report = report_of(case, lessons_lib.diagnose)
    assert not check(case, report), "\n".join(check(case, report)) + "\n\n" + str(report)
    assert report.ran_on == "meta" and not report.clean
    for f in report.findings:  # every finding says all of it
        assert f.evidence and f.fix and f.where.text and f.lesson == lessons_lib.diagnose.KINDS[f.kind][0]
        assert "model" in f.cost or f.cost.startswith(("memory", "capture", "captures"))


@pytest.mark.parametrize("case", CLEAN, ids=lambda c: c.__name__[5:])
def test_each_clean_step_reports_nothing(case):
    report = report_of(case, lessons_lib.diagnose)
    assert not check(case, report), "\n".join(check(case, report)) + "\n\n" + str(report)
    assert report.clean and report.findings == [] and bool(report)
    text = str(report)
    assert text.startswith("✓ no pitfall found") and "what diagnose cannot see" in text
    assert all(n == 0 or isinstance(n, str) for n in report.checked.values())
    assert len(report.checked) == len(lessons_lib.diagnose.CHECKED)
