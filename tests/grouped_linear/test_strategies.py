"""GroupedLinear (lessons_lib/grouped_linear/): every strategy computes the same function (strategies.py)."""

import pytest
import torch
import torch.nn as nn

from lessons_lib import grouped_linear as GL
from lessons_lib.grouped_linear import GroupedLinear
from .helpers import _reference, _rel, CHANNEL_FIRST, ON_CPU


# --- every strategy computes the same function -----------------------------------------------------------

@pytest.mark.parametrize("strategy", ON_CPU)
@pytest.mark.parametrize("shape, dim, G, K, O, bias", [
    ((5, 21), -1, 3, 7, 5, True),  # odd everything
    ((2, 3, 8), -1, 4, 2, 9, False),  # extra leading dims, no bias
    ((1, 1), -1, 1, 1, 1, True),  # one group of one feature
])
def test_channels_last_matches_float64_outputs_and_gradients(strategy, shape, dim, G, K, O, bias):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(G, O, K, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(G, O, generator=gen, dtype=torch.float64, requires_grad=True) if bias else None
    g = torch.randn(*shape[:-1], G * O, generator=gen, dtype=torch.float64)
    out = GL.FUNCTIONS[strategy](x, w, b, dim)
    ref = _reference(x, w, b, dim)
    leaves = [t for t in (x, w, b) if t is not None]
    got = torch.autograd.grad(out, leaves, g)
    want = torch.autograd.grad(ref, leaves, g)
    assert out.shape == ref.shape
    assert _rel(out, ref) < 1e-12
    for a, e in zip(got, want):
        assert _rel(a, e) < 1e-12


@pytest.mark.parametrize("strategy", CHANNEL_FIRST)
@pytest.mark.parametrize("shape, dim", [((3, 15, 7), 1), ((15, 4), 0), ((2, 15, 3, 5), -3)])
def test_channel_first_matches_float64(strategy, shape, dim):
    G, K, O = 3, 5, 4
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(G, O, K, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(G, O, generator=gen, dtype=torch.float64, requires_grad=True)
    out = GL.FUNCTIONS[strategy](x, w, b, dim)
    ref = _reference(x, w, b, dim)
    assert out.shape == ref.shape and _rel(out, ref) < 1e-12
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    for a, e in zip(torch.autograd.grad(out, (x, w, b), g), torch.autograd.grad(ref, (x, w, b), g)):
        assert _rel(a, e) < 1e-12


@pytest.mark.parametrize("strategy", CHANNEL_FIRST)
def test_gradcheck_in_float64(strategy):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: GL.FUNCTIONS[strategy](x, w, b, 1), (x, w, b))


@pytest.mark.parametrize("strategy", ["loop", "bmm", "einsum", "block_diagonal", "conv", "vmap", "auto"])
def test_autocast_on_cpu_bf16(strategy):
    layer = GroupedLinear(4, 16, 8, strategy=strategy)
    x = torch.randn(10, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    ref = _reference(x, layer.weight.detach(), layer.bias.detach(), -1)
    assert _rel(y.float(), ref) < 3e-2  # bf16 has an 8-bit mantissa: 2^-8 per product, sqrt(16) of them


def test_block_diagonal_refuses_a_weight_that_does_not_fit_before_allocating():
    why = GL.problem("block_diagonal", "cpu", torch.float32, 512, 512, 512, True)
    assert why and "MiB" in why
    layer = GroupedLinear(2, 4, 4, strategy="block_diagonal", device="meta")
    layer.weight = nn.Parameter(torch.empty(512, 512, 512, device="meta"))
    layer.groups, layer.in_features, layer.out_features = 512, 512, 512
    with pytest.raises(ValueError, match="block_diagonal.*Available"):
        layer(torch.empty(2, 512 * 512, device="meta"))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("strategy", GL.STRATEGIES)
def test_a_non_finite_input_stays_in_its_own_group(strategy, bad):
    """Separate Linears keep a NaN or inf in group 0's input in group 0's output, at that position only.
    block_diagonal's zero blocks multiplied it into every group (0 × NaN = NaN), and auto may pick it."""
    G, K, O = 3, 8, 4
    if strategy == "grouped_mm" and GL.grouped_mm_problem("cpu", torch.float32, K, O):
        pytest.skip(GL.grouped_mm_problem("cpu", torch.float32, K, O))
    torch.manual_seed(0)
    layer = GroupedLinear(G, K, O, strategy=strategy, dim=1)
    x = torch.randn(2, G * K, 5)
    poisoned = x.clone()
    poisoned[0, 1, 2] = bad  # group 0, batch 0, position 2
    with torch.no_grad():
        clean, got = layer(x), layer(poisoned)
    assert torch.equal(got[:, O:], clean[:, O:]), "groups 1 and 2 changed"
    assert not torch.isfinite(got[0, :O, 2]).any(), "group 0 at the poisoned position should not be finite"
    keep = torch.ones_like(clean, dtype=torch.bool)
    keep[0, :O, 2] = False
    assert torch.equal(got[keep], clean[keep])
