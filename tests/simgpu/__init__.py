"""A SIMULATED GPU for the test suite, so that the library's CUDA branches run without a GPU.

    python -m pytest -p tests.simgpu --simulate-gpu=t4 tests -m "not browser" -o addopts="-ra --strict-markers"

With it, `torch.cuda.is_available()` is True and the library's device-dependent code takes its
CUDA path: event timing, allocator counters, the OOM guard, dtype checks per compute
capability, explorers and `record` on "cuda". It needs a CPU-only build of torch and g++.

How: tensors on `cuda` are `tensors.SimulatedCudaTensor`s (values on the CPU, device cuda:0, an
allocator model with the card's capacity); `runtime` answers torch.cuda's functions from a
profile (profiles.py: T4, H100); a small C++ shim (shim.cpp, built here with g++ and preloaded)
gives torch a CUDA device guard so that autograd accepts those tensors. The plugin re-executes
pytest once with the shim preloaded.

What it is not: a GPU. Times are the CPU's, memory is a model, and no number produced under it
is ever reported by the course. `gpu` claim tests are skipped under it. Tests that need to know
check `getattr(torch.cuda, "_course_simulated", None)` (the profile key, e.g. "t4").
"""
from __future__ import annotations

import os
import sys

import pytest

from .profiles import PROFILES

_ENV = "COURSE_SIMGPU_SHIM"


def _requested() -> str | None:
    argv = sys.argv
    for i, arg in enumerate(argv):
        if arg.startswith("--simulate-gpu="):
            return arg.split("=", 1)[1]
        if arg == "--simulate-gpu" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _preload_and_reexec() -> None:
    """The shim must be in the process before torch looks up its CUDA hooks: re-run pytest with it."""
    from .build import CannotSimulate, shim_path

    try:
        shim = str(shim_path())
    except CannotSimulate as err:
        raise pytest.UsageError(f"--simulate-gpu: {err}") from None
    env = dict(os.environ)
    env[_ENV] = shim
    env["LD_PRELOAD"] = " ".join(p for p in (shim, env.get("LD_PRELOAD", "")) if p)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


_KEY = _requested()
if _KEY is not None and _KEY in PROFILES and not os.environ.get(_ENV):
    _preload_and_reexec()


def pytest_addoption(parser):
    parser.addoption("--simulate-gpu", choices=sorted(PROFILES), default=None,
                     help="run the tests with a SIMULATED GPU of this profile present (tests/simgpu)")


def pytest_configure(config):
    key = config.getoption("--simulate-gpu")
    if key is None:
        return
    shim = os.environ.get(_ENV, "")
    with open("/proc/self/maps") as maps:
        if not shim or shim not in maps.read():
            raise pytest.UsageError("--simulate-gpu: the shim is not preloaded; run pytest as "
                                    "`python -m pytest -p tests.simgpu --simulate-gpu=...` so that it can re-execute")
    from . import runtime

    runtime.activate(PROFILES[key])
    _cpu_sized_gpu_work()


def _cpu_sized_gpu_work():
    """The simulated GPU computes on the CPU: shrink the library's GPU-sized measurement shapes so a
    simulated run takes CPU time (the branches taken are the same; no number here is reported)."""
    from lessons_lib import roofline
    from lessons_lib.lesson00_timing import exercise as lesson00_exercise

    roofline.PEAK_MATMUL_N["cuda"] = roofline.PEAK_MATMUL_N["cpu"]
    lesson00_exercise.GPU_CHECK_N = 512


def pytest_report_header(config):
    key = config.getoption("--simulate-gpu")
    if key:
        return [f"SIMULATED GPU: {PROFILES[key].shown_name} (tests/simgpu: a model, not a measurement)"]
    return []


def pytest_collection_modifyitems(config, items):
    if config.getoption("--simulate-gpu") is None:
        return
    skip = pytest.mark.skip(reason="claim test: needs a real GPU, not the simulated one")
    # A fresh process has no simulated GPU: there such a test is the CPU run the other legs already make
    elsewhere = pytest.mark.skip(reason="runs in a fresh process, without the simulated GPU: the CPU legs run it")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
        elif item.get_closest_marker("own_process"):
            item.add_marker(elsewhere)
