"""Lesson 06's explorers and recorded results (explore.py)."""
import pytest
import torch

from lessons_lib import transfers
from lessons_lib.lesson06_data_movement import evidence_layout, evidence_transfers, explore

SIMULATED = getattr(torch.cuda, "_course_simulated", None)


def _boom(*args, **kwargs):
    raise AssertionError("allocated inputs for a shape that should have been refused first")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only refusal")
def test_the_transfer_explorer_refuses_on_a_cpu_before_allocating(monkeypatch):
    monkeypatch.setattr(explore, "_transfer_inputs", _boom)
    ex = explore.transfer_explorer("cpu")
    with pytest.raises(ValueError, match="No CUDA GPU"):
        ex.run(megabytes=1)


def test_cat_explorer_refuses_bad_and_huge_shapes_before_allocating(monkeypatch):
    monkeypatch.setattr(explore.CAT_LESSON, "make_inputs", _boom)
    ex = explore.cat_explorer("cpu")
    with pytest.raises(ValueError, match="pieces"):
        ex.run(pieces=0)
    with pytest.raises(ValueError):
        ex.run(pieces=4096, rows=65536, cols=65536)  # does not fit


@pytest.mark.parametrize("dtype", ["int8", "float64", "bf16"])
def test_cat_explorer_refuses_dtypes_it_does_not_offer(dtype, monkeypatch):
    monkeypatch.setattr(explore.CAT_LESSON, "make_inputs", _boom)
    with pytest.raises(ValueError, match="dtype|float32"):
        explore.cat_explorer("cpu").run(dtype=dtype, pieces=4)


def test_cat_explorer_runs_a_small_shape(one_thread):
    run, fig = explore.cat_explorer("cpu").run(pieces=8, rows=2, cols=4)
    assert set(run.timings) == {"cat in a loop", "preallocate + fill", "cat once"}
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_record_quick_on_cpu_and_its_targets(one_thread):
    if torch.cuda.is_available():
        pytest.skip("CPU recording")
    section = explore.record("cpu", quick=True)
    assert set(section) >= {"headline", "sweeps", "inplace", "elementwise"}
    assert section["elementwise"]["kind"].startswith("extrapolated")
    names = [t["name"] for t in explore.targets("cpu", section)]
    assert names == ["06 cat once / cat in a loop, bytes at n = 256 (trace)",
                     "06 cat once speed-up over cat in a loop at n = 256"]
    assert explore.targets("cpu", section)[0]["ok"] is True


def test_the_module_defines_no_lesson_that_the_model_cannot_trace():
    from lessons_lib import record

    assert [lesson.key for lesson in record.lessons_of(explore)] == ["06_data_movement"]


@pytest.mark.skipif(not SIMULATED, reason="the CUDA branches, under the simulated GPU")
def test_cuda_branches_run_under_the_simulated_gpu(one_thread, monkeypatch):
    from lessons_lib import roofline

    # measuring peaks on the simulated GPU would run an 8192² matmul on the CPU: use the T4's datasheet
    monkeypatch.setattr(roofline, "measure_peaks", lambda dev, dtype=torch.float32: roofline.datasheet("T4"))
    assert transfers.problem("cuda") is None
    b = transfers.measure(2**20, "h2d", pinned=False, device="cuda", min_run_time=0.01)
    assert b.nbytes == 2**20 and b.gbs > 0
    section = explore.record("cuda", quick=True)
    assert "transfers" in section and "seed_example1" in section
    names = [t["name"] for t in explore.targets("cuda", section)]
    assert "06 cat once / cat in a loop, bytes at n = 256 (trace)" in names
    assert "06 seed example 1: as posted / kept on device" in names
    run, fig = explore.transfer_explorer("cuda").run(megabytes=1)
    expected = {"pageable"} if transfers.pin_problem() else {"pageable", "pinned", "pin, then copy"}
    assert set(run.timings) == expected  # the simulated GPU cannot pin: the pageable copy alone
    import matplotlib.pyplot as plt

    plt.close(fig)
    cmp, said = evidence_transfers.seed_example1_verdict("cuda", size=(16, 16), num_iterations=2, max_time=0.5)
    assert cmp.names == ["as posted", "kept on device"] and ("posted loop" in said or "not decided" in said)
    cmp, said = evidence_layout.layout_verdict("cuda", batch=1, size=8, max_time=0.5)
    assert ("not decided" in said) == (not cmp.ratio("contiguous NCHW", "channels_last").decided)
