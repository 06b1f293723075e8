"""lessons_lib.microbench: the microbenchmarks that fix a GPU model's constants before the measurement it predicts.

The arithmetic runs everywhere; the CUDA paths run on a GPU and under the simulated one (-p tests.simgpu), whose
numbers mean nothing (no bar here rests on them)."""
import pytest
import torch

from lessons_lib import microbench
from lessons_lib.trace import on_meta, trace_ops

CUDA = torch.cuda.is_available()


def _ops(bias: bool = True):
    x, w, b = on_meta(torch.empty(4, 8, 16), torch.empty(4, 16, 32), torch.empty(4, 8, 32))
    fn = (lambda x, w, b: torch.baddbmm(b, x, w).relu()) if bias else (lambda x, w, b: torch.bmm(x, w).relu())
    return trace_ops(fn, x, w, b).compute_ops


def test_a_trace_runs_as_its_gemms_measured_times_and_the_rest_at_a_copys_bandwidth():
    ops = _ops(bias=False)
    (gemm,) = [op.gemm for op in ops if op.gemm]
    assert gemm == (4, 8, 32, 16)
    relu = sum(op.accessed_bytes for op in ops if not op.gemm)
    assert microbench.serial_seconds(ops, {gemm: 1e-3}, 1e6) == pytest.approx(1e-3 + relu / 1e6)
    assert microbench.serial_seconds(ops, {gemm: 1e-3}, 1e12, kernel_min=1e-5) == pytest.approx(1e-3 + 1e-5)


def test_baddbmms_bias_copy_is_charged_on_top_of_its_gemm():
    ops = _ops(bias=True)
    gemm = next(op for op in ops if op.gemm)
    assert gemm.inner_copy_bytes == 4 * 8 * 32 * 4  # the expanded bias, copied into the output first
    assert microbench.kernel_seconds(gemm, {gemm.gemm: 0.0}, 1e6) == pytest.approx(2 * gemm.inner_copy_bytes / 1e6)


def test_a_gemm_shape_never_measured_is_refused_in_one_sentence():
    with pytest.raises(ValueError, match="measure it with gemm_table"):
        microbench.serial_seconds(_ops(), {}, 1e9)


@pytest.mark.parametrize("call", [
    lambda: microbench.device_seconds(torch.add, torch.ones(1), torch.ones(1), device="cpu"),
    lambda: microbench.gemm_seconds((1, 2, 2, 2), device="cpu"),
    lambda: microbench.sync_seconds("cpu"),
    lambda: microbench.host_seconds(torch.neg, torch.ones(1), device="cpu"),
])
def test_a_cpu_is_refused_it_has_no_device_queue(call):
    with pytest.raises(ValueError, match="pass 'cuda'"):
        call()


def test_bad_counts_are_refused():
    if not CUDA:
        pytest.skip("no CUDA here (run with -p tests.simgpu --simulate-gpu=t4)")
    with pytest.raises(ValueError, match="at least 1"):
        microbench.device_seconds(torch.neg, torch.ones(1, device="cuda"), calls=0)


def test_the_cuda_paths_run_where_cuda_is_available():
    if not CUDA:
        pytest.skip("no CUDA here (run with -p tests.simgpu --simulate-gpu=t4)")
    a = torch.randn(64, 64, device="cuda")
    assert microbench.device_seconds(torch.mm, a, a, calls=3, repeats=2) > 0
    table = microbench.gemm_table(_ops(bias=False))
    assert list(table) == [(4, 8, 32, 16)] and table[(4, 8, 32, 16)] > 0
    assert microbench.sync_seconds(repeats=5) >= 0
    assert microbench.host_seconds(torch.neg, a, calls=5) > 0


def test_lesson_03s_prediction_runs_on_cuda_where_cuda_is_available():
    if not CUDA:
        pytest.skip("no CUDA here (run with -p tests.simgpu --simulate-gpu=t4)")
    from lessons_lib.lesson03_grouped_linear import step_model

    p = {"batch": 1, "groups": 2, "group_size": 4, "length": 8}
    pred = step_model.predict("cuda", params=p)
    assert set(pred["steps"]) == set(step_model.STEP_VARIANTS) and all(s > 0 for s in pred["steps"].values())
    assert pred["gemms"] and pred["bandwidth"] > 0
