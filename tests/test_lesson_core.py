"""The generic lesson machinery: validation at the door, correctness that cannot be fooled,
stop, the time estimate, and freeing memory after an OOM."""
import math

import pytest
import torch

from lessons_lib import device, grading
from lessons_lib.lesson import Lesson, Param, Stopped, Variant


def _toy(**kw):
    return Lesson(
        key="toy", title="toy",
        params=[Param("n", "n", cpu=8, gpu=8, lo=1, hi=1 << 20)],
        variants=[Variant("mm", lambda a, b: a @ b), Variant("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b))],
        make_inputs=lambda p, d, dt: (torch.randn(p["n"], p["n"], device=d, dtype=dt),
                                      torch.randn(p["n"], p["n"], device=d, dtype=dt)),
        peak_bytes=lambda p, dt: 3 * p["n"] ** 2 * 4,
        reduction=lambda p: p["n"], baseline="mm", **kw,
    )


@pytest.fixture
def no_alloc(monkeypatch):
    toy = _toy()
    monkeypatch.setattr(toy, "make_inputs", lambda *a: pytest.fail("allocated before refusing"))
    return toy


# --- correctness that cannot be fooled -----------------------------------------------------------
def test_nan_fails_the_correctness_check():
    toy = _toy()
    toy.variants.append(Variant("nan", lambda a, b: (a @ b) * float("nan")))
    rows = {r.variant: r for r in toy.check_correct([{"n": 5}], seed=1)}
    assert rows["nan"].ok is False


def test_inf_fails_the_correctness_check():
    toy = _toy()
    toy.variants.append(Variant("inf", lambda a, b: (a @ b) / 0.0))
    rows = {r.variant: r for r in toy.check_correct([{"n": 5}], seed=1)}
    assert rows["inf"].ok is False


def test_a_variant_that_overwrites_its_input_cannot_fool_the_next_one():
    toy = _toy()
    toy.variants.insert(0, Variant("vandal", lambda a, b: a.zero_() @ b))
    rows = {r.variant: r for r in toy.check_correct([{"n": 5}], seed=1)}
    assert rows["vandal"].ok is False


def test_the_others_still_pass_after_a_vandal():
    toy = _toy()
    toy.variants.insert(0, Variant("vandal", lambda a, b: a.zero_() @ b))
    rows = {r.variant: r for r in toy.check_correct([{"n": 5}], seed=1)}
    assert rows["einsum"].ok is True


def test_rows_are_named():
    row = _toy().check_correct([{"n": 5}], seed=1)[0]
    assert (row.variant, row.params["n"], row.ok) == ("mm", 5, True)


def test_rel_error_is_inf_for_a_wrong_shape():
    assert grading.rel_error(torch.ones(2, 3), torch.ones(3, 2)) == math.inf


# --- validation at the door ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.complex64, "float8", None, 3])
def test_bad_dtypes_are_refused(no_alloc, dtype):
    with pytest.raises(ValueError, match="dtype"):
        no_alloc.run({"n": 4}, "cpu", dtype)


@pytest.mark.parametrize("dev", ["meta", "mps", "gpu0", 3])
def test_bad_devices_are_refused(no_alloc, dev):
    with pytest.raises(ValueError, match="device|cpu"):
        no_alloc.run({"n": 4}, dev)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_refused(no_alloc):
    with pytest.raises(ValueError, match="no CUDA GPU"):
        no_alloc.run({"n": 4}, "cuda")


@pytest.mark.parametrize("method", ["work", "traces", "work_table"])
def test_meta_analyses_check_parameter_names(method):
    with pytest.raises(ValueError, match="Unknown parameter"):
        getattr(_toy(), method)({"nn": 4})


@pytest.mark.parametrize("method", ["work", "traces", "work_table"])
def test_meta_analyses_refuse_zero_sizes(method):
    with pytest.raises(ValueError, match="between"):
        getattr(_toy(), method)({"n": 0})


def test_meta_analyses_allow_shapes_too_big_to_allocate():
    assert _toy().work({"n": 1 << 20})["mm"].flops == 2 * (1 << 20) ** 3


def test_one_variant_name_as_a_string_is_one_name():
    run = _toy().run({"n": 4}, "cpu", variants="einsum", min_run_time=0.01)
    assert list(run.timings) == ["einsum"]


def test_unknown_variant_is_refused(no_alloc):
    with pytest.raises(ValueError, match="No variant"):
        no_alloc.run({"n": 4}, "cpu", variants=["einsum", "fast"])


@pytest.mark.parametrize("values", [[], "48", None])
def test_sweep_refuses_bad_values(no_alloc, values):
    with pytest.raises(ValueError):
        no_alloc.sweep("n", values, device="cpu")


def test_sweep_refuses_an_unknown_parameter(no_alloc):
    with pytest.raises(ValueError, match="no parameter"):
        no_alloc.sweep("m", [1, 2], device="cpu")


@pytest.mark.parametrize("t", ["fast", 0, -1.0, float("nan")])
def test_min_run_time_must_be_a_positive_number(no_alloc, t):
    with pytest.raises(ValueError, match="min_run_time"):
        no_alloc.run({"n": 4}, "cpu", min_run_time=t)


# --- stop, estimate, prepare ---------------------------------------------------------------------
def test_stop_raises_before_the_next_variant():
    calls = []

    def stop():
        calls.append(1)
        return len(calls) > 1

    with pytest.raises(Stopped):
        _toy().run({"n": 4}, "cpu", min_run_time=0.01, stop=stop)


def test_estimate_grows_with_the_number_of_points():
    toy = _toy()
    one = toy.estimate_seconds({"n": 64}, "cpu", min_run_time=0.1)
    assert toy.estimate_seconds({"n": 64}, "cpu", min_run_time=0.1, points=4) == pytest.approx(4 * one)


def test_estimate_covers_the_minimum_run_time_of_each_variant():
    assert _toy().estimate_seconds({"n": 64}, "cpu", min_run_time=0.1) >= 0.2


def test_prepare_runs_outside_the_clock_and_is_reported():
    toy = _toy()
    toy.variants[1] = Variant("einsum", toy.variants[1].fn, prepare=lambda fn, *inputs: fn)
    run = toy.run({"n": 4}, "cpu", min_run_time=0.01)
    assert set(run.prepare_seconds) == {"einsum"}


# --- OOM: refused, freed, and the kernel goes on --------------------------------------------------
def test_oom_guard_frees_the_failed_steps_tensors():
    import weakref

    refs = []

    def step():
        big = torch.ones(1000)
        refs.append(weakref.ref(big))
        oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        raise oom("CUDA out of memory (simulated)")

    with pytest.raises(device.DoesNotFit) as info:
        with device.oom_guard("cpu"):
            step()
    assert refs[0]() is None, "the OOM's traceback kept the failed step's tensor alive"
    assert info.value.__suppress_context__
