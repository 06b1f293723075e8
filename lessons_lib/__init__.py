"""lessons_lib: the code behind the notebooks of *PyTorch GPU performance pitfalls*.

Toolkit modules (no lesson code inside): device, timing, trace, roofline, memory, results,
plots, widgets, lesson (what a lesson declares), grading (exercise verdicts).
One module a lesson: lesson00_timing, lesson01_broadcast_matmul, lesson02_autograd_memory.
"""
from __future__ import annotations

__version__ = "0.1.0"


def setup(seed: int = 0, quiet: bool = False):
    """A notebook's first call: pick the device, say what it is, make runs repeatable.

    On Colab it also enables the widget manager, so the explorers render.
    """
    import matplotlib
    import torch

    from . import device as _device

    if _device.is_colab():
        try:
            from google.colab import output

            output.enable_custom_widget_manager()
        except ImportError:
            pass
    torch.manual_seed(seed)
    matplotlib.rcParams.update({"figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3})
    dev = _device.pick()
    if not quiet:
        print(_device.describe(dev).line())
        if dev.type == "cpu":
            print("No CUDA GPU: timings below are CPU timings; GPU-only parts show recorded GPU results.")
    return dev
