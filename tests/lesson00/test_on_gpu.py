"""Lesson 00 from its cell 40 on, on a GPU: the H200 run stopped at cell 40 (a TypeError in the flushed CUDA
timing), so no cell after it had run on a GPU. Here the library calls those cells make run under the SIMULATED
GPU (tests/simgpu: the CUDA branches, at small sizes; no time is asserted). Skipped without it."""
import statistics

import matplotlib
import pytest
import torch

from lessons_lib import plots, results, timing
from lessons_lib import lesson00_timing as L
from lessons_lib.lesson00_timing import exercise

from .helpers import solution

matplotlib.use("Agg")
SIM = getattr(torch.cuda, "_course_simulated", None)
pytestmark = pytest.mark.skipif(not SIM, reason="needs the simulated GPU: -p tests.simgpu --simulate-gpu=t4")


def test_cells_40_to_56_run_on_a_gpu_and_label_it(monkeypatch):
    import matplotlib.pyplot as plt

    device = torch.device("cuda")
    # cell 40: the hot-cache demo, its flushed timing included
    d_cache = L.demo_hot_cache(device, nbytes=64 * 1024, rotate_bytes=1 << 20, min_run_time=0.02)
    assert "cuda)" in str(d_cache).splitlines()[0]
    # cell 42: the samples of section 3.6's mean and harness
    d_mean = L.demo_mean(device, n=64, min_run_time=0.02)
    plots.samples([d_mean.wrong, d_mean.honest], title="samples")
    # cell 44: the fake workload sleeps on the host, labelled so
    t = timing.wrong_mean_with_cold_start(L.FakeWorkload("outliers"), repeats=5, label="fake", device="cpu")
    assert t.device == "cpu" and statistics.median(t.samples) >= L.STEADY
    # cell 50: the harness on the device
    a = torch.randn(64, 64, device=device)
    assert timing.measure(torch.mm, a, a, label="mm", device=device, min_run_time=0.02).device == "cuda"
    # cell 52: every demo on one plot, each verdict through the noise rule
    demos = [d_mean, d_cache]
    plots.machines(L.rows_for_plot(demos), title="wrong way vs harness (cuda)")
    assert all(isinstance(d.verdict(), str) for d in demos)
    # cell 54: recorded GPU results beside this machine (none recorded, or each labelled)
    assert L.recorded_gpu_summary()
    for rec in results.for_lesson(L.KEY, gpu_only=True):
        plots.machines({**L.rows_for_plot(demos, "this machine: "), **L.recorded_rows(rec)}, title=rec.label())
    # cell 56: every wrong timer and the harness on an nn.Linear on the device
    lin = torch.nn.Linear(16, 16, device=device)
    x = torch.randn(32, 16, device=device)
    with torch.no_grad():
        c = L.compare(lin, x, max_time=2, min_run_time=0.005, device=device)
    assert {t.device for t in c.timings} == {"cuda"} and len(c.verdicts()) == 5
    plt.close("all")


def test_cells_60_and_63_the_checker_grades_on_a_gpu(monkeypatch):
    # the [GPU] line: the reader's benchmark against the harness on a real (here simulated) matmul, in rounds
    monkeypatch.setattr(exercise, "GPU_CHECK_N", 64)
    broken = L.check_exercise(L.broken_benchmark)  # (the simulated GPU is synchronous: no verdict asserted)
    assert broken.checks[-1][0].startswith("[GPU]") and isinstance(broken.checks[-1][1], bool)
    good = L.check_exercise(solution)
    name, ok, detail = good.checks[-1]
    assert name == "[GPU] agrees with timing.measure on a 64×64 matmul"
    assert ok or detail, str(good)  # ok, or a sentence why (a busy CPU may leave it undecided)
