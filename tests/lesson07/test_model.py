"""The capstone's model: every stage of fixes computes the original's numbers (float64), and the task is learnt."""
import pytest
import torch

from lessons_lib.lesson07_capstone import fixes as X
from lessons_lib.lesson07_capstone import model as M
from lessons_lib.lesson07_capstone.evidence import pair


@pytest.mark.parametrize("dims", [X.ODD, X.SMALL, M.shape("cpu")], ids=["odd", "small", "cpu-default"])
def test_every_stage_matches_the_original_in_float64(dims):
    rows = X.check_stages([dims])
    assert [r.stage.split(" at ")[0] for r in rows] == [f"+ {f}" for f in M.FIXES]
    bad = [r for r in rows if not r.ok]
    assert not bad, X.agreement_report(bad)


def test_any_subset_of_fixes_matches_in_the_exercise_order():
    rows = X.check_stages([X.ODD], steps=2, fixes=["loop", "saved", "gemm"])
    assert all(r.ok for r in rows), X.agreement_report(rows)


def test_a_wrong_fix_is_caught():
    # a qkv GEMM whose head order is scrambled: same shapes, wrong numbers
    ref, new = X.model_pair({"gemm"}, X.ODD)
    with torch.no_grad():
        new.block.qkv.weight.copy_(new.block.qkv.weight.flip(0))
    x, y = M.make_data(n=7, T=5, dtype=torch.float64)
    assert not torch.allclose(new(x), ref(x))


def test_weights_round_trip_between_layouts():
    ref, new = X.model_pair(True, X.ODD)
    back = M.copy_weights(new, M.Model(False, 24, 3, 2, dtype=torch.float64))
    for a, b in zip(ref.parameters(), back.parameters()):
        assert torch.equal(a, b)


def test_unknown_fix_and_bad_shape_get_sentences():
    with pytest.raises(ValueError, match="Unknown fix"):
        M.Model({"gemmm"})
    with pytest.raises(ValueError, match="divisible"):
        M.Model(False, C=30, H=4, E=2)


def test_the_default_shape_is_sized_by_device():
    assert M.shape("cpu") == M.SHAPE["cpu"]
    assert M.shape("cuda")["T"] > M.shape("cpu")["T"]


def test_it_learns_and_the_loss_curves_match():
    slow, fixed = pair()
    x, y = M.make_data(n=1024)
    ls, _ = M.slow_train(slow, x, y, steps=40)
    lf, _ = M.fixed_train(fixed, x, y, steps=40)
    assert sum(ls[-8:]) / 8 < 0.6 * ls[0]
    # float32: the curves agree to rounding, step by step
    assert max(abs(a - b) for a, b in zip(ls, lf)) < 1e-3


def test_the_fixed_loop_keeps_its_indices_on_the_device():
    """The same batches as the host's order (both loops see the same rows), moved once and sliced there."""
    host = M.batches(50, 4, 8)
    same = M.batches(50, 4, 8, device="cpu")
    meta = M.batches(50, 4, 8, device="meta")
    assert all(torch.equal(h, s) for h, s in zip(host, same))
    assert all(m.device.type == "meta" and m.shape == h.shape for h, m in zip(host, meta))
    assert len({id(m._base) for m in meta}) == 1  # slices of one moved order, not a copy each step


def test_the_optimizers():
    """The forum's SGD keeps its defaults (a for loop on a CPU, foreach on CUDA); the fixed loop's is fused with
    the lr a 0-dim tensor on the parameters' device (capture-safe; float64 so float64 checks match 0.01 exactly),
    foreach on meta, which has no fused kernel."""
    slow, fixed = pair(dims=X.ODD)
    so, fo = M.optimizer(slow), M.optimizer(fixed)
    assert so.defaults["foreach"] is None and so.defaults["fused"] in (None, False)
    assert fo.defaults["fused"] is True
    lr = fo.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and lr.dim() == 0 and lr.dtype == torch.float64 and float(lr) == 1e-2
    with torch.device("meta"):
        on_meta = M.Model(True, 24, 3, 2)
    assert M.optimizer(on_meta).defaults["foreach"] is True
