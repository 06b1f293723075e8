"""GroupedLinear (lessons_lib/grouped_linear/): where grouped_mm runs, and why not elsewhere (features.py)."""

import pytest
import torch

from lessons_lib import grouped_linear as GL
from lessons_lib.grouped_linear import GroupedLinear
from .helpers import _reference, _rel


def test_grouped_mm_matches_float32_where_it_runs_and_explains_where_not():
    why = GL.grouped_mm_problem("cpu", torch.float32, 8, 4)
    if why is not None:
        assert "grouped_mm" in why
        pytest.skip(why)
    x = torch.randn(6, 16, requires_grad=True)
    w = torch.randn(2, 4, 8, requires_grad=True)
    b = torch.randn(2, 4, requires_grad=True)
    out = GL.grouped_mm(x, w, b)
    ref = _reference(x, w, b, -1)
    assert _rel(out, ref) < 1e-5
    out.sum().backward()  # the stride-0 gradient that the bare op rejects
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    _reference(x64, w64, b64, -1).sum().backward()
    assert _rel(x.grad, x64.grad) < 1e-5 and _rel(w.grad, w64.grad) < 1e-5 and _rel(b.grad, b64.grad) < 1e-5


def test_grouped_mm_problems_are_sentences():
    assert "multiple of 4" in GL.grouped_mm_problem("cpu", torch.float32, 7, 8)
    assert "float64" in GL.grouped_mm_problem("cpu", torch.float64, 8, 8)  # no fp64 kernel
    assert "meta" in GL.grouped_mm_problem("meta", torch.float32, 8, 8)


def test_grouped_mm_under_autocast_is_cast_like_an_autocast_op():
    if GL.grouped_mm_problem("cpu", torch.bfloat16, 16, 8):
        pytest.skip("grouped_mm does not run in bf16 on this CPU build")
    layer = GroupedLinear(2, 16, 8, strategy="grouped_mm")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(torch.randn(4, 32))
    assert y.dtype == torch.bfloat16
