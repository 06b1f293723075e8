"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): this machine beside the GPU models at
one shape, and the asymptote (gpu_models.py)."""
import matplotlib.pyplot as plt
import pytest
import torch

from lessons_lib import roofline, timing
from lessons_lib.lesson04_launch_overhead import gpu_models, lessons


def test_machines_at_one_shape_labels_kind_and_shape():
    from lessons_lib.lesson import Run

    p = {"width": 160, "batch": 256, "layers": 4}
    work = lessons.LESSON.work(p)
    run = Run(lessons.LESSON.key, p, "float32", "cpu",
              {n: timing.Timing(n, 1e-4, 0.0, [1e-4], 1, "", "cpu") for n in work}, work)
    rows = gpu_models.machines_at(run)
    assert any("measured median" in label for label in rows)
    floors = [label for label in rows if "model floor" in label]
    assert {label.split(" ·")[0] for label in floors} == {"T4", "A100", "H100"}
    assert {label for label in floors if "TF32" in label} == {"A100 · model floor, Linear in TF32",
                                                              "H100 · model floor, Linear in TF32"}
    h100 = roofline.datasheet("H100", torch.float32, tf32=False)
    assert rows["H100 · model floor"]["Linear"] == pytest.approx(h100.floor(work["Linear"]))
    fig = gpu_models.machines_figure(run)
    title = fig.axes[0].get_title()
    assert "width 160, batch 256, layers 4" in title and "not a median" in title  # one shape, named
    plt.close(fig)


def test_asymptote_table_is_linear_in_width():
    text = gpu_models.asymptote_table(gpus=("A100",), widths=[8192, 32768])
    lines = text.splitlines()[2:]
    assert [ln.split()[1] for ln in lines] == ["fp32", "TF32"]
    assert "326.6× (326.6×)" in lines[0] and "40.8× (40.8×)" in lines[1]
