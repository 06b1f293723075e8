"""Lesson 00's GPU claim tests (skipped without CUDA by tests/conftest.py). Their bars: one prediction (the no-sync
timer against the kernel it leaves unwaited), one ordering and one checker verdict (tests/claims.py); the table of
every claim: .ci/gpu-runs/CLAIMS.md."""
import pytest
import torch

from lessons_lib.lesson00_timing import demos, exercise
from lessons_lib import roofline, timing

from .. import claims
from .helpers import no_sync, solution


# --- GPU claim tests (skipped without CUDA by conftest.py) ------------------------------------


@pytest.mark.gpu
def test_gpu_no_sync_reports_the_launches_not_the_kernels():
    # Bar (prediction): the no-sync timer reports the host's launch, the harness the kernel: 2·8192³ FLOPs at the
    # datasheet fp32 peak over one op's host time (roofline.ASSUMED_LAUNCH) is about 2,000× on an H100; bar 5×.
    a = torch.randn(8192, 8192, device="cuda")
    peaks = roofline.datasheet(claims.datasheet_gpu())
    model = 2 * 8192**3 / peaks.flops / peaks.launch
    wrong = timing.wrong_no_sync(torch.mm, a, a, repeats=10)
    honest = timing.measure(torch.mm, a, a)
    claims.report("lesson 00, the harness over the no-sync timer on an 8192 matmul", "prediction",
                  f"{honest.median / wrong.median:,.0f}× against the model's {model:,.0f}× (kernel at the datasheet "
                  f"peak over one launch): {claims.ratio_words(honest.median / wrong.median, model)}; bar 5×")
    assert wrong.median * 5 <= honest.median, (wrong, honest)


@pytest.mark.gpu
def test_gpu_first_call_reports_more_than_the_harness():
    d = demos.demo_first_call("cuda", n=4096)  # bar (ordering): the first call pays cuBLAS's set-up on top
    claims.report("lesson 00, a first call against the harness", "ordering",
                  f"{d.wrong.median * 1e3:.2f} ms against {d.honest.median * 1e3:.3f} ms; bar: more")
    assert d.wrong.median > d.honest.median, str(d)


@pytest.mark.gpu
def test_gpu_checker_agrees_with_the_harness_on_a_real_kernel():
    v = exercise.check_exercise(solution)  # bar (count): the checker's verdicts, right and wrong harness
    claims.report("lesson 00, the checker on a real kernel", "count", f"solution {v.checks[-1][1]}")
    assert v.passed, str(v)
    assert v.checks[-1][1] is True, str(v)
    v = exercise.check_exercise(no_sync)
    assert v.checks[-1][1] is False, str(v)
