"""Lesson 06's variants (variants.py): the seed's code and its fixes compute what they claim."""
import math

import pytest
import torch

from lessons_lib.lesson06_data_movement import evidence_loops, explore, variants
from lessons_lib.syncs import syncs


def test_hidden_syncs_are_found_one_per_line_and_the_fix_has_none(capsys):
    x = torch.rand(6, 4)
    found = syncs(variants.hidden_syncs_example, x)
    assert [s.where.split(" ")[0] for s in found.syncs] == ['print(f"loss', "if", "big", "rows", "stats", "total"]
    assert len(syncs(variants.hidden_syncs_fixed, x).syncs) == 0


def test_the_fixed_fragment_keeps_the_same_values():
    x = torch.rand(6, 4) * 2
    big, _rows, stats, total = variants.hidden_syncs_example(x.clone())
    big2, keep, mean2, total2, _loss = variants.hidden_syncs_fixed(x.clone())
    assert torch.allclose(big2[keep], big)
    assert torch.allclose(mean2, torch.tensor(stats)) and math.isclose(total2.item(), total, rel_tol=1e-6)


@pytest.mark.parametrize("rows, cols", [(3, 20), (1, 10), (7, 30)])
def test_the_vector_fixes_compute_the_per_element_loop(rows, cols):
    a, b = torch.rand(rows, cols), torch.rand(10)
    ref = evidence_loops.elementwise_reference(a, b)
    loop = variants.posted_elementwise(a, b, torch.empty_like(a), rows * cols)
    for out in (loop, variants.broadcast_view(a, b), variants.broadcast_gather(a, b)):
        assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-6


def test_the_gather_fix_handles_any_column_count():
    a, b = torch.rand(4, 13), torch.rand(10)
    assert torch.allclose(variants.broadcast_gather(a, b).double(), evidence_loops.elementwise_reference(a, b))


def test_every_cat_strategy_matches_float64_at_default_and_odd_shapes():
    rows = explore.CAT_LESSON.check_correct(seed=0)
    assert len(rows) == 4 * 3 and all(r.ok for r in rows)
