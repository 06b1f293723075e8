"""The one command that regenerates recorded results on whatever device it runs on.

    python -m lessons_lib.record                 # every lesson, full sweeps, measured here
    python -m lessons_lib.record --quick         # a fast smoke run (small sweeps, short timings)
    python -m lessons_lib.record --model T4,H100 # roofline floors for named GPUs (figures: model)

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

from . import results, roofline
from .device import describe, pick

# Lesson key -> module. A lesson joins the recorded results by providing record(device, quick).
LESSONS = {
    "00_timing": "lessons_lib.lesson00_timing",
    "01_broadcast_matmul": "lessons_lib.lesson01_broadcast_matmul",
    "02_autograd_memory": "lessons_lib.lesson02_autograd_memory",
}


def targets(device: torch.device, recorded: dict) -> list[dict]:
    """The course's bars that a number on this device can speak to: each lesson module may
    define targets(device, its recorded section) -> [{"name", "value", "bar", "ok"}]."""
    out = []
    for key, section in recorded.items():
        module = importlib.import_module(LESSONS[key]) if key in LESSONS else None
        if module is not None and hasattr(module, "targets"):
            out += module.targets(device, section)
    return out


def model(gpu: str) -> tuple[dict, dict]:
    """(meta, lessons) of a model file: each lesson's headline work at its GPU-default shape
    (traced on meta), against the datasheet peaks of `gpu`. A lower bound, not a measurement."""
    lessons = {}
    for key, name in LESSONS.items():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        lesson = getattr(module, "LESSON", None)
        if lesson is None:
            continue
        params = {p.name: p.gpu for p in lesson.params}
        peaks = roofline.datasheet(gpu, torch.float32)
        if peaks is None:
            raise SystemExit(f"no datasheet figures for {gpu!r}; known: {', '.join(roofline.DATASHEET)}")
        work = lesson.work(params, torch.float32)
        lessons[lesson.key] = {"headline": {
            "params": params, "dtype": "float32",
            "peaks": {"flops": peaks.flops, "bandwidth": peaks.bandwidth, "launch": peaks.launch,
                      "source": peaks.source},
            "variants": {n: {"floor": peaks.floor(w), "regime": peaks.regime(w), "flops": w.flops,
                             "bytes": w.bytes, "launches": w.launches} for n, w in work.items()},
        }}
    meta = {"name": f"NVIDIA {gpu}", "kind": "cuda", "figures": "model",
            "source": f"{gpu} datasheet peaks (fp32, no TF32) and the op trace on meta",
            "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
            "recorded_by": f"python -m lessons_lib.record --model {gpu}"}
    return meta, lessons


def write_model(gpu: str, directory) -> "results.Path":
    meta, lessons = model(gpu)
    results.Path(directory).mkdir(parents=True, exist_ok=True)
    path = results.Path(directory) / f"model-{gpu.lower().replace(' ', '-')}.json"
    path.write_text(json.dumps({"meta": meta, "lessons": lessons}, indent=1, sort_keys=True) + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    ap.add_argument("--quick", action="store_true", help="small sweeps and short timings")
    ap.add_argument("--lessons", default=",".join(LESSONS), help="comma-separated lesson keys")
    ap.add_argument("--out", default=str(results.REFERENCE_DIR), help="directory for the JSON file")
    ap.add_argument("--model", default=None, help="comma-separated GPU names (e.g. T4,H100): write roofline "
                    "model files from datasheet peaks instead of measuring")
    args = ap.parse_args(argv)
    if args.model:
        for gpu in args.model.split(","):
            print(f"Wrote {write_model(gpu.strip(), args.out).name} (model figures, not measurements)")
        return 0

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
