"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): every variant computes PseudoLinear
(forward, training step, weight gradients) and in place on a saved tensor (variants.py, with LESSON and TRAIN_LESSON
from lessons.py)."""
import dataclasses

from lessons_lib.lesson import Variant
from lessons_lib.lesson04_launch_overhead import lessons, variants
from .helpers import SMALL


# --- correctness: every variant computes PseudoLinear, forward and training step ----------------------
def test_every_variant_matches_float64_forward_at_default_and_odd_shapes():
    rows = lessons.LESSON.check_correct(seed=0)
    assert len(rows) == 4 * len(lessons.LESSON.variants)
    assert [r[0] for r in rows if not r[4]] == []


def test_every_variant_matches_float64_in_a_training_step():
    rows = lessons.TRAIN_LESSON.check_correct(seed=0)
    assert {r[0] for r in rows} == {"Linear", "PseudoLinear", "addcmul", "mul + add_"}
    assert [r[0] for r in rows if not r[4]] == []


def test_the_training_check_compares_weight_gradients():
    def wrong_weight_grad(x, W, w, b):  # right output, but w gets no gradient through the product
        for l in range(w.shape[0]):
            x = x * w[l].detach() + b[l] + 0 * w[l]
        return x

    bad = dataclasses.replace(lessons.TRAIN_LESSON,
                              variants=[*lessons.TRAIN_LESSON.variants, Variant("wrong", wrong_weight_grad)])
    rows = bad.check_correct([SMALL], seed=0)
    assert {r[0] for r in rows if not r[4]} == {"wrong"}


def test_autograd_refuses_to_overwrite_a_saved_tensor_by_its_version_counter():
    text = variants.inplace_on_a_saved_tensor()
    assert "RuntimeError" in text
    assert "modified by an inplace operation" in text  # the saved-tensor check, not the leaf rule
    assert "leaf" not in text


def test_linear_tf32_leaves_the_tf32_settings_as_it_found_them():
    # It used to set and restore the old flag (allow_tf32): since torch 2.9 that leaves fp32_precision "ieee"
    # where it was "none" (inherit), and reading the old flag raises once a program has used both APIs.
    import torch

    m = torch.backends.cuda.matmul
    x, W, w, b = lessons.make_inputs(SMALL, torch.device("cpu"), torch.float32)
    if isinstance(getattr(m, "fp32_precision", None), str):
        before = m.fp32_precision
        try:
            for start in ("none", "ieee", "tf32"):
                m.fp32_precision = start
                out = variants.linear_tf32(x, W, w, b)
                assert m.fp32_precision == start
            assert torch.allclose(out, variants.linear(x, W, w, b))  # on a CPU it is Linear
        finally:
            m.fp32_precision = before
    else:
        before = m.allow_tf32
        variants.linear_tf32(x, W, w, b)
        assert m.allow_tf32 == before
