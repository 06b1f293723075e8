"""The front door (lessons_lib's public tools, issue 21): README.md's "Use it in your own code" examples
run as written, on CPU, and return what the README says; the names import lazily and print nothing."""
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lessons_lib

README = Path(__file__).resolve().parents[1] / "README.md"
FRONT_DOOR = ["GroupedLinear", "graph_check", "find_syncs", "trace_ops", "ledger", "measure", "compare", "diagnose"]
# The examples' order in the README's section: _run(index) runs one.
DIAGNOSE, GROUPED, GRAPH_CHECK, FIND_SYNCS, TRACE_OPS, LEDGER, MEASURE = range(7)


def _examples() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Use it in your own code\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def _run(index: int, capsys, tmp_path) -> tuple[dict, str]:
    """Run the README section's example `index` as a script file (so the tools can quote its lines);
    its namespace and what it printed."""
    script = tmp_path / f"readme_example_{index}.py"
    script.write_text(_examples()[index], encoding="utf-8")
    namespace = runpy.run_path(str(script), run_name="__main__")
    return namespace, capsys.readouterr().out


def test_the_readme_section_has_one_example_per_tool():
    examples = _examples()
    assert len(examples) == 7
    imported = " ".join(re.findall(r"from lessons_lib import ([\w, ]+)", "\n".join(examples)))
    assert sorted(n.strip() for n in imported.replace(",", " ").split()) == sorted(FRONT_DOOR)
    assert all(len(e.strip().splitlines()) <= 6 for e in examples)


def test_diagnose_example(capsys, tmp_path):
    ns, out = _run(DIAGNOSE, capsys, tmp_path)
    report = ns["report"]
    assert report.kinds == ["broadcast matmul", "expanded copy kept for backward"] and report.lessons == ["01", "02"]
    assert {(f.where.place, f.where.text) for f in report.findings} == {
        ("readme_example_0.py:4", "(x.unsqueeze(1) @ w).square().mean().backward()")}
    assert report.ran_on == "meta" and str(report) in out and 'torch.einsum("abmk,bkn->abmn", A, B)' in out
    assert "lesson 01" in out and "lesson 02" in out and "model: T4 datasheet" in out and "cannot see" in out


def test_grouped_linear_example(capsys, tmp_path):
    ns, out = _run(GROUPED, capsys, tmp_path)
    layer, y = ns["layer"], ns["y"]
    assert isinstance(layer, lessons_lib.GroupedLinear) and y.shape == (4, 8 * 32)
    x = torch.randn(3, 8 * 16)  # the layer is G independent Linears: group g of the output from group g of x
    ref = torch.einsum("bgk,gok->bgo", x.view(3, 8, 16), layer.weight) + layer.bias
    torch.testing.assert_close(layer(x), ref.reshape(3, 8 * 32))
    assert "GroupedLinear(groups=8, in_features=16, out_features=32" in out and "torch.Size([4, 256])" in out


def test_graph_check_example(capsys, tmp_path):
    ns, out = _run(GRAPH_CHECK, capsys, tmp_path)
    report = ns["report"]
    assert not report.safe and report.kinds == ["host sync"] and report.verdict == "fails"
    assert "x.sum().item()" in out and "fix:" in out and "cannot see" in out  # the user's line, a fix, blind spots
    assert str(report) in out


def test_find_syncs_example(capsys, tmp_path):
    ns, out = _run(FIND_SYNCS, capsys, tmp_path)
    report = ns["report"]
    assert [s.what for s in report.syncs] == ["aten.index (bool mask)", "Tensor.item()"]
    assert {s.where for s in report.syncs} == {"return x[x > 0].sum().item()"}
    assert report.transfers == [] and out.startswith("2 host syncs, 0 copies")


def test_trace_ops_example(capsys, tmp_path):
    ns, out = _run(TRACE_OPS, capsys, tmp_path)
    trace = ns["trace"]
    assert [op.name for op in trace.gemms] == ["bmm"]  # one GEMM for the whole broadcast batch
    assert [op.name for op in trace.copies] == ["clone", "clone"]  # both operands expanded, then copied
    assert trace.copied_bytes == (4 * 3 * 8 * 16 + 4 * 3 * 16 * 32) * 4
    assert trace.table() in out


def test_ledger_example(capsys, tmp_path):
    ns, out = _run(LEDGER, capsys, tmp_path)
    saved = ns["saved"]
    assert saved.total_bytes == 64 * 64 * 4  # only gelu's input is new; mm keeps x (already held), counted once
    assert {e.node for e in saved.entries} == {"MmBackward0", "GeluBackward0"}
    assert "new memory saved for backward: 16.0 KiB" in out


def test_measure_and_compare_example(capsys, tmp_path, one_thread):
    # One thread, as setup() picks on a busy machine: with two threads on a loaded 2-core machine a parallel
    # `a * 2` waits for its slower thread, and the rounds then decided, honestly, "loop is fastest, 7.8x".
    ns, out = _run(MEASURE, capsys, tmp_path)
    t, cmp = ns["t"], ns["cmp"]
    assert t.label == "mm 256" and 0 < t.median < 1 and len(t.samples) >= 2
    # No clock in the assertion (a busy machine may take any time): the budget's rule has its own test
    # in test_noise.py (test_a_budget_stops_new_rounds_but_never_before_the_minimum).
    from lessons_lib import noise
    assert sorted(cmp.names) == ["loop", "vector"] and cmp.seconds > 0
    assert noise.MIN_ROUNDS <= len(cmp.rounds["loop"]) == len(cmp.rounds["vector"]) <= noise.MAX_ROUNDS
    assert out.startswith("mm 256: ") and "per call" in out
    assert "vector is fastest" in out or "not decided" in out  # the noise rule's two honest answers


def test_the_front_door_prints_nothing(capsys):
    x = torch.randn(6, 4, requires_grad=True)
    results = [
        lessons_lib.GroupedLinear(2, 2, 3, strategy="einsum")(x),
        lessons_lib.graph_check(lambda t: t * 2, x),
        lessons_lib.find_syncs(lambda t: t.sum().item(), x),
        lessons_lib.trace_ops(torch.mm, x, x.T),
        lessons_lib.ledger(lambda t: (t * t).sum(), x),
        lessons_lib.measure(torch.mm, x, x.T, min_run_time=0.01),
        lessons_lib.compare({"a": lambda: x + 1}, rounds=3, min_run_time=0.005, max_time=1),
        lessons_lib.diagnose(lambda t: (t * t).sum().backward(), x),
    ]
    assert capsys.readouterr().out == ""
    for report in results[1:]:  # each report reads as text (not the default <object at 0x...>)
        assert " at 0x" not in str(report) and " at 0x" not in repr(report) and str(report).strip()


def test_front_door_names_do_not_shadow_modules():
    from lessons_lib import memory, noise, syncs, timing, trace

    assert lessons_lib.find_syncs is syncs.syncs and lessons_lib.trace_ops is trace.trace_ops
    assert lessons_lib.ledger is memory.ledger and lessons_lib.measure is timing.measure
    assert lessons_lib.compare is noise.compare
    import lessons_lib.diagnose as package  # the one front-door name that is a package: callable, and the package

    assert lessons_lib.diagnose is package and callable(package) and type(package).__name__ == "_CallableModule"
    assert type(syncs).__name__ == "module" and syncs.__name__ == "lessons_lib.syncs"
    assert sorted(lessons_lib.__all__) == sorted(["setup", *FRONT_DOOR])
    assert set(FRONT_DOOR) <= set(dir(lessons_lib))
    with pytest.raises(AttributeError):
        lessons_lib.no_such_tool  # noqa: B018


@pytest.mark.own_process
def test_import_stays_cheap():
    code = ("import sys, lessons_lib; print(sorted(m for m in sys.modules if m.startswith('lessons_lib.'))); "
            "from lessons_lib import GroupedLinear; print('lessons_lib.grouped_linear' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "True"]
