"""GroupedLinear (lessons_lib/grouped_linear/): the module: construction, converters, errors, explain, compile, the weight's memory order (module.py)."""

import math

import pytest
import torch
import torch.nn.functional as F
import torch.nn as nn

from lessons_lib import grouped_linear as GL
from lessons_lib import timing
from lessons_lib.grouped_linear import GroupedLinear
from lessons_lib.grouped_linear import module as GL_module  # where GroupedLinear reads tune
from .helpers import SlowGroups


# --- the module ----------------------------------------------------------------------------------------

def test_initialisation_is_nn_linears_group_by_group():
    torch.manual_seed(3)
    layer = GroupedLinear(4, 6, 5)
    torch.manual_seed(3)
    linears = [nn.Linear(6, 5) for _ in range(4)]
    assert torch.equal(layer.weight, torch.stack([l.weight for l in linears]))
    assert torch.equal(layer.bias, torch.stack([l.bias for l in linears]))
    bound = 1 / math.sqrt(6)
    assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound


def test_state_dict_does_not_depend_on_the_strategy():
    a = GroupedLinear(3, 4, 5, strategy="loop")
    b = GroupedLinear(3, 4, 5, strategy="conv")
    assert set(a.state_dict()) == {"weight", "bias"}
    b.load_state_dict(a.state_dict())
    x = torch.randn(7, 12)
    assert torch.allclose(a(x), b(x), atol=1e-6)
    c = GroupedLinear(3, 4, 5)  # auto
    c.load_state_dict(b.state_dict())
    assert torch.allclose(c(x), a(x), atol=1e-6)


def test_from_linears_and_to_linears_round_trip():
    linears = [nn.Linear(5, 3) for _ in range(4)]
    layer = GroupedLinear.from_linears(linears, strategy="bmm")
    x = torch.randn(6, 20)
    want = torch.cat([lin(x[:, 5 * g:5 * (g + 1)]) for g, lin in enumerate(linears)], -1)
    assert torch.allclose(layer(x), want, atol=1e-6)
    back = layer.to_linears()
    assert all(torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias) for a, b in zip(back, linears))
    no_bias = GroupedLinear.from_linears([nn.Linear(2, 2, bias=False) for _ in range(3)], strategy="einsum")
    assert no_bias.bias is None and no_bias.to_linears()[0].bias is None


def test_from_slow_groups_gives_the_same_outputs_and_gradients():
    slow = SlowGroups(12, 3)
    layer = GroupedLinear.from_slow_groups(slow, strategy="matmul_channels")
    x = torch.randn(2, 12, 9, requires_grad=True)
    y_slow, y = slow(x), layer(x)
    assert torch.allclose(y, y_slow, atol=1e-6)
    g = torch.randn_like(y)
    gx_slow, = torch.autograd.grad(y_slow, x, g)
    gx, = torch.autograd.grad(y, x, g)
    assert torch.allclose(gx, gx_slow, atol=1e-6)


def test_from_conv1d_and_back():
    conv = nn.Conv1d(12, 8, 1, groups=4)
    x = torch.randn(3, 12, 5)
    for strategy in ("conv", "bmm", "matmul_channels", "auto"):
        layer = GroupedLinear.from_conv1d(conv, strategy=strategy)
        assert torch.allclose(layer(x), conv(x), atol=1e-6), strategy
    back = GroupedLinear.from_conv1d(conv).to_conv1d()
    assert torch.allclose(back(x), conv(x), atol=1e-6)
    assert torch.allclose(GroupedLinear.from_conv1d(conv, "loop")(x[0]), conv(x[0]), atol=1e-6)  # unbatched

def test_explain_returns_the_timings_it_saw_and_prints_nothing(capsys):
    layer = GroupedLinear(4, 8, 8)
    assert "no input seen yet" in layer.explain()
    with torch.no_grad():
        layer(torch.randn(16, 32))
    text = layer.explain()
    assert "picked" in text and "forward" in text and "the fastest" in text
    assert "matmul_channels" in text and "not timed" in text  # channels-last input: says why
    assert "nothing was timed" in GroupedLinear(2, 2, 2, strategy="bmm").explain()
    assert "memory as (G, in, out)" in GroupedLinear(2, 2, 2, strategy="bmm").explain()
    assert capsys.readouterr().out == ""


def test_compiled_module_never_times_inside_the_trace(monkeypatch):
    from lessons_lib import compiling

    if compiling.problem("cpu", backend="eager"):
        pytest.skip("torch.compile cannot trace here")
    if getattr(torch.cuda, "_course_simulated", None):
        pytest.skip("Dynamo's own checks fail under the simulated GPU (a CPU test: it runs without the plugin)")
    layer = GroupedLinear(4, 8, 8)
    x = torch.randn(16, 32)
    with torch.no_grad():
        want = layer(x)  # tunes eagerly
    monkeypatch.setattr(timing, "measure", lambda *a, **k: pytest.fail("timed inside torch.compile"))
    compiled = torch.compile(layer, backend="eager")
    with torch.no_grad():
        assert torch.allclose(compiled(x), want, atol=1e-6)
    fresh = torch.compile(GroupedLinear(4, 8, 8), backend="eager")  # nothing cached for it: the fallback
    assert fresh(x).shape == (16, 32)


# --- bad input: a clear ValueError before anything is allocated ------------------------------------------

@pytest.mark.parametrize("args, kwargs, message", [
    ((0, 4, 4), {}, "groups must be at least 1"),
    ((2, -1, 4), {}, "in_features must be at least 1"),
    ((2, 4, 2.5), {}, "out_features must be a whole number"),
    ((2, 4, 4), {"strategy": "fastest"}, "choose 'auto' or one of loop, bmm"),
    ((2, 4, 4), {"dim": "last"}, "dim must be an integer"),
])
def test_bad_construction(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        GroupedLinear(*args, **kwargs)


def test_channels_not_divisible_by_groups():
    with pytest.raises(ValueError, match="not divisible by groups=3"):
        GroupedLinear.for_channels(10, 9, 3)
    assert GroupedLinear.for_channels(12, 9, 3).in_features == 4


def test_wrong_input_width_names_the_expected_one():
    with pytest.raises(ValueError, match="expects groups × in_features = 2 × 4 = 8"):
        GroupedLinear(2, 4, 4)(torch.randn(3, 7))
    with pytest.raises(ValueError, match="out of range"):
        GroupedLinear(2, 4, 4, dim=3)(torch.randn(3, 8))


def test_unavailable_strategy_names_the_available_ones():
    layer = GroupedLinear(2, 4, 4, strategy="matmul_channels")
    with pytest.raises(ValueError, match=r"cannot run here: .*channel-first.* Available: loop, bmm, einsum"):
        layer(torch.randn(3, 8))
    gm = GroupedLinear(2, 3, 4, strategy="grouped_mm")  # 3 features: rows not 16-byte aligned
    with pytest.raises(ValueError, match="grouped_mm.*multiple of 4.*Available:"):
        gm(torch.randn(3, 6))
    with pytest.raises(ValueError, match="No strategy 'fast'"):
        layer.strategy = "fast"


@pytest.mark.parametrize("linears, message", [
    ([], "at least one"),
    ([nn.Linear(2, 3), nn.Linear(3, 3)], "same shape"),
    ([nn.Linear(2, 3), nn.Linear(2, 3).double()], "one dtype"),
    ([nn.Linear(2, 3), nn.Linear(2, 3, bias=False)], "all or none must have a bias"),
    ([nn.Linear(2, 3), nn.Conv1d(2, 3, 1)], "not an nn.Linear"),
])
def test_from_linears_refuses_mismatches(linears, message):
    with pytest.raises(ValueError, match=message):
        GroupedLinear.from_linears(linears)


def test_from_conv1d_refuses_a_conv_that_is_not_pointwise():
    with pytest.raises(ValueError, match="kernel_size"):
        GroupedLinear.from_conv1d(nn.Conv1d(4, 4, 3, groups=2))
    with pytest.raises(ValueError, match="no `projs`"):
        GroupedLinear.from_slow_groups(nn.Linear(2, 2))


def test_a_trace_on_meta_times_nothing_and_traces_the_strategy_auto_would_use(monkeypatch):
    x, w, b = torch.randn(4, 6, 5), torch.randn(3, 2, 2), torch.randn(3, 2)
    real = GL.tune(x, w, b, dim=1, training=False)  # tuned on the CPU: the choice a meta trace must follow
    monkeypatch.setattr(timing, "measure", lambda *a, **k: pytest.fail("timed on meta"))
    meta = GL.tune(*(t.to("meta") for t in (x, w, b)), dim=1, training=False)
    assert meta.strategy == real.strategy and "traced on meta" in meta.skipped["(all)"]
    GL.clear_cache()
    fresh = GL.tune(*(t.to("meta") for t in (x, w, b)), dim=1, training=False)
    assert fresh.strategy == GL.FALLBACK and not GL.cache()  # nothing tuned, nothing cached


def test_the_weights_memory_order_follows_the_strategy_and_converts_like_linears():
    layer = GroupedLinear(3, 4, 5)  # auto, no call yet: nn.Linear's order
    assert layer.weight.shape == (3, 5, 4) and layer.weight.is_contiguous()
    for name in GL.STRATEGIES:
        if name == "grouped_mm":
            continue
        fixed = GroupedLinear(3, 4, 5, strategy=name)
        want = GL.LAYOUT[name]
        assert GL.layout_of(fixed.weight) == want, name
        assert (fixed.weight.transpose(1, 2) if want == "gemm" else fixed.weight).is_contiguous(), name
    layer = GroupedLinear(3, 4, 5, strategy="conv").double()
    param = layer.weight
    layer.strategy = "bmm"  # the same Parameter (an optimizer holding it is unaffected), re-laid, same values
    assert layer.weight is param and GL.layout_of(layer.weight) == "gemm"
    assert layer.state_dict()["weight"].shape == (3, 5, 4)
    moved = layer.to(torch.float32)
    assert GL.layout_of(moved.weight) == "gemm"  # to() keeps the order
    x = torch.randn(2, 12, dtype=torch.float32, requires_grad=True)
    y = layer(x)
    y.sum().backward()
    assert layer.weight.grad.stride() == layer.weight.stride()  # the gradient follows the parameter's order
    ref = torch.cat([F.linear(x[:, 4 * g:4 * g + 4], layer.weight[g], layer.bias[g]) for g in range(3)], dim=-1)
    torch.testing.assert_close(y, ref)


def test_auto_lays_the_weight_out_for_the_strategy_it_chose_and_the_next_call_skips_the_lookup(monkeypatch):
    GL.clear_cache()
    layer = GroupedLinear(4, 8, 8, dim=1)
    x = torch.randn(2, 32, 16)
    with torch.no_grad():
        y = layer(x)
        chosen = layer.strategy_for(x)
        assert GL.layout_of(layer.weight) == GL.LAYOUT[chosen]
        monkeypatch.setattr(GL_module, "tune", lambda *a, **k: pytest.fail("the same input looked up again"))
        torch.testing.assert_close(layer(x), y)  # the fast path: the last call's choice, no lookup
        GL.clear_cache()  # a cleared cache makes the last choice stale: the next call tunes again
        with pytest.raises(pytest.fail.Exception):
            layer(x)


def test_an_input_on_another_device_than_the_layer_is_refused_in_one_line():
    """A meta input into a CPU layer used to run and return a CPU tensor of garbage."""
    layer = GroupedLinear(3, 4, 5, strategy="bmm")
    with pytest.raises(ValueError, match=r"input is on meta but this layer's parameters are on cpu"):
        layer(torch.randn(2, 12, device="meta"))
    on_meta = GroupedLinear(3, 4, 5, device="meta")  # auto: refused before any tuning
    with pytest.raises(ValueError, match=r"input is on cpu .* on meta"):
        on_meta(torch.randn(2, 12))
    assert on_meta(torch.randn(2, 12, device="meta")).device.type == "meta"
    x = torch.randn(2, 12)
    layer(x)  # the fast path remembers this input's signature...
    layer.to("meta")
    with pytest.raises(ValueError, match="input is on cpu"):  # ...and the parameters' device is part of it
        layer(x)
