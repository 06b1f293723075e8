"""diagnose on lesson 07's original and fixed training loops: each planted pitfall found on its line, none in the
fixed loop, and the step's numbers as lesson 07's findings table (tools.findings) counts them."""
import inspect

import pytest
import torch

import lessons_lib
from lessons_lib.device import fmt_bytes
from lessons_lib.lesson07_capstone import model as M
from lessons_lib.lesson07_capstone import tools

DIMS = M.shape("cpu")
STEPS = 2


def _line(fn, piece: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return next(start + i for i, text in enumerate(lines) if piece in text)


def _diagnose(fixed: bool, **options):
    """As tools.findings runs it: the CPU's shape, two steady-state steps, the optimizer built once and warmed."""
    torch.manual_seed(0)
    x, y = M.make_data(n=STEPS * DIMS["batch"], T=DIMS["T"])
    model = M.Model(fixed, DIMS["C"], DIMS["H"], DIMS["E"])
    train = M.fixed_train if fixed else M.slow_train
    opt = M.optimizer(model)
    train(model, x, y, 1, DIMS["batch"], opt=opt)
    return lessons_lib.diagnose(train, model, x, y, STEPS, DIMS["batch"], opt=opt, **options)


@pytest.fixture(scope="module")
def original():
    return _diagnose(False)


@pytest.fixture(scope="module")
def fixed():
    return _diagnose(True)


@pytest.fixture(scope="module")
def on_cpu():
    """The same two steps run for real on the CPU (device="cpu"), as tools.findings traces them."""
    return {"original": _diagnose(False, device="cpu"), "fixed": _diagnose(True, device="cpu")}


@pytest.fixture(scope="module")
def table():
    return tools.findings(steps=STEPS)


PLANTED = [  # (kind, lesson, function, a piece of its line): FIXES' pitfalls and the loop's, where the notebook finds them
    ("broadcast matmul", "01", M.qkv_broadcast, "return xh @ wq"),
    ("broadcast matmul", "01", M.heads_out_broadcast, "(y @ wo).sum(1)"),
    ("expanded copy kept for backward", "02", M.qkv_broadcast, "return xh @ wq"),
    ("expanded copy kept for backward", "02", M.heads_out_broadcast, "(y @ wo).sum(1)"),
    ("attention matrix kept for backward", "02", M.attention_kept, "torch.softmax"),
    ("GEMMs in a Python loop", "03", M.experts_loop, "lin(c)"),
    ("elementwise chain", "04", M.norm_by_hand, "torch.sqrt(var + eps)"),
    ("elementwise chain", "04", M.gelu_chain, "torch.tanh"),
    ("row-by-row gather", "06", M.slow_train, "xb = torch.stack"),
    ("row-by-row gather", "06", M.slow_train, "yb = torch.stack"),
    ("host sync", "06", M.slow_train, "mask = torch.ones"),
    ("host sync", "06", M.slow_train, "out[mask]"),
    ("host sync", "06", M.slow_train, "loss.backward()"),
    ("host sync", "06", M.slow_train, "loss.item()"),
    ("cat in a loop", "06", M.slow_train, "torch.cat([outs"),
    ("allocation churn", "06", M.slow_train, "mask = torch.ones"),
]


@pytest.mark.parametrize("kind, lesson, fn, piece", PLANTED, ids=[f"{k} @ {p}" for k, _l, _f, p in PLANTED])
def test_the_original_yields_each_planted_pitfall_on_its_line(original, kind, lesson, fn, piece):
    line = _line(fn, piece)
    hits = [f for f in original.of(kind) if f.where.line == line and f.where.file == inspect.getsourcefile(M)]
    assert hits, f"{kind} not at {piece!r} (line {line}): {[(f.where.line, f.where.text) for f in original.of(kind)]}"
    assert hits[0].lesson == lesson


def test_the_original_has_nothing_else_but_the_launch_bound_step(original):
    planted = {(k, _line(f, p)) for k, _l, f, p in PLANTED}
    extra = [(f.kind, f.where.line) for f in original.findings if (f.kind, f.where.line) not in planted]
    assert extra in ([], [("launch-bound step", _line(M.experts_loop, "lin(c)"))])  # the T4 model: 210 launches


def test_the_fixed_loop_yields_only_its_launch_bound_step(fixed):
    # issue 32: the original's default SGD is foreach on CUDA (no finding on a GPU); at the CPU's shape the fixed
    # loop's floor on a T4 is its launches, by the model (no launch-count floor): what section 6's CUDA graph answers
    assert [f.kind for f in fixed.findings] == ["launch-bound step"], str(fixed)


@pytest.mark.parametrize("stage", ["original", "fixed"])
def test_the_step_numbers_match_lesson_07s_findings_table(original, fixed, on_cpu, table, stage):
    """Kernel launches on a CUDA GPU, GEMMs, bytes copied, saved for backward, host syncs on a GPU and cats from
    the run on meta (as CUDA runs it); the ops dispatched on a CPU from the run on the CPU."""
    step, row = (original if stage == "original" else fixed).step, table[stage]
    assert step["launches"] == row["launches"] and step["gemms"] == row["gemms"]
    assert step["copied"] == row["copied"]
    # Saved: the table's ledger is one batch's forward and loss on the CPU; diagnose reads the loop's own graph as
    # its backward starts, on meta as CUDA runs it: the boolean-mask index keeps its indices too (original, 4.3 KiB),
    # and CUDA's memory-efficient attention pads its logsumexp to 32 rows (fixed, 56 KiB). As the table prints it:
    assert fmt_bytes(step["saved_bytes"]) == fmt_bytes(row["saved"])
    assert 0 <= step["saved_bytes"] - row["saved"] < 0.06 * row["saved"]
    assert step["syncs"] == row["syncs"] and step["cats"] == row["cats"]
    cpu = on_cpu[stage]
    assert cpu.ran_on == "cpu" and cpu.step["ops"] == row["ops"]


def test_the_sync_lines_are_the_notebooks(original, table):
    lines = {f.where.text: f.numbers["per_step"] for f in original.of("host sync")}
    assert lines == {w: n / STEPS for w, n in table["original"]["sync_lines"].items()}
