"""The one command that regenerates recorded results.

    python -m lessons_lib.record                  # every lesson, measured on this device
    python -m lessons_lib.record --quick          # a fast smoke run (small sweeps, short timings)
    python -m lessons_lib.record --model T4,A100,H100  # roofline floors for named GPUs (figures: model)

Measured: writes lessons_lib/reference/<device>.json (or --out DIR): each lesson's headline
timings with their floors, its sweeps, and `targets`, the course's performance bars as
measured here, each with its value, its bar and whether it is met.

Model: writes lessons_lib/reference/model-<gpu>.json: each lesson's work at its GPU-default
shape and along a sweep of each parameter, traced on `meta` (nothing allocated), against the
GPU's datasheet peaks (float32 without TF32, PyTorch's default). Floors, not measurements.

Lessons are found, not listed: every module `lessons_lib/lessonNN_*.py` that defines
`record(device, quick)` joins the recorded results, and may define `targets(device, section)`.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import re
import sys
import time
from pathlib import Path

import torch

from . import results, roofline
from .device import describe, fit_cpu_threads, pick
from .lesson import Lesson

# Datasheet memory per GPU (GB), so a model sweep leaves out shapes that would not fit.
GPU_MEMORY_GB = {"T4": 16, "L4": 24, "V100": 16, "A10G": 24, "A100": 40, "H100": 80, "H200": 141}
SWEEP_FACTORS = (1 / 8, 1 / 4, 1 / 2, 1, 2, 4)  # around the GPU default, clipped to each parameter's range


def lesson_modules() -> dict[str, object]:
    """{lesson key: module} for every lesson module that can record itself, in course order."""
    import lessons_lib

    out = {}
    for info in sorted(pkgutil.iter_modules(lessons_lib.__path__), key=lambda i: i.name):
        if not re.fullmatch(r"lesson\d\d_\w+", info.name):
            continue
        # A lesson package records through its `explore` module (the explorer's declaration and the
        # record targets live there); a single-file lesson records through itself.
        name = f"lessons_lib.{info.name}" + (".explore" if info.ispkg else "")
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            print(f"  {info.name}: cannot be imported ({err}), skipped", flush=True)
            continue
        if not callable(getattr(module, "record", None)):
            continue
        key = getattr(module, "KEY", None) or getattr(getattr(module, "LESSON", None), "key", None)
        if key:
            out[key] = module
    return out


def lessons_of(module) -> list[Lesson]:
    """Every Lesson a module defines at top level (a forward lesson and its training twin, say)."""
    seen, out = set(), []
    for value in vars(module).values():
        if isinstance(value, Lesson) and value.key not in seen:
            seen.add(value.key)
            out.append(value)
    return out


def targets(device: torch.device, recorded: dict, modules: dict | None = None) -> list[dict]:
    """The course's bars that a number on this device can speak to: each lesson module may
    define targets(device, its recorded section) -> [{"name", "value", "bar", "ok"}]."""
    modules = lesson_modules() if modules is None else modules
    out = []
    for key, section in recorded.items():
        module = modules.get(key)
        if module is not None and callable(getattr(module, "targets", None)):
            out += module.targets(device, section)
    return out


# --- model files ---------------------------------------------------------------------------


def _fits(lesson: Lesson, params: dict, gpu: str) -> bool:
    gb = next((v for k, v in sorted(GPU_MEMORY_GB.items(), key=lambda kv: -len(kv[0])) if k.lower() in gpu.lower()),
              None)
    return gb is None or lesson.peak_bytes(params, torch.float32) <= 0.9 * gb * 1e9


def _sweep_values(lesson: Lesson, name: str, default: int) -> list[int]:
    p = lesson.param(name)
    return sorted({min(max(int(default * f), p.lo), p.hi) for f in SWEEP_FACTORS})


def _model_metrics(lesson: Lesson, params: dict) -> dict:
    """The lesson's metrics (memory, say) predicted on meta, where its metric function can run there."""
    if lesson.metrics is None:
        return {}
    from .trace import on_meta

    out = {}
    for v in lesson.variants:
        try:
            inputs = on_meta(*lesson.make_inputs(params, torch.device("meta"), torch.float32))
            out[v.name] = dict(lesson.metrics(v.fn, *inputs))
        except Exception:  # a metric that needs real numbers: leave it out of the model
            return {}
    return out


def _model_work(lesson: Lesson, params: dict) -> dict:
    """The traced work of each variant, plus the GPU-only variants the lesson models (`Lesson.model_work`)."""
    work = lesson.work(params, torch.float32)
    if lesson.model_work is not None:
        work.update(lesson.model_work(params, torch.float32))
    return work


def model_section(lesson: Lesson, peaks: roofline.Peaks, gpu: str) -> dict:
    """A lesson's model figures: the headline at its GPU-default shape and a sweep per parameter."""
    params = {p.name: p.gpu for p in lesson.params}
    work = _model_work(lesson, params)
    head = {"params": params, "dtype": "float32", "peaks": results.peaks_to_dict(peaks),
            "variants": {n: {"floor": peaks.floor(w), "regime": peaks.regime(w), **peaks.terms(w),
                             "flops": w.flops, "bytes": w.bytes, "launches": w.launches} for n, w in work.items()}}
    metrics = _model_metrics(lesson, params)
    if metrics:
        head["metrics"] = metrics
    sweeps = {}
    for p in lesson.params:
        values = [v for v in _sweep_values(lesson, p.name, p.gpu) if _fits(lesson, {**params, p.name: v}, gpu)]
        if len(values) < 2:
            continue
        floors: dict[str, list[float]] = {}
        for v in values:
            for n, w in _model_work(lesson, {**params, p.name: v}).items():
                floors.setdefault(n, []).append(peaks.floor(w))
        sweeps[p.name] = {"param": p.name, "values": values, "base": {k: x for k, x in params.items() if k != p.name},
                          "dtype": "float32", "variants": {n: {"floor": f} for n, f in floors.items()}}
    return {"headline": head, "sweeps": sweeps}


def model(gpu: str, modules: dict | None = None) -> tuple[dict, dict]:
    """(meta, lessons) of a model file for `gpu` (a datasheet name such as T4 or H100)."""
    peaks = roofline.datasheet(gpu, torch.float32, tf32=False)
    if peaks is None:
        raise ValueError(f"No datasheet figures for {gpu!r}: use one of {', '.join(roofline.DATASHEET)}.")
    lessons = {}
    for module in (lesson_modules() if modules is None else modules).values():
        for lesson in lessons_of(module):
            lessons[lesson.key] = model_section(lesson, peaks, gpu)
    meta = {"name": f"NVIDIA {gpu}", "kind": "cuda", "kind_of_figures": "model",
            "source": f"{peaks.source}; work from the op trace on meta (float32, TF32 off, PyTorch's default)",
            "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
            "recorded_by": f"python -m lessons_lib.record --model {gpu}"}
    return meta, lessons


def write_model(gpu: str, directory=results.REFERENCE_DIR) -> Path:
    meta, lessons = model(gpu)
    return results.save_file(f"model-{gpu.lower().replace(' ', '-')}", meta, lessons, directory)


def _load() -> float | None:
    """The 1-minute load average (None where the OS has none): how busy the machine was."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def main(argv=None) -> int:
    modules = lesson_modules()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    ap.add_argument("--quick", action="store_true", help="small sweeps and short timings")
    ap.add_argument("--lessons", default=",".join(modules), help="comma-separated lesson keys")
    ap.add_argument("--out", default=str(results.REFERENCE_DIR), help="directory for the JSON file")
    ap.add_argument("--model", default=None, help="comma-separated GPU names (e.g. T4,H100): write roofline "
                    "model files from datasheet peaks instead of measuring")
    ap.add_argument("--beside", default="", help="what else ran on the machine while recording (written "
                    "into the file), e.g. 'two busy-loop processes'")
    args = ap.parse_args(argv)
    if args.model:
        for gpu in args.model.split(","):
            try:
                path = write_model(gpu.strip(), args.out)
            except ValueError as err:
                ap.error(str(err))
            print(f"Wrote {path.name} (model figures: roofline floors, not measurements)")
        return 0

    dev = pick(args.device)
    if dev.type == "cpu":  # as a notebook's setup() does: one thread when the machine is too busy for more
        busy = fit_cpu_threads()
        if busy:
            print(busy, flush=True)
    info = describe(dev)
    print(f"Recording on {info.line()}", flush=True)
    recorded, conditions = {}, {}
    for key in args.lessons.split(","):
        if key not in modules:
            ap.error(f"unknown lesson {key!r}; choose from {', '.join(modules)}")
        t0, load0 = time.perf_counter(), _load()
        recorded[key] = modules[key].record(dev, quick=args.quick)
        conditions[key] = {"threads": info.threads, "load_average": [load0, _load()], "beside": args.beside,
                           "seconds": round(time.perf_counter() - t0, 1), "quick": args.quick}
        print(f"  {key}: done in {time.perf_counter() - t0:.1f} s", flush=True)
    # Targets over every lesson the file will hold: those recorded now and those kept from before.
    kept = results.measured_lessons(info, args.out)
    recorded["targets"] = targets(dev, {**kept, **recorded}, modules)
    path = results.save(info, recorded, args.out, conditions)
    for t in recorded["targets"]:
        verdict = ("shown, not judged" if str(t["bar"]).startswith("info")
                   else {True: "met", False: "MISSED", None: "n/a on this device"}[t["ok"]])
        print(f"  target: {t['name']}: {t['value']:.3g} (bar {t['bar']}: {verdict})")
    print(f"Wrote {path.name} ({len(json.dumps(recorded)) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
