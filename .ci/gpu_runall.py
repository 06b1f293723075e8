"""Where a notebook's Run All goes on a GPU: per cell, measured from executed notebooks, or modelled (H200, T4).

    python .ci/gpu_runall.py measured PATH [PATH ...] [--cells N] [--label TEXT]
    python .ci/gpu_runall.py model [--account FILE] [--cells N] [--gpus H200,T4] [--markdown]

measured: PATH is what gpu-validate's notebooks stage returns (notebooks.tar.gz), a folder, or .ipynb files:
  executed notebooks, whose cells hold nbclient's execution timestamps (metadata.execution). Per notebook: Run
  All (first cell's start to the last cell's end) and its N slowest cells. Label it with the run (--label).
model: a MODEL, not a measurement. It reads, per cell, what the code's CUDA path asks of a GPU, from
  .ci/gpu-runs/runall-account.json (written by .ci/gpu_runall_account.py: each notebook under the simulated
  GPU with the harness stubbed), and prices it with the constants below, each with where it comes from:
  - setup: the kernel's start and the set-up cell (imports, CUDA context, setup()). H200: 6 s (the first H200
    run's set-up cells took 3.4-10 s; 6 s fits run -b's totals, below); T4 on Colab (2 vCPUs): 10 s, an
    assumption. Colab's own install of the course (network) is left out.
  - host: each other cell's Python (tables, traces, checks): the least of three upper bounds, its kernel's CPU
    seconds on this CPU and under the simulated GPU (GPU-sized work done on the CPU), both with the harness
    stubbed (the account file's two passes; CPU seconds, unlike wall time, do not grow with the machine's
    load), and its wall time in the CPU run committed at the account's revision; times HOST_FACTOR: 1.0 on the H200's host (run -b's totals: a fresh machine's first
    imports are not faster than this 2-core machine's), 1.5 on Colab's 2 vCPUs (an assumption).
  - timed: every `timing.measure` the cell's CUDA path makes, replayed through the harness's own block rule
    (`block_model`: warm-up, blocks growing ×10 until the Timer's overhead, one device sync of SYNC_S, is
    at most the overhead share of a block or a block exceeds min_run_time; blocks to min_run_time; then
    min_samples; never past its time limit). Each comparison (noise rule) is assumed decided at its first
    look and is capped at its max_time. A call's GPU time: the H200's recorded median for that variant
    (lessons_lib/reference/h200.json, recorded at the notebooks' GPU shapes), else DEFAULT_CALL; on a T4 the
    H200's time × T4_SLOWER (its datasheet bandwidth and fp32 peak are 15× and 8× under an H200's:
    roofline.DATASHEET; host-bound calls slow less, so this errs long).
    Lesson 06's checker times its own exercise: its speed model (exercise.speed_model) at each GPU's datasheet
    bandwidth and host cost per op (roofline.ASSUMED_LAUNCH, read by name).
  - compile: each cold Inductor compile site the CUDA path reaches (compiling.compile_cold, recorded; plus
    EXTRA_COMPILES, the sites that call torch.compile themselves), COMPILE_S each: H200 6.5 s (the first H200
    run's notebooks printed 6.2, 6.4 and 7.3 s); a T4 on Colab 3× that (2 vCPUs: an assumption).
  - profiler: a torch.profiler session: the first in a kernel PROFILER_S[0] (CUPTI's start), others [1].
  - child: a fresh Python process with CUDA (lesson 00's first-call demo): CHILD_S.
  Calibration: with the block rule the H200 ran then (1e-4), the model gives run -b's measured totals
  (2026-11-26, two notebooks at a time) within about 25% for 01, 02 and solutions 00, 01, 04 (`calibrate`
  prints each); lesson 00 now needs 10 paired rounds a comparison where it had 5, and 06's solution took over
  37 s there (stopped) where the model gives about 20 s: checker-heavy cells may be missed by up to 2×.
  Known to be wrong: comparisons that need their second look (15 rounds) take about 1.5× their share; work the
  harness does not time (allocations, float64 references at GPU sizes) is in `host` at CPU speed; GPU
  contention when notebooks share a GPU (gpu-validate runs three at a time) is left out.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACCOUNT = ROOT / ".ci" / "gpu-runs" / "runall-account.json"
HOST_FACTOR = {"H200": 1.0, "T4": 1.5}
T4_SLOWER = 10.0
DEFAULT_CALL = 1e-4  # seconds a timed GPU call takes on an H200 when nothing recorded names it
EXTRA_COMPILES = {  # notebook -> {first code line of the cell: cold compiles} for sites outside compile_cold
    "notebooks/02_autograd_memory.ipynb": {"report = L.compile_check(device=device)": 1},
    # gpu_lesson's reduce-overhead variant: torch.compile(mode="reduce-overhead") in Variant.prepare (on_gpu.py)
    "notebooks/05_cuda_graphs.ipynb": {"cmp = L.compare_on_gpu(L.OVERHEAD_BOUND, device)": 1},
}


@dataclass(frozen=True)
class Gpu:
    name: str
    sync_s: float  # the Timer's overhead a block (one device sync + a clock read)
    setup_s: float
    compile_s: float
    child_s: float
    profiler_s: tuple[float, float]


# SYNC_S: h200.json's recorded blocks (a block stopped growing at 1e4 × the overhead) put it at 1-8 µs on the H200.
GPUS = {"H200": Gpu("H200", 4e-6, 6.0, 6.5, 5.0, (2.0, 0.3)),
        "T4": Gpu("T4", 8e-6, 10.0, 19.5, 10.0, (3.0, 0.5))}


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def cell_times(nb: dict) -> list[tuple[int, float, str]]:
    """(index, seconds, first code line) of each code cell this run executed (nbclient's metadata.execution),
    in order: a cell whose stamps are older than the one before it kept an earlier run's (the run stopped)."""
    out, last_end = [], None
    for i, cell in enumerate(nb.get("cells", [])):
        ex = cell.get("metadata", {}).get("execution", {})
        if cell.get("cell_type") != "code" or "shell.execute_reply" not in ex or "iopub.execute_input" not in ex:
            continue
        start, end = _stamp(ex["iopub.execute_input"]), _stamp(ex["shell.execute_reply"])
        if last_end is not None and start < last_end - 1.0:
            break
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        lines = [ln.strip() for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        out.append((i, end - start, (lines or [""])[0]))
        last_end = end
    return out


def run_all_seconds(nb: dict) -> tuple[float, int]:
    """(seconds from the first cell's start to the last executed cell's end, code cells left unexecuted)."""
    times = cell_times(nb)
    codes = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    if not times:
        return 0.0, len(codes)
    ex = {i: c["metadata"]["execution"] for i, c in enumerate(nb["cells"]) if i in {t[0] for t in times}}
    first, last = ex[times[0][0]], ex[times[-1][0]]
    return _stamp(last["shell.execute_reply"]) - _stamp(first["iopub.execute_input"]), len(codes) - len(times)


def load_executed(paths: list[Path]) -> dict[str, dict]:
    """{notebook name: notebook} from .tar.gz files, folders and .ipynb files."""
    found = {}
    for path in paths:
        if path.suffix == ".gz":
            with tarfile.open(path) as tar:
                for m in tar.getmembers():
                    if m.isfile() and m.name.endswith(".ipynb"):
                        found[Path(m.name).name] = json.load(io.TextIOWrapper(tar.extractfile(m), encoding="utf-8"))
        elif path.is_dir():
            found.update({p.name: json.loads(p.read_text()) for p in sorted(path.rglob("*.ipynb"))})
        else:
            found[path.name] = json.loads(path.read_text())
    return dict(sorted(found.items()))


def measured(paths: list[Path], cells: int, label: str) -> str:
    lines = [f"measured: {label or ', '.join(map(str, paths))}", "",
             f"{'notebook':40} {'Run All':>8} {'cells':>5}  slowest cells ([index] seconds, first line)"]
    for name, nb in load_executed(paths).items():
        times = cell_times(nb)
        total, left = run_all_seconds(nb)
        slow = sorted(times, key=lambda c: -c[1])[:cells]
        lines.append(f"{name:40} {total:7.1f}s {len(times):5}  "
                     + "; ".join(f"[{i}] {s:.1f} s {first[:40]}" for i, s, first in slow)
                     + (f"  (stopped: {left} code cells not run)" if left else ""))
    return "\n".join(lines)


# --- the model ------------------------------------------------------------------------------------


def block_model(t: float, sync: float, share: float, m: float, samples: int, warmup: int,
                limit: float | None, flush_s: float = 0.0) -> float:
    """Seconds `timing.measure` takes for a call of `t` seconds: its warm-up, block search and samples, as
    timing._autorange runs them (the same rules, on a modelled clock), never past `limit` (plus a call)."""
    end = limit if limit is not None else float("inf")
    clock = 0.0
    for k in range(max(warmup, 1)):
        if k and clock + t > end:
            break
        clock += t
    if flush_s:  # per call, a cache flush between calls (timing._measure_per_call)
        calls = min(200, max(samples, int(m / max(t + flush_s, 1e-9)) + 1))
        return min(clock + calls * (t + flush_s + 2 * sync), max(end, clock + t + flush_s))
    number, last = 1, 0.0
    while True:
        if last and clock + number * t > end:
            number //= 10
            break
        last = sync + number * t
        clock += last
        if (sync / last <= share and last >= m / 1000) or last > m or number > 1e9:
            break
        number *= 10
    got, kept = 0, 0.0
    while kept < m and clock + number * t <= end:
        clock, kept, got = clock + sync + number * t, kept + number * t, got + 1
    got = max(got, 1)
    while got < samples and clock + (number + max(number // 100, 2)) * t + 2 * sync <= end:
        clock, got = clock + (number + max(number // 100, 2)) * t + 2 * sync, got + 1
    return clock


def _recorded_calls() -> dict[tuple[str, str], float]:
    """{(lesson number, variant label): seconds a call} from the measured H200 file (its medians)."""
    out = {}

    def walk(key, node):
        if isinstance(node, dict):
            for label, v in (node.get("variants") or {}).items():
                if isinstance(v.get("median"), (int, float)) and v["median"] > 0:
                    out.setdefault((key, label), v["median"])
            for v in node.values():
                walk(key, v)
        elif isinstance(node, list):
            for v in node:
                walk(key, v)

    for key, section in json.loads((ROOT / "lessons_lib" / "reference" / "h200.json").read_text())["lessons"].items():
        walk(key[:2], section)
    return out


def _exercise06(gpu: str) -> dict[str, float]:
    """Lesson 06's checker times the reader's code against the starter at its GPU shape: the speed model."""
    sys.path.insert(0, str(ROOT))
    from lessons_lib import roofline
    from lessons_lib.lesson06_data_movement import exercise

    launch = getattr(roofline, "ASSUMED_LAUNCH", {}).get(gpu, exercise.HOST_OP)
    host = exercise.HOST_OP if gpu == "H200" else max(launch, 2 * exercise.HOST_OP)  # Colab's host: slower
    bandwidth, (n, rows, cols) = roofline.DATASHEET[gpu][4] * 1e9, exercise.GPU_SPEED_SHAPE
    while n > 64 and exercise.speed_model(bandwidth, 2 * exercise.HOST_OP, (n, rows, cols))[0] > exercise.SPEED_CALL_S:
        n //= 2  # as exercise.gpu_speed_shape picks the pieces on this GPU
    starter, solution = exercise.speed_model(bandwidth, host, (n, rows, cols))
    return {"starter": starter, "yours": solution}


def call_seconds(gpu: str, lesson: str, label: str, h200: dict) -> float:
    if lesson == "06" and label in ("starter", "yours"):
        return _exercise06(gpu)[label]
    base = h200.get((lesson, label), DEFAULT_CALL)  # the H200's recorded shape is the notebook's GPU default
    return base if gpu == "H200" else base * T4_SLOWER


def model_cell(cell: dict, cpu_s: float | None, gpu: Gpu, lesson: str, h200: dict,
               share: float, first: bool, profiled: list, short: list | None = None) -> dict[str, float]:
    """{setup, host, timed, compile, profiler, child} seconds of one cell on `gpu`. `short` gets a line for each
    comparison whose first look's rounds do not fit its max_time here (it then decides nothing)."""
    out = dict.fromkeys(("setup", "host", "timed", "compile", "profiler", "child"), 0.0)
    calls = cell["calls"]
    children = sum(c["t"] - c["start"] for c in calls if c["fn"] == "run" and "python" in c.get("cmd", "").lower())
    if first:
        out["setup"] = gpu.setup_s
    elif cell.get("cpu") is not None:  # CPU seconds (load-independent); a child process is priced as `child`
        out["host"] = (cell["cpu"] if cpu_s is None else min(cell["cpu"], cpu_s)) * HOST_FACTOR[gpu.name]
    else:  # an older account: wall seconds, less any child process's
        sim = max(cell["sim_seconds"] - children, 0.0)
        out["host"] = (sim if children or cpu_s is None else min(sim, cpu_s)) * HOST_FACTOR[gpu.name]
    groups = [c for c in calls if c["fn"] == "_paired"]
    for c in calls:
        if c["fn"] == "measure":
            t = call_seconds(gpu.name, lesson, c["label"], h200) if c["dev"] == "cuda" else 1e-3
            sync, sh = (gpu.sync_s, share) if c["dev"] == "cuda" else (0.5e-6, 1e-4)
            flush = 30e-6 if c["flush"] else 0.0  # 2× the L2 written at the bandwidth, and its launch
            c["_s"] = block_model(t, sync, sh, c["min_run_time"], c["min_samples"], c["warmup"], c["max_time"], flush)
            out["timed"] += c["_s"] * (1.0 if c["dev"] == "cuda" else HOST_FACTOR[gpu.name])
        elif c["fn"] == "wrong":  # lesson 00's wrong timers: their calls, untimed by the harness
            out["timed"] += c.get("calls", 1) * call_seconds(gpu.name, lesson, c["label"], h200)
        elif c["fn"] == "compile_cold":
            out["compile"] += gpu.compile_s
        elif c["fn"] == "__enter__":
            out["profiler"] += gpu.profiler_s[1 if profiled else 0]
            profiled.append(1)
        elif c["fn"] == "run" and "python" in c.get("cmd", "").lower():
            out["child"] += gpu.child_s
    for g in groups:  # a comparison is capped at its max_time: the rounds stop when the next would not fit
        inside = sum(c.get("_s", 0.0) for c in calls if c["fn"] == "measure" and g["start"] <= c["t"] <= g["t"])
        if g.get("max_time") and inside > g["max_time"]:
            out["timed"] -= inside - g["max_time"]
            if short is not None and share == 1e-3:
                short.append(f"[{cell['cell']}] {', '.join(g['names'])[:50]}: its first look needs ~{inside:.0f} s, "
                             f"max_time {g['max_time']:g} s")
    return out


def committed_notebook(rel: str, rev: str) -> dict:
    """The notebook as committed at `rev` (its CPU run's cell times: the working tree may be mid-re-execution)."""
    import subprocess

    shown = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode == 0:
        return json.loads(shown.stdout)
    return json.loads((ROOT / rel).read_text()) if (ROOT / rel).exists() else {"cells": []}


def model_notebooks(account: Path, cols: list[tuple[str, float]], short: dict | None = None) -> dict[str, dict]:
    """{notebook: {(gpu, share): [(cell, seconds, {part: seconds}, first line)]}} from the account file; `short`
    gets {(notebook, gpu): [comparisons that do not fit their max_time]}."""
    data = json.loads(account.read_text())
    h200 = _recorded_calls()
    out = {}
    for rel, nb_acct in data["notebooks"].items():
        # Three upper bounds on a cell's own Python, each with something more in it: its CPU seconds on this CPU,
        # harness stubbed (its CPU-sized compute, and OpenMP threads spinning), and its wall time in the CPU run
        # committed at the account's revision (its CPU timings, this machine's load); the lesser is taken.
        stubbed = nb_acct.get("cpu_seconds") or {}
        cpu = {}
        for _i, secs, first in cell_times(committed_notebook(rel, data.get("rev", "HEAD"))):
            cpu.setdefault(first[:100], min(secs, stubbed.get(first[:100], secs)))
        cpu = {**stubbed, **cpu}
        lesson = Path(rel).name[:2]
        out[rel] = {}
        for g, share in cols:
            profiled, per_cell = [], []
            for k, cell in enumerate(nb_acct["cells"]):
                lst = short.setdefault((rel, g), []) if short is not None else None
                m = model_cell(cell, cpu.get(cell["first_line"]), GPUS[g], lesson, h200, share, k == 0, profiled,
                               lst)
                m["compile"] += GPUS[g].compile_s * EXTRA_COMPILES.get(rel, {}).get(cell["first_line"], 0)
                per_cell.append((cell["cell"], sum(m.values()), m, cell["first_line"]))
            out[rel][(g, share)] = per_cell
    return out


def model(account: Path, gpus: list[str], cells: int, markdown: bool, of: str = "") -> str:
    cols = [(g, s) for g in gpus for s in ((1e-4, 1e-3) if g == "H200" else (1e-3,))]
    heads = [f"{g} (1e-4)" if s == 1e-4 else g for g, s in cols]
    main = cols[heads.index(of)] if of in heads else ("H200", 1e-3) if ("H200", 1e-3) in cols else cols[-1]
    short: dict = {}
    found = model_notebooks(account, cols, short)
    sep = " | " if markdown else "  "
    out = ["MODEL, not a measurement (.ci/gpu_runall.py: its assumptions in its header). Run All per notebook in",
           "seconds; 'H200 (1e-4)': with the harness's block rule before c74d975, for comparison.", "",
           sep.join([f"{'notebook':42}", *(f"{h:>10}" for h in heads), f"{main[0]}: seconds of setup, host, timed, "
                     "compile, profiler, child"])]
    if markdown:
        out[-1] = f"| {out[-1]} |"
        out.append("|" + "---|" * (len(heads) + 2))
    details = []
    for rel, by_col in found.items():
        split = {}
        for _i, _s, m, _f in by_col[main]:
            for k, v in m.items():
                split[k] = split.get(k, 0.0) + v
        line = sep.join([f"{rel.removeprefix('notebooks/'):42}",
                         *(f"{sum(c[1] for c in by_col[col]):9.0f}s" for col in cols),
                         " ".join(f"{v:.0f}" for v in split.values())])
        out.append(f"| {line} |" if markdown else line)
        if cells:
            details.append(f"\n{rel} ({heads[cols.index(main)]}, model): its {cells} slowest cells")
            details += [f"  [{i:2}] {s:5.1f} s  " + ", ".join(f"{k} {v:.1f}" for k, v in m.items() if v >= 0.05)
                        + f"  | {first[:60]}" for i, s, m, first in sorted(by_col[main], key=lambda c: -c[1])[:cells]]
    tight = [f"  {rel.removeprefix('notebooks/')} on {g}: {line}"
             for (rel, g), lines in short.items() for line in lines]
    if tight and not markdown:
        out += ["", "comparisons whose 10 paired rounds do not fit their max_time (they decide nothing there):", *tight]
    return "\n".join(out + details)


def calibrate(account: Path, run: Path) -> str:
    """The model with the block rule a measured run used (1e-4, before c74d975) beside that run's Run All of each
    notebook that finished (gpu-validate's summaries: "ok notebooks/NAME.ipynb 27.9s ...")."""
    import re

    seen = {}
    for summary in sorted(run.glob("*summary.txt")):
        for m in re.finditer(r"^\s*(ok|STOPPED) (notebooks/\S+\.ipynb) ([\d.]+)s", summary.read_text(), re.M):
            seen[m.group(2)] = (m.group(1), float(m.group(3)))
    found = model_notebooks(account, [("H200", 1e-4)])
    lines = [f"model (H200, the 1e-4 block rule) against {run.name}'s measured Run All (STOPPED: at least)", ""]
    for rel, (word, secs) in seen.items():
        if rel in found:
            m = sum(c[1] for c in found[rel][("H200", 1e-4)])
            at_least = "≥" if word == "STOPPED" else " "
            lines.append(f"{rel.removeprefix('notebooks/'):44} model {m:5.0f} s  measured {at_least}{secs:5.1f} s  "
                         f"model/measured {m / secs:4.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("measured", help="per-cell times of executed notebooks")
    m.add_argument("paths", nargs="+", type=Path)
    m.add_argument("--cells", type=int, default=3)
    m.add_argument("--label", default="")
    p = sub.add_parser("model", help="a modelled Run All per notebook on an H200 and a T4")
    p.add_argument("--account", type=Path, default=ACCOUNT)
    p.add_argument("--cells", type=int, default=0)
    p.add_argument("--gpus", default="H200,T4")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--of", default="H200", help="whose cells --cells lists: H200, 'H200 (1e-4)' or T4")
    c = sub.add_parser("calibrate", help="the model against a measured run's totals (gpu-validate summaries)")
    c.add_argument("--account", type=Path, default=ACCOUNT)
    c.add_argument("--run", type=Path, default=ROOT / ".ci" / "gpu-runs" / "h200-2026-11-26-b")
    a = ap.parse_args(argv)
    if a.what == "calibrate":
        print(calibrate(a.account, a.run))
    elif a.what == "measured":
        missing = [str(p) for p in a.paths if not p.exists()]
        if missing:
            ap.error(f"no such file or folder: {', '.join(missing)}")
        print(measured(a.paths, a.cells, a.label))
    else:
        gpus = [g.strip() for g in a.gpus.split(",") if g.strip()]
        if not a.account.exists() or any(g not in GPUS for g in gpus):
            ap.error(f"needs {a.account} (python .ci/gpu_runall_account.py writes it) and GPUs among {', '.join(GPUS)}")
        print(model(a.account, gpus, a.cells, a.markdown, a.of))
    return 0


if __name__ == "__main__":
    sys.exit(main())
