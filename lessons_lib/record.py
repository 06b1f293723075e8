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

Every argument is checked before the first measurement (a bad one: one line, exit status 2). Each
lesson is written as it finishes; --lesson-timeout S (60 s by default with --quick) stops a lesson that
runs longer and goes on to the next (exit status 1: not every lesson was recorded).

Lessons are found, not listed: every module `lessons_lib/lessonNN_*.py` that defines
`record(device, quick)` joins the recorded results, and may define `targets(device, section)`.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import pkgutil
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import torch

from . import results, roofline
from .device import describe, fit_cpu_threads, free_memory, pick
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


def _load() -> float | None:  # the 1-minute load average (None where the OS has none): how busy it was
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


class Refused(Exception):
    """An argument that cannot work: main() prints its one line and exits 2 (issue 28 §5)."""


def names(text: str) -> list[str]:
    """Comma-separated names, spaces around each dropped, empty ones ("T4," or "a,,b") ignored, in order."""
    out = []
    for name in (part.strip() for part in text.split(",")):
        if name and name not in out:
            out.append(name)
    return out


def check_device(text: str | None) -> torch.device:
    """The device to record on: 'cpu', 'cuda' or 'cuda:N' that exists here (None: cuda if present)."""
    if text is None:
        return pick()
    try:
        dev = torch.device(text.strip())
    except (RuntimeError, ValueError, TypeError):
        raise Refused(f"--device {text!r} is not a device: use cpu, cuda or cuda:N.") from None
    if dev.type == "meta":
        raise Refused("--device meta has no timings to record: use cpu or cuda (--model T4,H100 writes roofline "
                      "model files without a GPU).")
    if dev.type not in ("cpu", "cuda") or (dev.type == "cpu" and dev.index not in (None, 0)):
        raise Refused(f"--device {text!r}: record measures on cpu, cuda or cuda:N only.")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise Refused(f"--device {text!r}: this machine has no usable CUDA GPU (torch.cuda.is_available() "
                          "is False): use --device cpu.")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise Refused(f"--device {text!r}: this machine has {count} CUDA device{'s' if count != 1 else ''} "
                          f"(cuda:0 to cuda:{count - 1}).")
    return dev


def _known(option: str, text: str, known, ok) -> list[str]:
    """The names in `text`, each passing ok(name); else a refusal naming every other one and the choices."""
    given = names(text)
    bad = [n for n in given if not ok(n)]
    if bad or not given:
        what = f"{', '.join(map(repr, bad))} in {option}" if bad else f"{option} {text!r} names nothing"
        raise Refused(f"unknown {what}: choose from {', '.join(known)}.")
    return given


def check_lessons(text: str, modules: dict) -> list[str]:
    return _known("--lessons", text, modules, lambda k: k in modules)


def check_models(text: str) -> list[str]:  # a name needs datasheet figures (roofline.DATASHEET)
    return _known("--model", text, roofline.DATASHEET,
                  lambda g: roofline.datasheet(g, torch.float32, tf32=False) is not None)


def check_out(directory: str, file_name: str | None = None) -> Path:
    """A folder this process can write (made if missing); the file record will update there, if it
    exists, must be readable JSON: found now, not after every lesson has been measured."""
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".record-check-"):
            pass
    except OSError as err:
        raise Refused(f"--out {directory!r} is not a folder this process can write ({err.strerror or err}): "
                      "choose another --out.") from None
    path = out / file_name if file_name else None
    if path is not None and path.exists():
        try:
            json.loads(path.read_text())["lessons"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise Refused(f"{path} exists but is not a recorded-results file ({type(err).__name__}): move it "
                          "away or choose another --out.") from None
        if not os.access(path, os.W_OK):
            raise Refused(f"{path} exists and cannot be written: choose another --out.")
    return out


def check_cap(seconds: float | None, quick: bool) -> float | None:
    if seconds is None:
        return QUICK_LESSON_CAP if quick else None
    if not seconds >= 0:  # NaN too
        raise Refused(f"--lesson-timeout {seconds}: give seconds >= 0 (0: no cap).")
    return seconds or None


QUICK_LESSON_CAP = 60.0  # s; --quick took 11-16 s a lesson on an H200, and lesson 03 over 90 s (2026-11-26)


class LessonTimeout(BaseException):
    """Raised inside a lesson's record() when its cap runs out. A BaseException, like KeyboardInterrupt,
    so that a lesson's own `except Exception` cannot swallow it."""


@contextlib.contextmanager
def time_cap(seconds: float | None):
    """Raise LessonTimeout in this (main) thread after `seconds`; yields whether the cap is armed. SIGALRM
    stops Python code, not a C call in progress: a lesson stuck in one kernel stops when that call returns."""
    armed = bool(seconds) and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not armed:
        yield False
        return

    def _alarm(signum, frame):
        raise LessonTimeout()

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _settle(dev: torch.device) -> None:
    """After a lesson was stopped or failed: let queued GPU work finish and free what it held."""
    try:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        free_memory(dev)
    except Exception as err:  # a broken CUDA context: the next lesson says so itself
        print(f"  (after the stop: {type(err).__name__}: {err})", flush=True)


def _parser(modules: dict) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)")
    ap.add_argument("--quick", action="store_true", help="small sweeps and short timings")
    ap.add_argument("--lessons", default=",".join(modules), help="comma-separated lesson keys")
    ap.add_argument("--out", default=str(results.REFERENCE_DIR), help="directory for the JSON file")
    ap.add_argument("--model", default=None, help="comma-separated GPU names (e.g. T4,H100): write roofline "
                    "model files from datasheet peaks instead of measuring")
    ap.add_argument("--beside", default="", help="what else ran on the machine while recording (written "
                    "into the file), e.g. 'two busy-loop processes'")
    ap.add_argument("--lesson-timeout", type=float, default=None, metavar="S",
                    help=f"stop a lesson after S seconds and go on to the next (default: {QUICK_LESSON_CAP:g} "
                    "with --quick, none without; 0: none). A stopped lesson is not written; the exit status is 1")
    return ap


def _write_models(gpus: list[str], out: Path) -> int:
    for path in (write_model(gpu, out) for gpu in gpus):
        print(f"Wrote {path.name} (model figures: roofline floors, not measurements)")
    return 0


def _record_one(key, module, dev, info, args, cap) -> tuple[dict | None, dict, str]:
    """(section or None, conditions, outcome) of one lesson; a stop or a failure is printed, not raised."""
    t0, load0 = time.perf_counter(), _load()
    section, outcome = None, "done"
    try:
        with time_cap(cap):
            section = module.record(dev, quick=args.quick)
    except LessonTimeout:
        outcome = "stopped"
    except Exception:
        outcome = "failed"
        traceback.print_exc()
    seconds = time.perf_counter() - t0
    conditions = {"threads": info.threads, "load_average": [load0, _load()], "beside": args.beside,
                  "seconds": round(seconds, 1), "quick": args.quick}
    if outcome == "done":
        print(f"  {key}: done in {seconds:.1f} s", flush=True)
    else:
        why = f"its cap of {cap:g} s (--lesson-timeout) ran out" if outcome == "stopped" else "it raised (above)"
        print(f"  {key}: {outcome.upper()} after {seconds:.1f} s: {why}; not written", flush=True)
        _settle(dev)
    return section, conditions, outcome


def main(argv=None) -> int:
    modules = lesson_modules()
    args = _parser(modules).parse_args(argv)
    try:  # every argument is checked here, before the first measurement
        if args.model is not None:
            return _write_models(check_models(args.model), check_out(args.out))
        dev = check_device(args.device)
        keys = check_lessons(args.lessons, modules)
        cap = check_cap(args.lesson_timeout, args.quick)
        if dev.index is not None:  # cuda:N: "cuda" inside a lesson is then the device asked for
            torch.cuda.set_device(dev)
        info = describe(dev)
        out = check_out(args.out, f"{info.slug()}.json")
    except Refused as err:
        print(f"python -m lessons_lib.record: error: {err}", file=sys.stderr)
        return 2
    if dev.type == "cpu":  # as a notebook's setup() does: one thread when the machine is too busy for more
        busy = fit_cpu_threads()
        if busy:
            print(busy, flush=True)
    print(f"Recording on {info.line()}" + (f" · each lesson capped at {cap:g} s" if cap else ""), flush=True)
    recorded, path, unfinished = {}, None, []  # unfinished: "key (stopped)" or "key (failed)"
    for key in keys:
        section, conditions, outcome = _record_one(key, modules[key], dev, info, args, cap)
        if section is None:
            unfinished.append(f"{key} ({outcome})")
            continue
        recorded[key] = section
        # Written as it finishes (a stopped run keeps it); targets over every lesson the file holds.
        tgts = targets(dev, {**results.measured_lessons(info, out), **recorded}, modules)
        path = results.save(info, {key: section, "targets": tgts}, out, {key: conditions})
    if path is not None:
        for t in json.loads(path.read_text())["lessons"].get("targets", []):
            verdict = ("shown, not judged" if str(t["bar"]).startswith("info")
                       else f"n/a ({t['na']})" if t.get("na")  # a target may say why it cannot be judged
                       else {True: "met", False: "MISSED", None: "n/a on this device"}[t["ok"]])
            print(f"  target: {t['name']}: {t['value']:.3g} (bar {t['bar']}: {verdict})")
        print(f"Wrote {path.name} ({path.stat().st_size // 1024} KiB)")
    if unfinished:
        print(f"Not recorded: {', '.join(unfinished)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
