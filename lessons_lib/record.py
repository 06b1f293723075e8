"""The one command that regenerates recorded results on whatever device it runs on.

    python -m lessons_lib.record            # every lesson, full sweeps
    python -m lessons_lib.record --quick    # a fast smoke run (small sweeps, short timings)

It writes lessons_lib/reference/<device>.json (or --out DIR): each lesson's headline
timings with their floors, its sweeps, and `targets`, the course's performance bars as
measured here, each with its value, its bar and whether it is met.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

import torch

from . import results
from .device import describe, pick

# Lesson key -> module. A lesson joins the recorded results by providing record(device, quick).
LESSONS = {
    "00_timing": "lessons_lib.lesson00_timing",
    "01_broadcast_matmul": "lessons_lib.lesson01_broadcast_matmul",
    "02_autograd_memory": "lessons_lib.lesson02_autograd_memory",
}


def targets(device: torch.device, recorded: dict) -> list[dict]:
    """The issue bars that a number on this device can speak to."""
    from .lesson01_broadcast_matmul import explorer

    out = []
    head = recorded.get("01_broadcast_matmul", {}).get("headline")
    if head:
        v = head["variants"]
        out.append({"name": "01 einsum speed-up over broadcast matmul at the seed shape",
                    "value": v["broadcast matmul"]["median"] / v["einsum"]["median"],
                    "bar": ">= 3 (GPU claim)", "ok": None if device.type != "cuda"
                    else v["broadcast matmul"]["median"] / v["einsum"]["median"] >= 3})
        if "floor" in v["einsum"]:
            ratio = v["einsum"]["median"] / v["einsum"]["floor"]
            out.append({"name": "01 einsum time / floor at the seed shape", "value": ratio,
                        "bar": "<= 1.5 (GPU)", "ok": ratio <= 1.5 if device.type == "cuda" else None})
    ex = explorer(device)
    ex.run()  # first run pays for peak measurement and warm-up
    t0 = time.perf_counter()
    ex.run()
    rerun = time.perf_counter() - t0
    out.append({"name": "01 explorer rerun at the default shape (s)", "value": rerun, "bar": "<= 2 (CPU)",
                "ok": rerun <= 2 if device.type == "cpu" else None})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    ap.add_argument("--quick", action="store_true", help="small sweeps and short timings")
    ap.add_argument("--lessons", default=",".join(LESSONS), help="comma-separated lesson keys")
    ap.add_argument("--out", default=str(results.REFERENCE_DIR), help="directory for the JSON file")
    args = ap.parse_args(argv)

    dev = pick(args.device)
    info = describe(dev)
    print(f"Recording on {info.line()}", flush=True)
    recorded = {}
    for key in args.lessons.split(","):
        if key not in LESSONS:
            ap.error(f"unknown lesson {key!r}; choose from {', '.join(LESSONS)}")
        try:
            module = importlib.import_module(LESSONS[key])
        except ModuleNotFoundError:
            print(f"  {key}: not written yet, skipped", flush=True)
            continue
        t0 = time.perf_counter()
        recorded[key] = module.record(dev, quick=args.quick)
        print(f"  {key}: done in {time.perf_counter() - t0:.1f} s", flush=True)
    recorded["targets"] = targets(dev, recorded)
    path = results.save(info, recorded, args.out)
    for t in recorded["targets"]:
        verdict = {True: "met", False: "MISSED", None: "n/a on this device"}[t["ok"]]
        print(f"  target: {t['name']}: {t['value']:.3g} (bar {t['bar']}: {verdict})")
    print(f"Wrote {path.name} ({len(json.dumps(recorded)) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
