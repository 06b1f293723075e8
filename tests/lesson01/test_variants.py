"""Lesson 01's variants (variants.py): every one matches float64, and the check catches wrong ones."""
import dataclasses

import torch

from lessons_lib.lesson import Variant
from lessons_lib.lesson01_broadcast_matmul import explore, variants

from .helpers import ODD, SEED


# --- correctness -----------------------------------------------------------------------------
def test_every_variant_matches_float64_at_the_seed_and_odd_shapes():
    rows = explore.LESSON.check_correct([SEED, ODD], seed=0)
    assert len(rows) == 2 * len(explore.LESSON.variants) == 10
    assert [(name, err) for name, _shape, err, _tol, ok in rows if not ok] == []
    assert explore.LESSON.correctness_report(rows).startswith("✓ all 5 variants match")


def test_default_and_declared_odd_shapes_pass():
    assert ODD in explore.LESSON.odd_shapes
    rows = explore.LESSON.check_correct(seed=1)
    assert rows
    assert all(ok for *_rest, ok in rows)


def test_the_correctness_check_flags_wrong_variants():
    def forgot_transpose(x, weight, bias):  # square weights, so the shapes still work
        return torch.stack([x @ w + b for w, b in zip(weight, bias)])

    def first_bias_only(x, weight, bias):
        return variants.einsum(x, weight, bias[:1].expand_as(bias))

    wrong = dataclasses.replace(
        explore.LESSON, variants=[*explore.LESSON.variants, Variant("forgot transpose", forgot_transpose),
                            Variant("first bias only", first_bias_only)])
    rows = wrong.check_correct([SEED, ODD], seed=0)
    bad = {name for name, _s, _e, _t, ok in rows if not ok}
    assert bad == {"forgot transpose", "first bias only"}
    report = wrong.correctness_report(rows)
    assert report.startswith("✗ 4 mismatches")
    assert "forgot transpose at num_modules=7" in report

