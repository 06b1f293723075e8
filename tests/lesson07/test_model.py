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


# --- bad inputs (issue 28 §5): one line each, before anything is built or trained ---------------------------

@pytest.mark.parametrize("kw, words", [
    (dict(H=0), "H=0: the heads"), (dict(E=0), "E=0: the experts"), (dict(K=0), "K=0: the classes"),
    (dict(C=2.5), "C=2.5"), (dict(fixed=1), "fixed=1: pass True, False, or a set"),
    (dict(fixed={"gemm", "nosuch"}), "Unknown fix(es) ['nosuch']"), (dict(qkv=3), "qkv=3: pass a function")])
def test_a_bad_model_is_refused_in_one_line(kw, words):
    with pytest.raises(ValueError) as err:
        M.Model(**kw)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_one_fix_named_as_a_string_is_that_fix():
    assert M.Model(fixed="gemm", C=32, H=4, E=4).fixed == {"gemm"}  # not its letters ['e', 'g', 'm']


@pytest.mark.parametrize("loop", [M.slow_train, M.fixed_train, M.train])
@pytest.mark.parametrize("kw, words", [(dict(steps=0), "steps=0"), (dict(batch=0), "batch=0"),
                                       (dict(batch=-3), "batch=-3"), (dict(batch=2.5), "batch=2.5"),
                                       (dict(batch=65), "more rows than the data holds (64)")])
def test_both_loops_refuse_the_same_bad_steps_and_batch(loop, kw, words):
    x, y = M.make_data(n=64, T=4)
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        loop(M.Model("loop" if loop is M.fixed_train else False, 32, 4, 4), x, y, **kw)


def test_copy_weights_refuses_models_of_another_shape():
    """Between 4 and 8 heads it copied silently, and the outputs then differed by 3e-2."""
    with pytest.raises(ValueError, match="differ in shape.*H=4.*H=8"):
        M.copy_weights(M.Model(False, 32, 4, 4), M.Model(True, 32, 8, 4))


def test_a_readers_qkv_with_the_original_numbers_keeps_the_original_model():
    from lessons_lib.lesson07_capstone.exercise import qkv_starter

    torch.manual_seed(0)
    mine = M.Model(False, 24, 3, 2, dtype=torch.float64, qkv=qkv_starter)
    ref = M.copy_weights(mine, M.Model(False, 24, 3, 2, dtype=torch.float64))
    x, _ = M.make_data(n=5, T=3, dtype=torch.float64)
    assert torch.allclose(mine(x), ref(x), rtol=1e-12, atol=1e-12)
    back = M.copy_weights(ref, M.Model(False, 24, 3, 2, dtype=torch.float64, qkv=qkv_starter))
    assert torch.equal(back.block.qkv.weight, mine.block.qkv.weight)
