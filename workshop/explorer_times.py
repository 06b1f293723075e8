"""How long each explorer's Run and Sweep take: measured on this machine, and a T4's model lower bound.

    python workshop/explorer_times.py              # Run and Sweep of every explorer (3 minutes at load 2 on 2 cores; more when busy)
    python workshop/explorer_times.py --runs-only  # Run only (about a minute): enough to plan a room
    python workshop/explorer_times.py --lessons 03,07 --runs-only   # some explorers only
    python workshop/explorer_times.py --lessons 03 --runs-only --first-dtypes float16,bfloat16

This machine (measured): the wall time of `Explorer.run()` at the lesson's default shape and of
`Explorer.sweep()` over its first parameter's default values, which is what pressing Run or Sweep
does (the explorer's own time estimate, calibrated on this machine, included), measured now, under
whatever else is running, on the CPU threads the notebooks' `setup()` would pick now. Each Run's row also gives the explorer's own phase times (`Phases.summary`:
this machine's peaks for a new dtype, estimating, measuring, deciding the winner, drawing) beside what
it estimated. `--first-dtypes` adds, for lesson 03's forward explorer, a Run in each named dtype after the
float32 one: the first Run in a dtype this process has not used measures that dtype's peaks first (its
"this machine's peaks" phase), which is what a reader's first float16 or bfloat16 Run pays. The header
names the hardware, torch, the git commit and the load average before and after: quote them with the table.

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
                         lesson05_cuda_graphs as L05, lesson06_data_movement as L06, lesson07_capstone as L07)
from lessons_lib import widgets  # noqa: E402
from lessons_lib.lesson import harness_seconds  # noqa: E402

# (row label, lesson number, how the notebook makes the explorer): every widget explorer of lessons 01-07 that
# runs on a CPU (06's transfer explorer measures host-device copies: it refuses without a GPU)
EXPLORERS = [
    ("01", "explorer", lambda dev: L01.explorer(dev)),
    ("02", "explorer", lambda dev: L02.explorer(dev)),
    ("03", "explorer", lambda dev: L03.explorer(dev)),
    ("03", "explorer(training=True)", lambda dev: L03.explorer(dev, training=True)),
    ("04", "explorer", lambda dev: L04.explorer(dev)),
    ("05", "explorer", lambda dev: L05.explorer(dev)),
    ("06", "cat_explorer", lambda dev: L06.cat_explorer(dev)),
    ("07", "explorer", lambda dev: L07.explorer(dev)),
]
DTYPES = ("float16", "bfloat16")
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


def timed_run(ex, dtype: str = "float32") -> str:
    """'18.1 s' and the explorer's phases ('this machine's peaks 3.1 s, estimating ...'), or the refusal."""
    try:
        seconds = _wall(lambda: ex.run(dtype=dtype))
    except ValueError as err:  # refused by the budget: that is what a reader sees
        return f"refused: {str(err)[:60]}"
    return f"{_fmt(seconds)} ({ex.phases.summary()})"


def _lessons(arg: str | None) -> set[str]:
    known = {key for key, _, _ in EXPLORERS} | {"00"}
    if arg is None:
        return known
    asked = {a.strip() for a in arg.split(",") if a.strip()}
    if not asked or asked - known:
        raise SystemExit(f"--lessons {arg!r}: name lessons among {', '.join(sorted(known))}, separated by commas.")
    return asked


def _dtypes(arg: str | None) -> list[str]:
    asked = [a.strip() for a in (arg or "").split(",") if a.strip()]
    if set(asked) - set(DTYPES):
        raise SystemExit(f"--first-dtypes {arg!r}: name dtypes among {', '.join(DTYPES)}, separated by commas.")
    return asked


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-only", action="store_true", help="time Run only, not Sweep")
    ap.add_argument("--lessons", help="comma-separated lesson numbers (default: every explorer), e.g. 03,07")
    ap.add_argument("--first-dtypes", help="also time lesson 03's first Run in these dtypes (float16,bfloat16)")
    args = ap.parse_args(argv)
    lessons, dtypes = _lessons(args.lessons), _dtypes(args.first_dtypes)
    dev = device_mod.pick()
    busy = device_mod.fit_cpu_threads() if dev.type == "cpu" else ""  # the thread count setup() would pick now
    print(f"Measured on {device_mod.describe(dev).line()}; commit {_commit()}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}; load average {_load()} on {os.cpu_count()} cores at the start")
    if busy:
        print(busy)
    print()
    print("| lesson | explorer | Run, this machine (measured; its phases) | Sweep, this machine (measured) "
          "| Run, T4 (model lower bound) | Sweep, T4 (model lower bound) |")
    print("|---|---|---|---|---|---|")
    if "00" in lessons:
        lin = torch.nn.Linear(256, 256, device=dev)
        x = torch.randn(4096, 256, device=dev)
        with torch.no_grad():
            t = _wall(lambda: L00.compare(lin, x, max_time=5))
        print(f"| 00 | `L.compare(nn.Linear)` | {_fmt(t)} | – | – | – |", flush=True)
    for key, name, make in EXPLORERS:
        if key not in lessons:
            continue
        ex = make(dev)
        first = ex.lesson.params[0].name
        run_s = timed_run(ex)
        if args.runs_only:
            sweep_s = "not timed (--runs-only)"
        else:
            try:
                sweep_s = f"{_fmt(_wall(lambda: ex.sweep(first)))} ({first})"
            except ValueError as err:
                sweep_s = f"refused: {str(err)[:60]}"
        t4_run, t4_sweep = t4_lower_bounds(ex.lesson.key, first, ex.min_run_time)
        print(f"| {key} | `{name}` | {run_s} | {sweep_s} | {t4_run} | {t4_sweep} ({first}) |", flush=True)
        if key == "03" and name == "explorer":
            for dt in dtypes:  # the first Run in a dtype measures its peaks first: what a reader's first one pays
                print(f"| 03 | `explorer`, first Run in {dt} | {timed_run(ex, dt)} | – | – | – |", flush=True)
    print()
    print(f"load average {_load()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
