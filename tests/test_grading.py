"""Exercise verdicts (grading.py): Verdict lines, GPU-only lines, call_for_tensor."""
import torch

from lessons_lib.grading import Verdict


def test_verdict():
    v = Verdict("x")
    v.check("one", True)
    v.skip("gpu", "no CUDA")
    assert v.passed
    assert "✓ one" in str(v)
    assert "– gpu" in str(v)
    v.check("two", False, "why")
    assert not v.passed
    assert "✗ two (why)" in str(v)
    assert not Verdict("empty").passed


def test_a_verdict_on_every_machine_drops_only_the_gpu_lines():
    v = Verdict("x")
    v.check("correct", True)
    v.on_gpu("fast enough", False, "0.4×")
    assert not v.passed
    portable = v.on_every_machine()
    assert portable.passed and [n for n, _ok, _d in portable.checks] == ["correct"]
    assert len(v.checks) == 2  # the original keeps its [GPU] line


def test_call_for_tensor_turns_wrong_returns_into_one_line():
    from lessons_lib.grading import call_for_tensor

    out, problem = call_for_tensor(lambda x: x * 2, torch.ones(2, 3), shape=(2, 3))
    assert problem is None
    assert torch.equal(out, torch.full((2, 3), 2.0))
    _, problem = call_for_tensor(lambda x: x.tolist(), torch.ones(2, 3), shape=(2, 3))
    assert problem == "your function returned list, not a tensor"
    _, problem = call_for_tensor(lambda x: x.t(), torch.ones(2, 3), shape=(2, 3), shape_name="(B, N)")
    assert problem == "output shape (3, 2), expected (B, N) = (2, 3)"
