"""The six stages of .ci/gpu-validate, each `stage(ctx, deadline) -> Outcome` (deadline: time.monotonic()).

Each writes its log into $OUT as it goes, so whatever stops the run leaves what was done; each item in
a stage (a test, a lesson, a probe, a notebook) has its own cap (gpu_validate.CAPS) so that one slow
item cannot spend the others' time.
"""
from __future__ import annotations

import re
import shutil
import sys
import tarfile
import time
from pathlib import Path

from gpu_validate import ROOT, Ctx, Outcome, run

PY = sys.executable
# -o addopts= drops the project's nbval options; the stream plugin prints each traceback as it happens
# and writes the start and end of every test to GPU_VALIDATE_EVENTS.
PYTEST = ["-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "--strict-markers", "-rfE",
          "-p", "gpu_validate_stream"]
# Left out of the unit stage: it runs this script's dry run (its plumbing, on a CPU, in a minute or two).
DRY_RUN_TEST = "tests/test_gpu_validate.py::test_the_dry_run_keeps_each_stage_to_its_budget_and_writes_its_results"
ENV_SCRIPT = r"""
import os, sys
from importlib import metadata
print("python", sys.version.split()[0], sys.executable)
print("cpu cores", os.cpu_count(), "load", os.getloadavg())
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "cuda available", torch.cuda.is_available())
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        print("gpu", p.name, f"{p.total_memory / 2**30:.0f} GiB", f"sm_{p.major}{p.minor}",
              p.multi_processor_count, "SMs;", torch.cuda.device_count(), "device(s)")
except Exception as err:
    print("torch cannot be imported:", err)
for name in ("numpy", "matplotlib", "pytest", "pytest-xdist", "pytest-timeout", "nbclient", "nbformat",
             "ipykernel", "jupyter_client", "ipywidgets", "nbval"):
    try:
        print("package", name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print("package", name, "MISSING")
"""


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _events(path: Path) -> tuple[dict[str, str], list[str]]:
    """({nodeid: result} of the tests that ended, [nodeids started and not ended]) from the plugin's file."""
    done, started = {}, []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        kind, _, rest = line.partition("\t")
        if kind == "start":
            started.append(rest)
        elif kind == "done":
            nodeid, _, result = rest.rpartition("\t")
            done[nodeid] = result
    return done, [n for n in started if n not in done]


def _timeout(ctx: Ctx, stage: str) -> list[str]:
    return ["--timeout", f"{ctx.caps[stage]:g}"] if ctx.has_timeout_plugin else []


def _pytest_outcome(done: dict, crashed: list[str], running: list[str], stopped: bool, rc) -> Outcome:
    failures = [f"{n} {r}" for n, r in done.items() if r in ("FAILED", "ERROR")]
    failures += [f"{n} CRASHED (its process died)" for n in crashed]
    counts = {r: sum(1 for v in done.values() if v == r) for r in ("PASSED", "FAILED", "ERROR", "SKIPPED")}
    notes = [", ".join(f"{v} {k.lower()}" for k, v in counts.items() if v) or "no test ended"]
    if stopped:
        notes.append(f"running when stopped: {', '.join(running) or 'no test (pytest starting or ending)'}")
        return Outcome("stopped", failures, notes)
    if rc not in (0, 1, 5) and not crashed:
        failures.append(f"pytest exit status {rc}")
    return Outcome("failed" if failures else "passed", failures, notes)


# --- 0. env ----------------------------------------------------------------------------------------


def env(ctx: Ctx, deadline: float) -> Outcome:
    """env.txt: the GPU, driver, torch, CUDA, cores, Python and packages; installs the carried wheels."""
    log, failures, notes = ctx.out / "env.txt", [], []
    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    if wheels and ctx.dry:
        notes.append(f"dry run: {len(wheels)} carried wheels not installed (they are for the GPU machine's Python)")
    elif wheels:  # the line from ../shared/gpu/fetch-wheels.sh's header
        site = ctx.work / "site"
        rc, stopped = run([PY, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)], log,
                          deadline, ctx, header=f"=== pip install of {len(wheels)} carried wheels from .whl/ ===")
        if rc != 0 or stopped:
            failures.append(f"the carried wheels did not install (exit {rc}; see env.txt)")
        ctx.env["PYTHONPATH"] = f"{site}:{ctx.env['PYTHONPATH']}"
    else:
        notes.append("no .whl/ carried: the packages must be installed already")
    if shutil.which("nvidia-smi"):
        run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm", "--format=csv"], log,
            deadline, ctx, header="=== nvidia-smi ===")
    rc, stopped = run([PY, "-c", ENV_SCRIPT], log, deadline, ctx, header="=== python, torch, packages ===")
    text = log.read_text(errors="replace")
    ctx.has_timeout_plugin = "package pytest-timeout MISSING" not in text
    ctx.has_xdist = "package pytest-xdist MISSING" not in text
    missing = re.findall(r"^package (\S+) MISSING", text, re.M)
    if missing:
        notes.append(f"missing: {', '.join(missing)}")
    gpu = re.search(r"^gpu (.*)$", text, re.M)
    notes.insert(0, gpu.group(1) if gpu else "no CUDA GPU")
    if not gpu and not ctx.dry:
        failures.append("torch sees no CUDA GPU")
    if stopped:
        return Outcome("stopped", failures, notes)
    return Outcome("failed" if failures or rc != 0 else "passed", failures, notes)


# --- 1. claims --------------------------------------------------------------------------------------


def claims(ctx: Ctx, deadline: float) -> Outcome:
    """The `gpu` claim tests, -v, one process with a per-test timeout; where a test kills the process,
    the tests left run in a new one (the dead test is named CRASHED)."""
    log, events = ctx.out / "claims.log", ctx.work / "claims.events"
    target = ctx.standins.get("claims", ["tests", "-m", "gpu"])
    cmd = [PY, *PYTEST, *target, "-v", "--durations=15", *_timeout(ctx, "claims")]
    env = {**ctx.env, "GPU_VALIDATE_EVENTS": str(events)}
    done, crashed, rc, stopped, running = {}, [], None, False, []
    ran_before = [f"--deselect={n}" for n in ctx.resume.get("claims", [])]  # --resume: a first call ran these
    for attempt in range(6):
        skip = ran_before + [f"--deselect={n}" for n in [*done, *crashed]]
        rc, stopped = run(cmd + skip, log, deadline, ctx, env,
                          header=f"\n=== pytest again, past {crashed[-1]} ===" if attempt else "")
        done, running = _events(events)
        running = [n for n in running if n not in crashed]
        if stopped or not running or rc in (0, 1, 5):
            break
        crashed.append(running[0])  # the process died inside this test
    if stopped:
        ctx.left["claims"] = [*ctx.resume.get("claims", []), *done, *crashed]
    return _pytest_outcome(done, crashed, running, stopped, rc)


# --- 2. record --------------------------------------------------------------------------------------


def _lesson_keys(args: list[str]) -> list[str]:
    if "--lessons" in args:
        return [k.strip() for k in args[args.index("--lessons") + 1].split(",") if k.strip()]
    return [f"{m.group(1)}_{m.group(2)}" for p in sorted((ROOT / "lessons_lib").iterdir())
            if (m := re.fullmatch(r"lesson(\d\d)_(\w+)", p.name))]


def record(ctx: Ctx, deadline: float) -> Outcome:
    """python -m lessons_lib.record --device cuda --quick, into $OUT: each lesson written as it ends,
    each capped (--lesson-timeout) so that one slow lesson leaves time for the others."""
    log = ctx.out / "record.log"
    args = ctx.standins.get("record", ["--device", "cuda", "--quick"])
    if ctx.resume.get("record"):  # --resume: the lessons a first call did not reach
        args = [*args, "--lessons", ",".join(ctx.resume["record"])]
    cap = max(1.0, min(ctx.caps["record"], deadline - time.monotonic()))
    rc, stopped = run([PY, "-m", "lessons_lib.record", *args, "--out", str(ctx.out), "--lesson-timeout", f"{cap:.0f}"],
                      log, deadline, ctx)
    text = log.read_text(errors="replace")
    done = re.findall(r"^  (\S+): done in", text, re.M)
    bad = re.findall(r"^  (\S+): (STOPPED|FAILED) after", text, re.M)
    failures = [f"{k} {'stopped at its cap' if w == 'STOPPED' else 'raised'}" for k, w in bad]
    refused = re.search(r"^python -m lessons_lib.record: error: (.*)$", text, re.M)
    if refused:
        failures.append(refused.group(1))
    left = [k for k in _lesson_keys(args) if k not in done and k not in dict(bad)]
    files = sorted(p.name for p in ctx.out.glob("*.json"))
    notes = [f"recorded: {', '.join(done) or 'none'}", f"file: {', '.join(files) or 'none'}"]
    if stopped:
        notes.append(f"not reached: {', '.join(left)}")
        if left:
            ctx.left["record"] = left
            ctx.reruns.append(f"python -m lessons_lib.record {' '.join(args)} --out $OUT --lessons {','.join(left)}")
        return Outcome("stopped", failures, notes)
    if rc != 0 and not failures:
        failures.append(f"record exit status {rc} (see record.log)")
    return Outcome("failed" if failures else "passed", failures, notes)


# --- 3. probes --------------------------------------------------------------------------------------


def probe_order(paths) -> list[Path]:
    """Probes that no committed GPU run has run yet first (their facts are the new ones), then the rest, each group
    by name: a probes stage cut short by its budget leaves out the ones whose output is already in .ci/gpu-runs/."""
    ran = set()
    for log in (ROOT / ".ci" / "gpu-runs").glob("*/*probes.log"):
        ran.update(re.findall(r"^=== \.ci/gpu-probes/(\S+\.py): ok ===", log.read_text(errors="replace"), re.M))
    return sorted(paths, key=lambda p: (p.name in ran, p.name))


def probes(ctx: Ctx, deadline: float) -> Outcome:
    """Every .ci/gpu-probes/*.py (not _probe.py, their shared helpers), one after another, each capped; their
    output in one log."""
    log = ctx.out / "probes.log"
    found = ctx.standins.get("probes") or [ROOT / p for p in ctx.resume.get("probes", [])] \
        or probe_order(p for p in (ROOT / ".ci" / "gpu-probes").glob("*.py") if not p.name.startswith("_"))
    if not found:
        log.write_text("no probes in .ci/gpu-probes/\n")
        return Outcome("passed", notes=["no probes"])
    failures, ran, budget_out = [], 0, False
    for probe in found:
        if deadline - time.monotonic() < 1:
            budget_out = True
            break
        t0, cap = time.monotonic(), min(ctx.caps["probes"], deadline - time.monotonic())
        rc, stopped = run([PY, str(probe)], log, t0 + cap, ctx, header=f"\n=== {_rel(probe)} ===")
        ran, seconds = ran + 1, time.monotonic() - t0
        word = f"STOPPED after {seconds:.0f} s" if stopped else "ok" if rc == 0 else f"FAILED (exit {rc})"
        with open(log, "a") as f:
            f.write(f"=== {_rel(probe)}: {word} ===\n")
        if stopped and cap < ctx.caps["probes"]:  # the stage's budget, not the probe's cap, stopped it
            budget_out = True
            break
        if stopped:
            failures.append(f"{_rel(probe)} stopped at its cap of {ctx.caps['probes']:g} s")
        elif rc != 0:
            failures.append(f"{_rel(probe)} exit {rc}")
    if budget_out:
        ctx.left["probes"] = [_rel(p) for p in found[ran:]]
        return Outcome("stopped", failures, [f"not run: {', '.join(_rel(p) for p in found[ran:]) or 'none'}"])
    return Outcome("failed" if failures else "passed", failures, [f"{ran} probe(s)"])


# --- 4. notebooks -----------------------------------------------------------------------------------


def _pack(ctx: Ctx, nbdir: Path) -> None:
    """notebooks.tar.gz: the executed notebooks and notebooks.log (rewritten after each notebook)."""
    tmp = ctx.out / ".notebooks.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for path in sorted(nbdir.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(nbdir)))
    tmp.replace(ctx.out / "notebooks.tar.gz")


def _notebook_jobs(ctx: Ctx) -> int:
    """Notebooks at a time: three on a GPU machine's 16 cores, each kernel with a third of them
    (OMP_NUM_THREADS), so no core is oversubscribed (on the first H200 run four ran at once beside the unit
    suite, 16 threads each, and CPU-only cells ran 5-25x slower); one on a small machine. On the second
    H200 run (2026-11-26-b), two at a time, the 16 took about 300 s of notebook time (00 49 s, 03 56 s, 04
    over its 78 s cap, solutions 10-37 s): one at a time is more than an 8-minute run has. Their GPU timings
    share the GPU with two neighbours: the claim tests, which state the course's numbers, run alone."""
    from gpu_validate import NOTEBOOK_JOBS  # the plan's count (gpu_validate.notebooks_needed prices the stage by it)

    return ctx.standins.get("notebook_jobs") or (NOTEBOOK_JOBS if ctx.cores >= 12 else 1)


def _verdict(one_log: Path, nb, rc, killed: bool, cap: float) -> tuple[str, list[str]]:
    lines = [ln for ln in one_log.read_text(errors="replace").splitlines()
             if ln.strip() and "Kernel is running over TCP" not in ln]
    verdict = next((ln for ln in lines if re.match(r"(ok|FAILED|STOPPED) ", ln)),
                   f"STOPPED {nb} (killed after {cap + 15:.0f} s: its kernel did not stop in time)" if killed
                   else f"FAILED {nb} (exit {rc}, no result line)")
    return verdict, [ln for ln in lines if ln != verdict]


def notebooks(ctx: Ctx, deadline: float) -> Outcome:
    """Every notebook and solution with nbclient (.ci/execute_notebooks.py), `_notebook_jobs` at a time,
    every cell run even after an error (--allow-errors), each capped; the executed copies packed as they end."""
    import subprocess

    from gpu_validate import stop

    base = ctx.standins.get("notebooks_root", ROOT)
    nbdir = ctx.work / "nb"
    nbdir.mkdir(parents=True, exist_ok=True)
    nb_log = nbdir / "notebooks.log"
    jobs = _notebook_jobs(ctx)
    env = {k: v for k, v in ctx.env.items() if k != "MPLBACKEND"}  # the inline backend: figures in the outputs
    env["OMP_NUM_THREADS"] = str(max(1, ctx.cores // jobs))
    failures, queue, running = [], list(ctx.notebooks), {}  # running: Popen -> (nb, log, file, hard end, cap)
    while queue or running:
        while queue and len(running) < jobs and deadline - time.monotonic() >= 5:  # 5 s: not even a kernel's start
            nb = queue.pop(0)
            cap = min(ctx.caps["notebooks"], deadline - time.monotonic())
            one_log = ctx.work / f"notebook-{len(queue)}-{Path(nb).stem}.log"
            f = open(one_log, "wb")
            proc = subprocess.Popen([PY, str(ROOT / ".ci" / "execute_notebooks.py"), str(nb), "--out", str(nbdir),
                                     "--allow-errors", "--timeout", f"{cap:.0f}", "--notebook-timeout", f"{cap:.0f}"],
                                    stdout=f, stderr=subprocess.STDOUT, cwd=base, env=env, start_new_session=True)
            running[proc] = (nb, one_log, f, time.monotonic() + cap + 15, cap)
        if not running:
            break
        time.sleep(0.5)
        for proc, (nb, one_log, f, hard_end, cap) in list(running.items()):
            killed = False
            if proc.poll() is None:
                if time.monotonic() < hard_end:
                    continue
                stop(proc)
                killed = True
            f.close()
            del running[proc]
            verdict, rest = _verdict(one_log, nb, proc.returncode, killed, cap)
            with open(nb_log, "a") as log:
                log.write(verdict + "\n" + "".join(f"    {ln}\n" for ln in rest))
            if not verdict.startswith("ok "):
                failures.append(" ".join(verdict.split()[:2]))
            _pack(ctx, nbdir)
    if queue:
        with open(nb_log, "a") as f:
            f.writelines(f"NOT RUN {nb} (the stage's budget was spent)\n" for nb in queue)
        _pack(ctx, nbdir)
        names = ",".join(str(Path(nb).relative_to("notebooks").with_suffix("")) for nb in queue)
        ctx.left["notebooks"] = names
        ctx.reruns.append(f"bash .ci/gpu-validate --only notebooks --notebooks {names}")
        return Outcome("stopped", failures, [f"not run: {len(queue)} notebook(s)"])
    return Outcome("failed" if failures else "passed", failures,
                   [f"{len(ctx.notebooks)} notebook(s), {jobs} at a time"])


# --- 5. unit ----------------------------------------------------------------------------------------


# The unit tests whose code branches on the device (CI's simulated-H100 leg runs the same selection); the rest
# run the same on a GPU machine as on CI's CPU. --full-unit runs all of them (about 1400: on the second H200
# run 12 workers got through ~27% in 40 s).
DEVICE_TESTS = "cuda or simgpu or gpu or device or dtype or oom or explorer or memory or graph or sync or record"


def unit(ctx: Ctx, deadline: float) -> Outcome:
    """The unit tests with pytest-xdist workers (those that branch on the device, or all with --full-unit),
    one line a test as it ends (a stopped run still names its failures), a per-test timeout; two torch
    threads a worker, as on the 2-core CI machine."""
    log, events = ctx.out / "unit.log", ctx.work / "unit.events"
    select = [] if ctx.full_unit else ["-k", DEVICE_TESTS]
    target = ctx.standins.get("unit", ["tests", "-m", "not gpu and not browser", *select, "--deselect", DRY_RUN_TEST])
    workers = ctx.standins.get("unit_workers") or max(1, min(12, ctx.cores - 2))
    xdist = ["-n", str(workers)] if ctx.has_xdist and workers > 1 else []
    env = {**ctx.env, "GPU_VALIDATE_EVENTS": str(events), "OMP_NUM_THREADS": "2"}
    ran_before = [f"--deselect={n}" for n in ctx.resume.get("unit", [])]  # --resume: a first call ran these
    rc, stopped = run([PY, *PYTEST, *target, "-v", "--tb=short", "--durations=20", *xdist, *_timeout(ctx, "unit"),
                       *ran_before], log, deadline, ctx, env)
    done, running = _events(events)
    if stopped:
        ctx.left["unit"] = [*ctx.resume.get("unit", []), *done]
    # Under xdist a worker that dies is replaced, and its test reported failed; where the run ended by
    # itself, a test started and never ended is one such.
    return _pytest_outcome(done, [] if stopped else running, running, stopped, rc)
