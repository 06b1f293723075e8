"""lessons_lib: the code behind the notebooks of *PyTorch GPU performance pitfalls*.

Toolkit modules (no lesson code inside): device, timing, trace, roofline, memory, results,
plots, widgets, lesson (what a lesson declares), grading (exercise verdicts).
One module a lesson: lessonNN_*.py (lessons 00-06).
For readers and rooms: doctor (`python -m lessons_lib.doctor`, the readiness check), workspace
(`python -m lessons_lib.workspace`, a working copy of the notebooks), colab (badge, set-up cell).
"""
from __future__ import annotations

__version__ = "0.1.0"


def _check_torch() -> None:
    """Fail at import, with what to do, on a torch too old for the course (2.9 is the oldest CI tests).

    Feature detection, not version strings: these are the APIs the toolkit stands on.
    """
    try:
        import torch
        from torch.autograd.graph import saved_tensors_hooks  # noqa: F401
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401
    except ImportError as err:
        import sys

        found = sys.modules["torch"].__version__ if "torch" in sys.modules else "no torch at all"
        raise ImportError(
            f"This course needs PyTorch 2.9 or newer (found: {found}). "
            "Upgrade with `pip install -U torch` and restart the kernel."
        ) from err
    if not hasattr(torch, "OutOfMemoryError") and not hasattr(torch.cuda, "OutOfMemoryError"):
        raise ImportError(f"This course needs PyTorch 2.9 or newer (found {torch.__version__}). Run `pip install -U torch`.")


_check_torch()


def _quiet_import_noise() -> None:
    """Keep one irrelevant torch warning out of every notebook's stderr.

    `torch.utils.benchmark` (the timing harness) imports `torch.utils.cpp_extension`, which on
    a machine with a CUDA toolkit but no GPU logs "No CUDA runtime is found, using CUDA_HOME=…"
    at import. The course builds no C++ extension, so that module's warnings say nothing to a
    reader; its errors still show.
    """
    import logging

    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)


_quiet_import_noise()


def setup(seed: int = 0, quiet: bool = False):
    """A notebook's first call: pick the device, say what it is, make runs repeatable.

    On Colab it also enables the widget manager, so the explorers render. It prints the readiness
    check's one-line summary (`doctor.summary`: cheap checks only, no compile).
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
    # On a CPU, first the thread count that is fastest here now (so the device line shows it): a busy
    # machine stalls every parallel op on a descheduled thread. On a GPU the CPU threads only launch work.
    busy = _device.fit_cpu_threads() if dev.type == "cpu" else ""
    if not quiet:
        print(_device.describe(dev).line())
        if dev.type == "cpu":
            print("No CUDA GPU: timings below are CPU timings; GPU-only parts show recorded GPU results.")
        if busy:
            print(busy)
        from .doctor import summary

        print(summary(quick=True))
    return dev
