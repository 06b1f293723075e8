"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): fewer ops by hand, foreach SGD, every
fix against float64 (fixes.py)."""
import re

import pytest
import torch

from lessons_lib.lesson04_launch_overhead import fixes

from .helpers import DEVICES


def test_in_place_saves_memory_not_launches():
    lines = fixes.by_hand_table({"width": 160, "batch": 256, "layers": 4}).splitlines()[2:]
    table = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line.strip()) for line in lines)}
    assert table["PseudoLinear"][0] == table["mul + add_"][0] == "8"  # same launches...
    assert table["mul + add_"][1] == "640.0 KiB"
    assert table["PseudoLinear"][1] == "1.2 MiB"
    assert table["addcmul"][0] == "4"


def test_foreach_sgd_is_one_op_for_many_tensors():
    ops = fixes.optimizer_ops(n_tensors=16)
    assert ops["for loop"] == ["add_"] * 16
    assert ops["foreach"] == ["_foreach_add_"]


# --- every fix against float64, forward and training step --------------------------------------------
def test_every_fix_is_checked_forward_training_and_optimizer():
    text = fixes.check_fixes("cpu")
    assert text.count("✓") == 3, text
    assert "mul + add_" in text.splitlines()[0]  # the in-place rewrite is checked forward too


def test_foreach_check_fails_a_wrong_optimizer(monkeypatch):
    real = torch.optim.SGD

    def sloppy(params, **kw):  # foreach steps with the wrong learning rate
        return real(params, **{**kw, "lr": kw["lr"] * (1.5 if kw.get("foreach") else 1)})

    monkeypatch.setattr(torch.optim, "SGD", sloppy)
    assert fixes.foreach_check().startswith("✗")


@pytest.mark.parametrize("device", DEVICES)
def test_fixes_are_checked_on_each_device(device):
    assert fixes.check_fixes(device).count("✓") == 3


@pytest.mark.parametrize("device", DEVICES)
def test_optimizer_timings_are_paired_rounds_on_the_device_passed(device):
    # One timing a side spread 77% on the H200 and the sentence could decide nothing: paired rounds now, and
    # opt.step (a closure with no tensor argument) is timed on the device passed, not guessed as "cpu".
    cmp = fixes.optimizer_timings(device, n_tensors=8, size=16, max_time=1.0)
    assert len(cmp.rounds["SGD step, foreach=False"]) >= 3
    assert {t.device for t in cmp.timings.values()} == {torch.device(device).type}
    said = fixes.optimizer_summary(cmp)
    r = cmp.ratio("SGD step, foreach=False", "SGD step, foreach=True")
    assert said.startswith("foreach against the for loop: ") and ("not decided" in said) == (not r.decided)


# --- bad input: one sentence before anything is allocated (issue 28) ------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda: fixes.optimizer_timings(n_tensors=10**6, size=10**6), "needs about"),
    (lambda: fixes.optimizer_timings(n_tensors=0), "n_tensors must be a whole number"),
    (lambda: fixes.optimizer_timings(size=2.5), "size must be a whole number"),
    (lambda: fixes.optimizer_timings("meta"), "not 'meta'"),
])
def test_optimizer_timings_refuses_before_allocating(call, match, no_allocation):
    with pytest.raises(ValueError, match=match):
        call()
