"""The report and the ways in (issue 29): fields, text, an HTML table in Jupyter, what it checked and cannot see,
`python -m lessons_lib.diagnose module:callable`, the callable package behind the front door."""
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import lessons_lib
from lessons_lib.diagnose import KINDS, Finding, Report

from . import cases_loops, cases_pitfalls
from .catalogue import run


@pytest.fixture(scope="module")
def report():
    return run(cases_loops.case_mask_made_every_step, lessons_lib.diagnose)


def test_the_package_is_the_front_door_and_callable():
    import lessons_lib.diagnose as package
    from lessons_lib import diagnose

    assert diagnose is package is lessons_lib.diagnose and callable(diagnose)
    assert isinstance(diagnose(nn.Linear(4, 4), torch.randn(2, 4)), Report)
    assert "diagnose" in lessons_lib.__all__ and package.diagnose.__doc__


def test_each_finding_has_every_part(report):
    assert report.kinds == ["host sync", "allocation churn"] and report.lessons == ["06"]
    for f in report.findings:
        assert isinstance(f, Finding) and f.kind in KINDS and f.lesson == "06" and f.section.startswith("§")
        assert f.where.text.startswith("mask = torch.ones") and f.where.line > 0 and f.where.file.endswith(".py")
        assert f.evidence and f.fix and f.numbers and "model" in f.cost
    sync = report.of("host sync")[0]
    assert sync.numbers["per_step"] == 1 and sync.seconds > 0 and "a blocking copy" in sync.evidence


def test_the_text_says_what_where_why_what_it_costs_and_the_fix(report):
    text = str(report)
    assert text.startswith("✗ 2 pitfalls found (ran once, on meta copies of your objects: nothing ran for real; "
                           "costs on a T4: roofline model")
    for piece in ("at cases_loops.py:", "mask = torch.ones(len(x), dtype=torch.bool).to(x.device)", "evidence:",
                  "cost:", "fix:", "lesson 06", "checked: ", "host syncs (06) ✗1", "what diagnose cannot see:",
                  "capture hazards (05) (not asked (graphs=True))"):
        assert piece in text
    assert repr(report) == text and " at 0x" not in text and not report


def test_in_jupyter_it_is_an_html_table(report):
    html = report._repr_html_()
    assert html.startswith("<table>") and html.count("<tr>") == 1 + len(report.findings)
    assert "cases_loops.py:" in html and "what diagnose cannot see" in html and "&lt;" not in report.rows()[0][0]
    clean = lessons_lib.diagnose(nn.Linear(8, 8), torch.randn(2, 8))._repr_html_()
    assert "no pitfall found" in clean and "<table>" not in clean


def test_a_clean_report_says_what_it_checked_and_what_it_cannot_see():
    report = lessons_lib.diagnose(nn.Linear(512, 512), torch.randn(256, 512))
    assert report.clean and len(report.checked) == len(lessons_lib.diagnose.CHECKED) and len(report.blind_spots) >= 6
    assert any("dispatcher" in b for b in report.blind_spots) and any("stand-in" in b for b in report.blind_spots)
    assert report.step["gemms"] == 2 and report.step["syncs"] == 0 and "kernel launches" in report.step["summary"]


def test_a_graph_kept_by_a_module_attribute_is_found_with_its_line():
    class Keeps(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.last = nn.Linear(2048, 2048), None  # big enough not to be launch-bound on a T4

        def forward(self, x):
            out = self.fc(x).relu()
            self.last = out  # a cache that keeps the graph alive
            return out

    report = lessons_lib.diagnose(Keeps(), torch.randn(4096, 2048))
    assert report.kinds == ["graph kept alive"] and report.findings[0].where.text == "out = self.fc(x).relu()"
    assert report.findings[0].numbers["tensors"] == 1 and report.findings[0].numbers["nodes"] >= 2


def test_capture_hazards_when_asked_come_from_graph_check():
    report = run(cases_pitfalls.case_capture_hazards, lessons_lib.diagnose)
    assert report.graph_report is not None and report.graph_report.verdict == "fails"
    assert {f.numbers["hazard"] for f in report.of("capture hazard")} == {"host sync", "frozen Python value"}
    assert any(b.startswith("graph_check: ") for b in report.blind_spots)


def test_timed_measures_only_on_a_real_device_on_copies_and_says_how_many_calls_ran():
    model, x = nn.Linear(32, 32), torch.randn(4, 32)
    assert lessons_lib.diagnose(model, x, timed=True).timing is None  # on meta: nothing to time
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def step(model, opt, x):
        model(x).square().mean().backward()
        opt.step()

    report = lessons_lib.diagnose(step, model, opt, x, device="cpu", timed=True)
    assert report.timing is not None and report.timing.median > 0 and report.timed_calls > 1
    assert f"measured (timed=True, on cpu, on copies: {report.timed_calls} calls of the step ran)" in str(report)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()) and model.weight.grad is None


def _cli(tmp_path, source: str, *args):
    (tmp_path / "mystep.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "lessons_lib.diagnose", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**__import__("os").environ,
                                                       "PYTHONPATH": str(__import__("pathlib").Path(lessons_lib.__file__).parents[1])})


@pytest.mark.own_process
def test_the_command_line_takes_example_inputs_or_defaults_and_refuses_in_one_line(tmp_path):
    found = _cli(tmp_path, """
        import torch
        def step(x, w):
            return (x.unsqueeze(1) @ w).sum().item()
        def example_inputs():
            return torch.randn(32, 16, 64), torch.randn(4, 64, 64)
        """, "mystep:step", "--gpu", "A100")
    assert found.returncode == 1 and "broadcast matmul" in found.stdout and "on an A100" in found.stdout
    assert "mystep.py:4" in found.stdout and found.stderr == ""
    clean = _cli(tmp_path, """
        import torch
        def step(x=torch.randn(64, 64), w=torch.randn(64, 64)):
            return x @ w
        """, "mystep.py:step")
    assert clean.returncode == 0 and clean.stdout.startswith("✓ no pitfall found")
    refused = _cli(tmp_path, """
        def step(x, y):
            return x
        """, "mystep:step")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == ("python -m lessons_lib.diagnose: mystep:step takes x, y without defaults: define "
                                      "example_inputs() in its module returning them as a tuple, or give each a "
                                      "default.")
    assert _cli(tmp_path, "x = 1\n", "mystep").stderr.count("\n") == 1


def test_counts_are_in_words():
    # display.count / display.number through the findings and the step's line: it printed "1 tensors", "1 GEMMs",
    # "1 kernel launches", "for all 1 syncs a step"
    from lessons_lib.diagnose.costs import per_step

    def saves(x):
        x.exp()

    def reads(x):
        s = x.sum().item()
        return (x * s).exp()  # work after the wait: the launch model charges the sync

    def reads_last(x):
        x.sum().item()  # the step's last op: nothing is queued behind the wait

    found = lessons_lib.diagnose(saves, torch.randn(16, requires_grad=True)).of("graph built for nothing")
    assert found[0].evidence.startswith("1 tensor (64 B) saved for a backward that never ran")
    sync = lessons_lib.diagnose(reads, torch.randn(16)).of("host sync")[0]
    assert sync.evidence.startswith("1 host sync a step:") and "for the 1 sync a step;" in sync.cost
    last = lessons_lib.diagnose(reads_last, torch.randn(16)).of("host sync")[0]
    # a wait at the end of the step still costs: the next step cannot be queued ahead, and a round trip (issue 32:
    # it began "nothing the launch model can see", which reads as "harmless")
    assert last.cost.startswith("≈ ") and "round trip" in last.cost and "cannot queue work ahead" in last.cost
    assert last.seconds >= 10e-6
    step = lessons_lib.diagnose(lambda a, b: a @ b, torch.randn(8, 8), torch.randn(8, 8)).step["summary"]
    assert step.startswith("1 kernel launch, 1 GEMM, ") and "0 host syncs a step (1 step seen" in step
    assert [per_step(n, s) for n, s in ((4, 2), (7, 2), (10, 3), (2469, 2))] == [2, 3.5, 3.3, 1234]
    assert lessons_lib.display.count(per_step(2469, 1), "kernel launch") == "2,469 kernel launches"
