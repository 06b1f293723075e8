"""How long each explorer's Run and Sweep take: measured on this machine, and a T4's model lower bound.

    python workshop/explorer_times.py              # Run and Sweep of every explorer (10 minutes or more on a busy CPU)
    python workshop/explorer_times.py --runs-only  # Run only (a few minutes): enough to plan a room

This machine (measured): the wall time of `Explorer.run()` at the lesson's default shape and of
`Explorer.sweep()` over its first parameter's default values, which is what pressing Run or Sweep
does (the explorer's own time estimate, calibrated on this machine, included), measured now, under
whatever else is running. The header names the hardware, torch, the git commit and the load average
before and after: quote them with the table.

T4 (model lower bound, not a measurement): the harness's own schedule (`lesson.harness_seconds`:
warm-up, block-size search, samples) run on each variant's roofline floor from the course's T4 model
file (`lessons_lib/reference/model-t4.json`, datasheet peaks, 5 µs per op assumed), at the file's
shape (the thread's shape, the explorer's default on a GPU) and over its sweep points (the explorer's
default sweep points there). It leaves out everything the floor does not see: the explorer's
calibration, making inputs, metrics, and the GPU-only variants the model file does not list
(lesson 03's tuned `GroupedLinear(auto)`, lesson 04's compiled variant, lesson 05's
`reduce-overhead`), so a real T4 takes longer. Rerun this script on a T4 to measure one.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from lessons_lib import device as device_mod  # noqa: E402
from lessons_lib import lesson00_timing as L00  # noqa: E402
from lessons_lib import (lesson01_broadcast_matmul as L01, lesson02_autograd_memory as L02,  # noqa: E402
                         lesson03_grouped_linear as L03, lesson04_launch_overhead as L04,
                         lesson05_cuda_graphs as L05, lesson06_data_movement as L06)
from lessons_lib import widgets  # noqa: E402
from lessons_lib.lesson import harness_seconds  # noqa: E402

EXPLORERS = {"01": L01.explorer, "02": L02.explorer, "03": L03.explorer, "04": L04.explorer,
             "05": L05.explorer, "06": L06.cat_explorer}
MODEL_FILE = os.path.join(os.path.dirname(device_mod.__file__), "reference", "model-t4.json")


def _wall(fn) -> float:
    t0 = time.perf_counter()
    fn()
    plt.close("all")
    return time.perf_counter() - t0


def _fmt(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1e3:.0f} ms"


def t4_lower_bounds(lesson_key: str, first: str, min_run_time: float) -> tuple[str, str]:
    """(Run, Sweep) lower bounds on a T4 from the model file's floors, labelled model."""
    if not os.path.exists(MODEL_FILE):
        return "no T4 model file", "no T4 model file"
    with open(MODEL_FILE) as f:
        section = json.load(f)["lessons"].get(lesson_key)
    if section is None:
        return "no T4 model", "no T4 model"

    def bound(floors) -> float:
        return sum(harness_seconds(fl, min_run_time, widgets.MAX_TIME_PER_VARIANT) for fl in floors)

    run = bound(v["floor"] for v in section["headline"]["variants"].values())
    sweep = section.get("sweeps", {}).get(first)
    run_s = f"≥ {_fmt(run)} (model lower bound)"
    if sweep is None:
        return run_s, "no T4 model sweep"
    total = sum(bound(v["floor"][i] for v in sweep["variants"].values()) for i in range(len(sweep["values"])))
    return run_s, f"≥ {_fmt(total)} (model lower bound)"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-only", action="store_true", help="time Run only, not Sweep")
    args = ap.parse_args(argv)
    dev = device_mod.pick()
    print(f"Measured on {device_mod.describe(dev).line()}; commit {_commit()}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}; load average {_load()} on {os.cpu_count()} cores at the start")
    print()
    print("| lesson | explorer | Run, this machine (measured) | Sweep, this machine (measured) "
          "| Run, T4 (model lower bound) | Sweep, T4 (model lower bound) |")
    print("|---|---|---|---|---|---|")
    lin = torch.nn.Linear(256, 256, device=dev)
    x = torch.randn(4096, 256, device=dev)
    with torch.no_grad():
        t = _wall(lambda: L00.compare(lin, x, max_time=5))
    print(f"| 00 | `L.compare(nn.Linear)` | {_fmt(t)} | – | – | – |", flush=True)
    for key, make in EXPLORERS.items():
        ex = make(dev)
        first = ex.lesson.params[0].name
        try:
            run_s = _fmt(_wall(lambda: ex.run()))
        except ValueError as err:  # refused by the budget: that is what a reader sees
            run_s = f"refused: {str(err)[:60]}"
        if args.runs_only:
            sweep_s = "not timed (--runs-only)"
        else:
            try:
                sweep_s = f"{_fmt(_wall(lambda: ex.sweep(first)))} ({first})"
            except ValueError as err:
                sweep_s = f"refused: {str(err)[:60]}"
        t4_run, t4_sweep = t4_lower_bounds(ex.lesson.key, first, ex.min_run_time)
        print(f"| {key} | `{make.__name__}` | {run_s} | {sweep_s} | {t4_run} | {t4_sweep} ({first}) |", flush=True)
    print()
    print(f"load average {_load()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
