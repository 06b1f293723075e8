"""Lesson 03 (many small Linear layers in parallel, forum seed 002): every variant computes the same function (lessons.py, variants.py)."""

import dataclasses

from lessons_lib import lesson03_grouped_linear as L
from lessons_lib.lesson03_grouped_linear import lessons, variants
from lessons_lib.lesson import Variant
from .helpers import SMALL


# --- correctness ------------------------------------------------------------------------------------------

def test_every_variant_matches_float64_forward_and_training_at_odd_shapes():
    for lesson in (L.LESSON, L.TRAIN_LESSON):
        rows = lesson.check_correct(seed=0)
        assert len(rows) == (1 + len(L.ODD_SHAPES)) * len(lessons.VARIANTS)
        assert [(r.variant, r.params) for r in rows if not r.ok] == []
    assert "✓ all 7 variants" in L.check_all().splitlines()[1]


def test_the_training_check_catches_a_wrong_weight_gradient():
    def no_weight_grad(x, weight, bias):
        return variants.bmm_rows(x, weight.detach(), bias) + 0 * weight.sum()

    bad = dataclasses.replace(L.TRAIN_LESSON, variants=[*L.TRAIN_LESSON.variants, Variant("wrong", no_weight_grad)])
    rows = bad.check_correct([SMALL], seed=0)
    assert {r.variant for r in rows if not r.ok} == {"wrong"}
