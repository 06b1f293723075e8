import torch

from lessons_lib.lesson07_capstone.evidence import pair
from lessons_lib.lesson07_capstone.model import fixed_train, make_data, slow_train


def test_fixed_equals_slow_in_float64_outputs_grads_and_steps():
    slow, fixed = pair(torch.float64)
    x, y = make_data(n=64, dtype=torch.float64)
    torch.testing.assert_close(fixed(x[:8]), slow(x[:8]), rtol=0, atol=1e-12)
    slow(x[:8]).sum().backward()
    fixed(x[:8]).sum().backward()
    torch.testing.assert_close(fixed.block.w_qkv.grad, slow.block.w_qkv.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(fixed.block.experts.weight.grad[3], slow.block.experts[3].weight.grad,
                               rtol=0, atol=1e-12)
    slow, fixed = pair(torch.float64)
    ls, os_ = slow_train(slow, x, y, steps=4)
    lf, of = fixed_train(fixed, x, y, steps=4)
    torch.testing.assert_close(torch.tensor(lf), torch.tensor(ls), rtol=0, atol=1e-12)
    torch.testing.assert_close(of, os_, rtol=0, atol=1e-12)


def test_it_learns():
    slow, _ = pair()
    x, y = make_data(n=512)
    losses, _ = slow_train(slow, x, y, steps=120)
    assert sum(losses[-16:]) / 16 < 0.6 * losses[0]
