"""How long each explorer's Run and Sweep take: measured on this machine, and a T4's lower bound.

    python workshop/explorer_times.py            # prints the markdown table the kit quotes

This machine: the wall time of `Explorer.run()` at the lesson's default shape and of
`Explorer.sweep()` over its first parameter's default values (what pressing Run or Sweep does),
measured now, under whatever else is running. T4: the explorer's own time formula fed with the
course's model floors for a T4 (lessons_lib/reference/model-t4.json): a lower bound, labelled
model. Rerun it on a GPU to measure a real one.
"""
from __future__ import annotations

import os
import sys
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from lessons_lib import device as device_mod, results, timing  # noqa: E402
from lessons_lib import lesson00_timing as L00  # noqa: E402
from lessons_lib import (lesson01_broadcast_matmul as L01, lesson02_autograd_memory as L02,  # noqa: E402
                         lesson03_grouped_linear as L03, lesson04_launch_overhead as L04,
                         lesson05_cuda_graphs as L05, lesson06_data_movement as L06)

EXPLORERS = {"01": L01.explorer, "02": L02.explorer, "03": L03.explorer, "04": L04.explorer,
             "05": L05.explorer, "06": L06.cat_explorer}
MODEL_KEYS = {"01": "01_broadcast_matmul", "02": "02_autograd_memory", "04": "04_launch_overhead"}


def _wall(fn) -> float:
    t0 = time.perf_counter()
    fn()
    plt.close("all")
    return time.perf_counter() - t0


def t4_lower_bound(key: str, min_run_time: float) -> str:
    """The explorer's estimate formula with the T4 model file's floors, at the file's shape."""
    lesson_key = MODEL_KEYS.get(key)
    path = os.path.join(os.path.dirname(results.__file__), "reference", "model-t4.json")
    if lesson_key is None or not os.path.exists(path):
        return "no T4 record"
    import json

    with open(path) as f:
        variants = json.load(f)["lessons"][lesson_key]["headline"]["variants"]
    seconds = sum((timing.WARMUP_CALLS + timing.MIN_SAMPLES) * v["floor"] + min_run_time for v in variants.values())
    return f"≥ {seconds:.1f} s (model)"


def main() -> int:
    dev = device_mod.pick()
    print(f"Measured on {device_mod.describe(dev).line()}; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    print()
    print("| lesson | explorer | Run, this machine | Sweep, this machine | Run, T4 |")
    print("|---|---|---|---|---|")
    lin = torch.nn.Linear(256, 256)
    x = torch.randn(4096, 256)
    with torch.no_grad():
        t = _wall(lambda: L00.compare(lin, x, max_time=5))
    print(f"| 00 | `L.compare(nn.Linear)` | {t:.1f} s | – | – |")
    for key, make in EXPLORERS.items():
        ex = make(dev)
        run_s = _wall(lambda: ex.run())
        first = ex.lesson.params[0].name
        try:
            sweep_s = f"{_wall(lambda: ex.sweep(first)):.1f} s ({first})"
        except ValueError as err:  # refused by the budget: that is what a reader sees
            sweep_s = f"refused: {str(err)[:60]}"
        print(f"| {key} | `{make.__name__}` | {run_s:.1f} s | {sweep_s} | {t4_lower_bound(key, ex.min_run_time)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
