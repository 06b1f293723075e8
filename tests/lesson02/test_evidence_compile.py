"""Lesson 02 under torch.compile (evidence_compile.py): guarded, a sentence instead of a traceback."""
import pytest
import torch

from lessons_lib import device
from lessons_lib.lesson02_autograd_memory import evidence, evidence_compile


# --- torch.compile: guarded ---------------------------------------------------------------------
def test_compile_check_explains_instead_of_raising(monkeypatch):
    monkeypatch.setattr(device, "compile_problem", lambda: "no C compiler was found on PATH.")
    report = evidence_compile.compile_check({"batch": 4})
    assert str(report) == "torch.compile was not run: no C compiler was found on PATH."
    monkeypatch.setattr(device, "compile_problem", lambda: None)

    def broken(*args, **kwargs):
        raise RuntimeError("backend exploded\nlong traceback")

    monkeypatch.setattr(torch, "compile", broken)
    # on the CPU: on a GPU without Triton, compiling.problem answers first (a sentence too, before any compile)
    report = evidence_compile.compile_check({"batch": 4}, "cpu")
    assert report.problem == "torch.compile failed here (RuntimeError: backend exploded)"


@pytest.mark.slow
@pytest.mark.skipif(device.compile_problem() is not None, reason="torch.compile cannot run here")
def test_compile_check_on_cpu_reports_what_the_partitioner_saved(capsys):
    report = evidence_compile.compile_check({"batch": 16, "groups": 4, "dim": 8}, "cpu", min_run_time=0.01)
    assert report.problem is None, report.problem
    assert capsys.readouterr().out.startswith("Compiling broadcast_matmul (torch.compile")  # announced, not silent
    assert report.correct.startswith("✓ all 2 variants match")
    assert "CompiledFunctionBackward" in report.graph
    # measured fact on CPU with inductor's partitioner: the expanded copy is still saved
    assert report.saved_new == evidence.expanded_copy_bytes({"batch": 16, "groups": 4, "dim": 8})


def test_the_cpu_stand_in_reports_no_peaks_or_times_that_would_not_be_inductors():
    report = evidence_compile.compile_check({"batch": 16, "groups": 4, "dim": 8}, "cpu", min_run_time=0.01)
    assert (report.peaks, report.time) == (None, None)


def test_a_compile_failure_is_a_sentence_not_a_traceback(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("no working C++ compiler (simulated)")

    monkeypatch.setattr(evidence_compile.torch, "compile", broken)
    report = evidence_compile.compile_check({"batch": 16, "groups": 4, "dim": 8}, "cpu")
    assert "no working C++ compiler" in report.problem

