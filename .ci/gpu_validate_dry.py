"""gpu-validate's dry run: every stage on this CPU, tiny budgets, stand-ins where a stage needs CUDA.

It proves the plumbing, not the course: each stage keeps to its budget (one is given too little on
purpose and must be reported stopped, and the next stage must still run), each writes its results into
$OUT as it goes, and $OUT ends with at most 8 files. The stand-ins (written into the work folder):
  claims    a pass, a failure with its traceback, a test that kills its process (the rest must run in
            a new one), then a test that sleeps past the stage's 20 s budget: claims is STOPPED
  record    the real `python -m lessons_lib.record --device cpu --quick --lessons 00_timing` (its JSON
            must land in $OUT)
  probes    one that prints and exits 0, one that exits 3, one that hangs past its 2 s cap
  notebooks one whose second cell raises (the third must still run), one that sleeps past its 10 s cap
  unit      passes and a failure under pytest-xdist (-n 2), and a test past its 3 s timeout where
            pytest-timeout is installed
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

# (planned seconds, takes what earlier stages left): claims gets too little on purpose.
BUDGETS = {"env": (20, False), "claims": (20, False), "record": (60, True), "probes": (8, False),
           "notebooks": (25, True), "unit": (25, True)}
CAPS = {"claims": 60, "record": 45, "probes": 2, "notebooks": 10, "unit": 3}

CLAIMS = '''import os, time
import pytest

pytestmark = pytest.mark.gpu


def test_a_claim_that_holds():
    assert 1 + 1 == 2


def test_a_claim_that_fails():
    measured, bar = 0.88, 0.9
    assert measured >= bar, "the stand-in's bar"


def test_a_claim_that_kills_its_process():
    os._exit(3)


def test_a_claim_after_the_crash():
    assert True


def test_a_claim_that_outlasts_the_stage():
    time.sleep(600)
'''

UNIT = '''import time
import pytest


@pytest.mark.parametrize("n", range(6))
def test_passes(n):
    assert n >= 0


def test_fails():
    assert "gpu" == "cpu", "the stand-in unit failure"
'''

UNIT_HANG = '''

def test_hangs_past_its_timeout():
    time.sleep(600)
'''

PROBES = {
    "ok_probe.py": 'print("needs CUDA (stand-in probe): a fact printed")\n',
    "failing_probe.py": 'import sys\nprint("a probe that fails")\nsys.exit(3)\n',
    "hanging_probe.py": 'import time\nprint("a probe that hangs", flush=True)\ntime.sleep(600)\n',
}

NOTEBOOKS = {
    "notebooks/00_raises.ipynb": ["print('first cell')", "1 / 0", "print('the cell after the error ran')"],
    "notebooks/solutions/00_sleeps_solution.ipynb": ["print('start')", "import time\ntime.sleep(600)",
                                                     "print('never')"],
}


def _notebook(cells: list[str]) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                                  "outputs": [], "source": src} for i, src in enumerate(cells)],
                       "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                   "language": "python"}},
                       "nbformat": 4, "nbformat_minor": 5})


def prepare(ctx) -> None:
    """Point ctx's stages at the stand-ins and give it the dry run's budgets and caps."""
    root = ctx.work / "standin"
    ini = "[pytest]\nmarkers =\n    gpu: a stand-in claim test\n"
    # Without pytest-timeout nothing but the stage's budget would stop the hanging unit test: leave it out.
    hang = UNIT_HANG if importlib.util.find_spec("pytest_timeout") else ""
    for name, text in (("claims", CLAIMS), ("unit", UNIT + hang)):
        (root / name).mkdir(parents=True)
        (root / name / "pytest.ini").write_text(ini)
        (root / name / f"test_{name}_standin.py").write_text(text)
    for name, text in PROBES.items():
        (root / "probes").mkdir(exist_ok=True)
        (root / "probes" / name).write_text(text)
    for rel, cells in NOTEBOOKS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(_notebook(cells))
    ctx.budgets, ctx.caps = dict(BUDGETS), dict(CAPS)
    ctx.notebooks = [Path(rel) for rel in NOTEBOOKS]
    ctx.standins = {
        "claims": [str(root / "claims"), "-m", "gpu"],
        "record": ["--device", "cpu", "--quick", "--lessons", "00_timing"],
        "probes": [root / "probes" / n for n in sorted(PROBES)],
        "notebooks_root": root,
        "unit": [str(root / "unit")],
        "unit_workers": 2,
        "notebook_jobs": 2,  # as on a GPU machine: two notebooks at once
    }

