"""Lesson 02's variants (variants.py): every fix matches float64 in output and both gradients."""
import dataclasses

import torch

from lessons_lib.lesson import Variant
from lessons_lib.lesson02_autograd_memory import explore, variants

from .helpers import ODD, _inputs


# --- correctness -------------------------------------------------------------------------------
def test_every_fix_matches_float64_in_output_and_both_gradients():
    rows = explore.LESSON.check_correct([explore.LESSON.defaults("cpu"), ODD, {"batch": 1, "groups": 1, "dim": 1},
                                   {"batch": 33, "groups": 2, "dim": 17}], seed=0)
    assert len(rows) == 4 * len(explore.LESSON.variants)
    assert [(n, s, e) for n, s, e, _t, ok in rows if not ok] == []
    assert ODD in explore.LESSON.odd_shapes


def test_the_check_compares_gradients_not_only_the_output():
    class WrongBackward(variants.GroupedMatmul):
        @staticmethod
        def backward(ctx, grad_out):
            dx, dW = variants.GroupedMatmul.backward(ctx, grad_out)
            return dx, dW.transpose(1, 2)  # right shape, wrong values

    wrong = dataclasses.replace(explore.LESSON, variants=[*explore.LESSON.variants,
                                                    Variant("wrong dW", lambda x, W: WrongBackward.apply(x, W))])
    rows = wrong.check_correct([ODD], seed=0)
    assert {n for n, *_r, ok in rows if not ok} == {"wrong dW"}
    inputs = variants.make_inputs(ODD, "cpu", torch.float32)
    out_only = variants.train_step(lambda x, W: WrongBackward.apply(x, W), *inputs)[0]
    assert out_only.shape == (5, 3, 7)


def test_the_custom_function_passes_gradcheck():
    gen = torch.Generator().manual_seed(0)
    for xg, wg in ((True, True), (True, False), (False, True)):
        x = torch.randn(3, 2 * 4, dtype=torch.float64, generator=gen).requires_grad_(xg)
        W = torch.randn(2, 4, 4, dtype=torch.float64, generator=gen).requires_grad_(wg)
        assert torch.autograd.gradcheck(variants.GroupedMatmul.apply, (x, W))


def test_the_threads_einsum_computes_x_times_w_transposed():
    x, W = _inputs(ODD, False, False)
    want = variants.broadcast_matmul(x, W)
    assert not torch.allclose(variants.thread_einsum(x, W), want, atol=1e-5)
    assert torch.allclose(variants.thread_einsum(x, W.transpose(1, 2)), want, atol=1e-5)
    assert torch.allclose(variants.einsum(x, W), want, atol=1e-5)

