"""What each notebook cell asks of a GPU, read from the code's own CUDA path: the timed calls and their budgets.

    python .ci/gpu_runall_account.py [NOTEBOOK ...] [--gpu h100|t4] [--out .ci/gpu-runs/runall-account.json]

Runs each notebook top to bottom (nbclient, a fresh kernel each) under the SIMULATED GPU (tests/simgpu: the
library takes its CUDA branches, at the GPU's sizes) with the harness STUBBED: `timing.measure` records its
arguments (min_run_time, its time limit, min_samples, warm-up calls, cache flush) and returns at once (so do
lesson 00's wrong timers), so the noise rule's rounds, the sweeps and the checkers run their GPU path without
timing anything. Also recorded: the noise rule's comparisons (variants, looks, max_time), `noise.settle`, cold
compiles (`compiling.compile_cold`: under the simulation Triton is missing and the compile itself is skipped,
so the sites are counted, not timed), torch.profiler sessions and child processes. Each record is put in the
cell that was running (nbclient's execution timestamps). Then the same notebook runs on this CPU, harness
stubbed the same way: each cell's CPU seconds there (the kernel's own, all threads: a load-independent
measure) are its own Python, the `host` the model prices. The result
(one small JSON file) is what .ci/gpu_runall.py models a GPU's Run All from; rerun this after changing a
notebook or a GPU-path default. It needs the CPU build of torch and g++ (as the simulated GPU does); 2-3
minutes a notebook on a 2-core machine. It never writes a notebook.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".ci" / "gpu-runs" / "runall-account.json"

# The kernel's sitecustomize (@NAME@ are filled in): runs before the notebook's first cell.
STARTUP = r'''
import functools, inspect, json, subprocess, sys, time
sys.path.insert(0, @ROOT@)
if @GPU@:
    from tests.simgpu import _cpu_sized_gpu_work, profiles, runtime
    runtime.activate(profiles.PROFILES[@GPU@])
    _cpu_sized_gpu_work()
    import torch
    del torch.cuda._course_simulated  # checkers that skip their GPU timing under the simulation time it (stubbed)
_LOG = open(@LOG@, "a", buffering=1)
def _log(**rec):
    _LOG.write(json.dumps({"t": time.time(), **rec}, default=repr) + "\n")
from lessons_lib import compiling, noise, timing
_real_measure = timing.measure
def _measure(fn, *args, label=None, min_run_time=0.2, warmup=timing.WARMUP_CALLS, rotate=None, flush_cache=False,
             num_threads=None, min_samples=timing.MIN_SAMPLES, max_time=None, block=None, device=None):
    dev = timing.resolve_device(device, (rotate or [args])[0])
    name = str(label or getattr(fn, "__name__", "fn"))[:60]
    _log(fn="measure", dev=dev.type, label=name, min_run_time=min_run_time, max_time=max_time,
         min_samples=min_samples, warmup=max(warmup, len(rotate or [()])), flush=bool(flush_cache))
    return timing.Timing(name, 1e-4, 1e-6, [1e-4] * max(min_samples, 3), 1, "stub", dev.type)
timing.measure = functools.wraps(_real_measure)(_measure)  # wraps: show_source still shows the real one
def _wrong(kind):  # lesson 00's wrong timers on CUDA: a few GPU-sized calls each, recorded and not run
    real = getattr(timing, kind)
    default = inspect.signature(real).parameters["label"].default
    @functools.wraps(real)
    def stub(fn, *args, label=default, device=None, **k):
        dev = timing.resolve_device(device, args)
        if dev.type != "cuda":
            return real(fn, *args, label=label, device=device, **k)
        _log(fn="wrong", kind=kind, dev=dev.type, label=str(label or kind)[:60], calls=k.get("repeats", 1))
        return timing.Timing(str(label or kind), 1e-4, 0.0, [1e-4], 1, f"WRONG: {kind} (stub)", dev.type)
    return stub
for _kind in ("wrong_no_sync", "wrong_first_call", "wrong_single_run", "wrong_mean_with_cold_start"):
    setattr(timing, _kind, _wrong(_kind))
def _wrap(owner, name, what):
    real = getattr(owner, name)
    @functools.wraps(real)
    def logged(*a, **k):
        start = time.time()
        try:
            return real(*a, **k)
        finally:
            _log(fn=name, start=start, **what(a, k))
    setattr(owner, name, logged)
_wrap(noise, "_paired", lambda a, k: {"names": list(a[1]), "rounds": a[2], "max_rounds": a[3], "max_time": a[4]})
_wrap(noise, "settle", lambda a, k: {"max_time": k.get("max_time", 8.0), "max_rounds": k.get("max_rounds", 9)})
_wrap(compiling, "compile_cold", lambda a, k: {"backend": k.get("backend")})
_wrap(subprocess, "run", lambda a, k: {"cmd": str(a[0] if a else k.get("args"))[:100]})
import torch.profiler
_wrap(torch.profiler.profile, "__enter__", lambda a, k: {})
'''
# The kernel's IPython start-up file: each cell's CPU seconds (this process, all its threads; a child process and
# a sleep are not in them), which unlike its wall time does not grow with the machine's load.
CELL_CPU = r'''
import time
from sitecustomize import _log
_started = [0.0]
get_ipython().events.register("pre_run_cell", lambda *a: _started.__setitem__(0, time.process_time()))
get_ipython().events.register("post_run_cell",
                              lambda *a: _log(fn="cell_cpu", seconds=time.process_time() - _started[0]))
'''


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def cell_spans(nb) -> list[tuple[int, float, float, str]]:
    """(index, start, end, first code line) of each executed code cell, from nbclient's timestamps."""
    out = []
    for i, cell in enumerate(nb.cells):
        ex = cell.get("metadata", {}).get("execution", {})
        if cell.cell_type == "code" and "shell.execute_reply" in ex:
            lines = [ln.strip() for ln in cell.source.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            out.append((i, _stamp(ex["iopub.execute_input"]), _stamp(ex["shell.execute_reply"]), (lines or [""])[0]))
    return out


def account(nb_path: Path, gpu: str, work: Path, timeout: float) -> dict:
    """Run one notebook under the simulated GPU (gpu="": on this CPU) with the harness stubbed; its cells with what
    each recorded."""
    import nbformat
    from nbclient import NotebookClient

    from tests.simgpu.build import shim_path

    shim, log = str(shim_path()) if gpu else "", work / f"{nb_path.stem}-{gpu or 'cpu'}.jsonl"
    kdir, site = work / "kernels" / "course-simgpu", work / "site"
    kdir.mkdir(parents=True, exist_ok=True)
    site.mkdir(exist_ok=True)
    fill = {"@ROOT@": repr(str(ROOT)), "@GPU@": repr(gpu), "@LOG@": repr(str(log))}
    startup = STARTUP
    for key, value in fill.items():
        startup = startup.replace(key, value)
    # As sitecustomize: the kernel and every Python it starts (lesson 00's fresh-process demo) see the same GPU.
    (site / "sitecustomize.py").write_text(startup)
    ipython = work / "ipython"
    (ipython / "profile_default" / "startup").mkdir(parents=True, exist_ok=True)
    (ipython / "profile_default" / "startup" / "00-cell-cpu.py").write_text(CELL_CPU)
    (kdir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "course-simgpu", "language": "python",
        "env": {"PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "IPYTHONDIR": str(ipython),
                **({"LD_PRELOAD": shim, "COURSE_SIMGPU_SHIM": shim}
                                                               if gpu else {})}}))
    os.environ["JUPYTER_PATH"] = str(work)
    nb = nbformat.read(nb_path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="course-simgpu", allow_errors=True,
                            resources={"metadata": {"path": str(nb_path.parent)}})
    t0, stopped = time.perf_counter(), ""
    try:
        client.execute()
    except Exception as err:  # a cell past --timeout, a dead kernel: what ran until then is still accounted
        stopped = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
    seconds = time.perf_counter() - t0
    records = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
    errors = [f"cell {i}: {o.get('ename')}: {str(o.get('evalue'))[:160]}" for i, c in enumerate(nb.cells)
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    spans = cell_spans(nb)
    cells = [{"cell": i, "first_line": first[:100], "sim_seconds": round(end - start, 2), "cpu": None, "calls": []}
             for i, start, end, first in spans]
    timed = sorted(r["t"] for r in records if r["fn"] == "measure")
    for r in records:  # each record to the last cell started before it
        k = max((k for k, span in enumerate(spans) if span[1] <= r["t"]), default=None)
        if r["fn"] == "_paired" and not any(r["start"] <= t <= r["t"] for t in timed):
            continue  # a comparison of simulated draws (lesson 00's peeking experiment): nothing timed
        if k is not None and r["fn"] == "cell_cpu":
            cells[k]["cpu"] = round(r["seconds"], 2)
        elif k is not None:
            cells[k]["calls"].append({key: round(v, 6) if isinstance(v, float) else v for key, v in r.items()})
    return {"seconds": round(seconds, 1), "errors": errors + ([f"stopped: {stopped}"] if stopped else []),
            "cells": cells}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: every lesson and solution")
    ap.add_argument("--gpu", default="h100", help="the simulated GPU's profile (tests/simgpu/profiles.py)")
    ap.add_argument("--out", type=Path, default=OUT, help="the JSON file (notebooks already in it are kept)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a cell may take")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    paths = a.notebooks or sorted(ROOT.glob("notebooks/[0-9]*.ipynb")) + sorted(
        ROOT.glob("notebooks/solutions/[0-9]*.ipynb"))
    data = json.loads(a.out.read_text()) if a.out.exists() else {}
    data.setdefault("notebooks", {})
    import subprocess
    data["rev"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip()  # the committed CPU run .ci/gpu_runall.py reads too
    data["how"] = (f"python .ci/gpu_runall_account.py --gpu {a.gpu}: each notebook under the simulated GPU "
                   "(tests/simgpu), timing.measure stubbed: per cell, the timed calls its CUDA path makes; and on "
                   "this CPU, stubbed the same way: per cell, its seconds (cpu_seconds)")
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            path = path.resolve()
            rel = str(path.relative_to(ROOT))
            found = account(path, a.gpu, Path(tmp), a.timeout)
            # The same notebook on this CPU, harness stubbed: each cell's own Python (its `host` in the model).
            on_cpu = account(path, "", Path(tmp), a.timeout)
            found["cpu_seconds"] = {c["first_line"]: c["cpu"] for c in on_cpu["cells"] if c["cpu"] is not None}
            data["notebooks"][rel] = found
            print(f"{rel}: {found['seconds']} s under the simulated GPU, {on_cpu['seconds']} s on the CPU, "
                  f"{sum(len(c['calls']) for c in found['cells'])} records"
                  + (f"; ERRORS: {found['errors']}" if found["errors"] else ""), flush=True)
            a.out.write_text(json.dumps(data, sort_keys=True) + "\n")  # after each notebook: a stop keeps the rest
    return 0


if __name__ == "__main__":
    sys.exit(main())
