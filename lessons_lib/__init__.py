"""lessons_lib: the code behind the notebooks of *PyTorch GPU performance pitfalls*. A map of the house.

The front door: the tools a reader takes into their own code, importable from here
(`from lessons_lib import GroupedLinear, graph_check, find_syncs, trace_ops, ledger, measure, diagnose`).
Each returns a report object whose str/repr is readable; README.md's "Use it in your own code"
has a five-line example of each, run by tests/test_front_door.py.
    GroupedLinear  grouped_linear  a drop-in grouped linear layer; strategy="auto" times and picks
    graph_check    graphs          what CUDA-graph capture would refuse or freeze, seen on any device
    find_syncs     syncs.syncs     host syncs and device copies, each with your line of code
                                   (syncs.host_syncs, the older answer, lists the syncs only)
    trace_ops      trace           every aten op a call dispatches, with shapes, bytes and FLOPs
    ledger         memory          what autograd saves for backward, and whose memory it is
    measure        timing          the one timing harness: warm-up, synchronize, median and IQR
    compare        noise           paired rounds, and "not decided on this run" when the noise wins
    diagnose       diagnose/       all of the above, joined: every pitfall of the course in your own step,
                                   each with your line, its evidence, its cost on a named GPU and the fix

One package a lesson, lessonNN_<name>/ (a notebook does `from lessons_lib import lessonNN_<name> as L`):
    variants.py   the forum's code and its fixes (what the notebook renders with show_source)
    evidence.py   traces, tables, models and figures built from the toolkit (split further by name)
    exercise.py   the starter, the float64 reference and the checker
    explore.py    the explorer's Lesson declarations, and what `python -m lessons_lib.record` records
    __init__.py   what the lesson is, which file holds what, and the names the notebooks use

The toolkit: flat modules, no lesson code inside. Data flows lesson -> toolkit -> torch, and the
import graph has no cycle (tests/test_imports.py). By role:
    the machine        device (which device, describe, fits, OOM, dtype, threads), hardware
                       (synchronize, the last-level cache), host (memory, cores, load: standard library
                       only), compiling (torch.compile in one place)
    measuring          timing (the harness), noise (the noise rule), claim_table (the table beside a
                       sentence prints its number), roofline (FLOPs, bytes,
                       launches, the floor), launch_queue (the host feeding a GPU stream), transfers
    looking inside     trace (ops), op_costs (what one op asks of memory and compute) and kernels
                       (GPU kernels); code_lines (the reader's line behind an op); memory (the
                       saved-tensor ledger, the autograd graph) and memory_timeline (memory op by op,
                       peaks); syncs and sync_table (host syncs, copies); graphs (capture, replay)
                       and graph_hazards (graph_check)
    joined             diagnose/ (every pitfall of the course in one run of the reader's step)
    a lesson's frame   lesson (the Lesson), lesson_parts (Param, Variant, input checks), runs (Run,
                       Sweep, the harness's time model), calibration (the explorer's run-time estimate),
                       grading (exercise verdicts), results (recorded JSON)
    showing            plots and plot_axes, display (tables, counts in words), widgets (the Explorer),
                       explorer_ui (its layout and worker), explorer_replay (its "results from" menu),
                       explorer_verdict (its winner, one measurement), explorer_status and phases (its
                       status line), posted_figures (a forum thread's own figures)
    the drop-in        grouped_linear (GroupedLinear, lesson 03's layer)
Tools for rooms: doctor and doctor_probes (`python -m lessons_lib.doctor`: is this machine ready?),
workspace (`python -m lessons_lib.workspace`: a working copy of the notebooks), colab (badge, set-up
cell), record (`python -m lessons_lib.record`: the recorded results in reference/).

`setup()` is every notebook's first call. `import lessons_lib` stays cheap and imports no torch: the
front door's names (and `setup`) import their modules on first use, after a check that torch is
there, loads and is new enough (else an ImportError whose sentence is the doctor's finding and fix).
doctor, doctor_probes, workspace and host (memory, cores, load) need the standard library alone.
"""
from __future__ import annotations

import sys as _sys

__version__ = "0.1.0"


def _cwd_last() -> None:
    """`python -m lessons_lib.diagnose mystep.py:step` from a folder that holds the reader's io.py, types.py or
    inspect.py: Python put that folder first on sys.path, so their file would shadow the standard library's module
    for every import from here on (torch imports inspect). The folder goes last: their own modules still import."""
    import os

    argv = getattr(_sys, "orig_argv", [])
    i = argv.index("-m") + 1 if "-m" in argv else 0
    if 0 < i < len(argv) and argv[i].startswith("lessons_lib") and _sys.path and \
            os.path.realpath(_sys.path[0] or ".") == os.path.realpath(os.getcwd()):
        _sys.path.append(_sys.path.pop(0))


_cwd_last()


# The tools for a room whose torch is missing or broken: they import only the standard library, so
# `python -m lessons_lib.doctor` runs there (tests/test_imports.py holds the rule). Nothing in this file
# imports torch at import time either: the check below runs on first use of anything that needs it.
_TORCH_FREE = frozenset({"doctor", "doctor_probes", "host", "workspace"})


def _check_torch() -> None:
    """Fail, with what to do, where torch cannot serve the course: not installed, failing to load (an
    OSError from a CUDA library), or too old (2.9 is the oldest CI tests). The sentence is the doctor's
    finding (one source of truth), raised as ImportError, which every set-up cell catches.

    Feature detection, not version strings: these are the APIs the toolkit stands on. Not cached: after
    the first time it costs a few dictionary lookups, and each name asks only once (then it is a global).
    """
    try:
        import torch
        from torch.autograd.graph import saved_tensors_hooks  # noqa: F401
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401

        err, ok = None, hasattr(torch, "OutOfMemoryError") or hasattr(torch.cuda, "OutOfMemoryError")
    except Exception as caught:  # ImportError, or OSError from a CUDA library that fails to load
        err, ok = caught, False
    if not ok:
        from .doctor import torch_problem

        raise ImportError(torch_problem(err)) from err


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


# `setup` is served by __getattr__ below, after the torch check: `from lessons_lib import setup` raises the
# check's ImportError (the set-up cell's `except ImportError` prints it) instead of a traceback inside setup().
_setup = globals().pop("setup")

# The front door: public name -> (module, attribute), imported on first use (module __getattr__), so
# `import lessons_lib` stays cheap. No name here is a submodule's name: `from lessons_lib import syncs`
# is still the module, and the sync detector's front-door name is `find_syncs`. The one exception is
# `diagnose`, a package that is callable (an empty attribute: the module itself), so that
# `lessons_lib.diagnose(step, x)` and `python -m lessons_lib.diagnose` name the same thing.
_FRONT_DOOR = {
    "GroupedLinear": ("grouped_linear", "GroupedLinear"),
    "graph_check": ("graphs", "graph_check"),
    "find_syncs": ("syncs", "syncs"),
    "trace_ops": ("trace", "trace_ops"),
    "ledger": ("memory", "ledger"),
    "measure": ("timing", "measure"),
    "compare": ("noise", "compare"),
    "diagnose": ("diagnose", ""),  # the package itself, which is callable: diagnose(step, *inputs)
}

__all__ = ["setup", *_FRONT_DOOR]


def _is_submodule(name: str) -> bool:
    import os

    here = os.path.dirname(__file__)
    return os.path.exists(os.path.join(here, f"{name}.py")) or os.path.isdir(os.path.join(here, name))


def __getattr__(name: str):
    if name == "setup":
        _check_torch()
        globals()["setup"] = _setup
        return _setup
    if name not in _FRONT_DOOR:
        # `from lessons_lib import timing` (or a lesson) asks here before importing the submodule: check
        # torch first, so that a missing or old torch gets the doctor's sentence, not a deep traceback.
        if name not in _TORCH_FREE and _is_submodule(name):
            _check_torch()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    _check_torch()
    module, attr = _FRONT_DOOR[name]
    imported = importlib.import_module(f".{module}", __name__)
    value = getattr(imported, attr) if attr else imported
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FRONT_DOOR) | {"setup"})
