"""A pytest plugin for .ci/gpu-validate (`-p gpu_validate_stream`, with .ci on PYTHONPATH).

1. Each failure's traceback is printed the moment the test fails. pytest prints tracebacks in its
   summary at the end; a run that its time budget stops never gets there (on the H200, 2026-11-26, the
   stopped unit suite left three F's and no names). Now the log holds every failure it met, in order.
2. With GPU_VALIDATE_EVENTS=FILE, one line per test start and end goes to FILE as it happens
   ("start<TAB>nodeid", "done<TAB>nodeid<TAB>PASSED|FAILED|ERROR|SKIPPED"): gpu-validate reads which
   test was running when a process died or was stopped, without parsing pytest's terminal output.
Under pytest-xdist both run in the controller, which receives every worker's reports.
"""
from __future__ import annotations

import os

import pytest

_config = None
_events = None
_status: dict[str, str] = {}
_RANK = {"PASSED": 0, "SKIPPED": 1, "FAILED": 2, "ERROR": 3}


def pytest_configure(config):
    global _config, _events
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports
        return
    _config = config
    if os.environ.get("GPU_VALIDATE_EVENTS"):
        _events = open(os.environ["GPU_VALIDATE_EVENTS"], "a", buffering=1)  # a line at a time


def _event(*fields: str) -> None:
    if _events is not None:
        _events.write("\t".join(f.replace("\t", " ").replace("\n", " ") for f in fields) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _event("start", nodeid)


@pytest.hookimpl(trylast=True)  # after the terminal reporter's own word for the test
def pytest_runtest_logreport(report):
    if _config is None:
        return
    word = ("FAILED" if report.when == "call" else "ERROR") if report.failed else \
        "SKIPPED" if report.skipped else "PASSED"
    if _RANK[word] >= _RANK.get(_status.get(report.nodeid, "PASSED"), 0):
        _status[report.nodeid] = word
    reporter = _config.pluginmanager.getplugin("terminalreporter")  # registered after this plugin's configure
    if report.failed and reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(f"---- {report.nodeid} failed in {report.when}:")
        for line in (report.longreprtext or "(no traceback)").splitlines():
            reporter.write_line(f"    {line}")
        reporter.write_line(f"---- end of {report.nodeid}")


def pytest_runtest_logfinish(nodeid, location):
    _event("done", nodeid, _status.pop(nodeid, "PASSED"))
