"""Re-read every figure the workshop kit quotes from where it came from; say which no longer hold.

    python workshop/check_kit.py            # the day before a workshop: prints each problem, exit status 1 if any

The kit (README.md, LESSONS.md, slides.md) quotes three kinds of figure, and each is checked at its source:

- from a notebook's committed outputs (NOTEBOOK_QUOTES): the kit names the commit whose outputs it read
  (LESSONS.md: "read at commit ..."); the phrase must be in the kit page and the pattern must match one cell
  (source and text outputs) of that notebook at that commit. Quotes marked `fact` (op counts, bytes, names:
  the same on every run) must also match the notebook as it is now.
- from a recorded file in lessons_lib/reference/ (RECORDED_QUOTES): the value at a key path, formatted as the
  kit writes it, must be the phrase. The recorded files' table (README.md) must state each file's date,
  threads, load average range and lessons as its `meta` says.
- the Run All table (README.md): each notebook's time, first cell's start to last cell's end, from the
  `metadata.execution` timestamps of the notebook at the kit's commit.

tests/test_rooms.py runs these checks. A notebook re-executed or a file re-recorded after the kit was checked
fails nothing here until the kit's commit is moved: that is the day-before re-read, done by this script.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "workshop"
REF = ROOT / "lessons_lib" / "reference"

# (kit page, the phrase as the kit writes it, notebook stem, a pattern one cell of that notebook matches,
#  fact: the same on every run, so it must hold in the notebook as it is now too)
NOTEBOOK_QUOTES: list[tuple[str, str, str, str, bool]] = [
    ("README.md", "`backend Slow2d`", "03_grouped_linear", r"on cpu \(float32, 1 thread\): backend Slow2d", False),
    ("slides.md", "`backend Slow2d`", "03_grouped_linear", r"on cpu \(float32, 1 thread\): backend Slow2d", False),
    ("LESSONS.md", "`backend Slow2d`", "03_grouped_linear", r"on cpu \(float32, 1 thread, training\): backend Slow2d", False),
    ("slides.md", "17.3 ms", "03_grouped_linear", r"H200.*17\.3 ms with cuDNN's TF32", True),
    ("slides.md", "21.8 ms", "03_grouped_linear", r"and 21\.8 ms in full float32", True),
    ("slides.md", "1.34 ms", "03_grouped_linear", r"against 1\.34 ms for the stacked matmul", True),
    ("slides.md", "65 ops against 1", "03_grouped_linear", r"loop \(SlowGroups\)\s+65\s.*\n\s*grouped Conv1d\s+1\s", True),
    ("slides.md", "6.58 ms", "07_capstone", r"H200.*the original 6\.58 ms a step", True),
    ("slides.md", "2.09 ms", "07_capstone", r"the fixed loop eager 2\.09 ms", True),
    ("slides.md", "0.454 ms: 14.5×", "07_capstone", r"the shipped graph 0\.454 ms: 14\.5× the original", True),
    ("slides.md", "about 1.2 ms", "07_capstone", r"GPU busy in kernels for about 1\.2 ms of its 6\.6", True),
    ("slides.md", "348.8 MiB", "01_broadcast_matmul", r"broadcast matmul .* 348\.8 MiB .*\neinsum .* 27\.1 MiB", True),
    ("slides.md", "40.5 MiB", "07_capstone", r"bytes copied \(op trace\)\s+40\.5 MiB\s+1\.4 MiB", True),
    ("slides.md", "39.9 MiB saved", "07_capstone", r"saved for backward, one batch \(ledger\)\s+39\.9 MiB\s+1\.2 MiB", True),
    ("slides.md", "210 kernel launches", "07_capstone", r"kernel launches on a CUDA GPU .*\s210\s+47\s", True),
    ("slides.md", "5 host syncs", "07_capstone", r"host syncs on a GPU \(sync detector, CUDA view\)\s+5(\.0)?\s+0(\.0)?\s", True),
    ("LESSONS.md", "40.5 MiB copied per step against 1.4 MiB", "07_capstone",
     r"bytes copied \(op trace\)\s+40\.5 MiB\s+1\.4 MiB", True),
    ("LESSONS.md", "39.9 MiB saved for backward against 1.2 MiB", "07_capstone",
     r"saved for backward, one batch \(ledger\)\s+39\.9 MiB\s+1\.2 MiB", True),
    ("LESSONS.md", "6.58 ms a step, the fixed loop eager 2.09 ms, the shipped step (one CUDA graph) 0.454 ms",
     "07_capstone", r"the original 6\.58 ms a step, the fixed loop eager 2\.09 ms, the shipped graph 0\.454 ms", True),
    ("LESSONS.md", "2.78 ms to 0.31 ms eager and 0.325 ms as a graph", "07_capstone",
     r"T4 · model: original 2\.78 ms, fixed 0\.31 ms, fixed as one graph 0\.325 ms \(210 vs 47 launches", False),
    ("LESSONS.md", "8.6× on a T4, an A100 and an H100", "07_capstone", r"the model gives 8\.6× on a T4, an A100 and an H100", True),
    ("LESSONS.md", "128.0 KiB, 25% of the 512.0 KiB saved", "07_capstone",
     r"\(32x32x32\) kept for backward by SoftmaxBackward0\.result: 128\.0 KiB, 25% of the 512\.0 KiB saved", True),
    ("README.md", "1.006× with long kernels", "05_cuda_graphs", r"eager took\s+1\.006× the replay alone", True),
    ("slides.md", "eager took 1.006×", "05_cuda_graphs", r"eager took\s+1\.006× the replay alone", True),
    ("README.md", "busy about 1.2 ms of its 6.58 ms step", "07_capstone",
     r"the original 6\.58 ms a step.*GPU busy in kernels for about 1\.2 ms", True),
    ("README.md", "(40.5 MiB copied a step)", "07_capstone", r"bytes copied \(op trace\)\s+40\.5 MiB", True),
    ("README.md", "(14.5× the original)", "07_capstone", r"the shipped graph 0\.454 ms: 14\.5× the original", True),
    ("README.md", "Conv1d 17.3 ms against 1.34 ms", "03_grouped_linear",
     r"17\.3 ms with cuDNN's TF32.*against 1\.34 ms for the stacked matmul", True),
    # facts the notebooks print the same on every run (also checked against the notebooks as they are now)
    ("LESSONS.md", "predicts 6.82 s and 11.54 s", "00_timing_honestly", r"the model: 6\.82 s, then 11\.54 s", True),
    ("slides.md", "6.82 s and\n11.54 s", "00_timing_honestly", r"the model: 6\.82 s, then 11\.54 s.*leaves 255 calls queued", True),
    ("LESSONS.md", "6.18 s and 10.45 s model", "00_timing_honestly", r"the model: 6\.18 s, then 10\.45 s", True),
    ("LESSONS.md", "1,107,427,328 bytes against 34,603,008", "02_autograd_memory",
     r"strategy 1\s+yes\s+1,107,427,328 B.*strategy 2\s+yes\s+34,603,008 B", True),
    ("LESSONS.md", "(predicted: 32.1 MiB held)", "02_autograd_memory", r"strategy 1\s+no\s+33,685,504 B \(32\.1 MiB\)", True),
    ("LESSONS.md", "**352 against 7**", "03_grouped_linear",
     r"training step \(forward \+ backward\):.*loop \(SlowGroups\)\s+352\s.*matmul, channels first\s+7\s", True),
    ("LESSONS.md", "(896 ops at 64 groups against 7 with `foreach`)", "03_grouped_linear",
     r"SlowGroups: 2·G tensors, for loop: 896 ops\nSlowGroups: 2·G tensors, foreach: 7 ops", True),
    ("LESSONS.md", "(0.54 against 0.02 GFLOP in the trace)", "03_grouped_linear",
     r"matmul, channels first\s+3\s.*0\.02\n.*block-diagonal\s+7\s.*0\.54", True),
    ("LESSONS.md", "(the trace: 42 ops against 38 for a training step", "04_launch_overhead",
     r"training step \(forward \+ backward\):.*PseudoLinear\s+38\s.*\naddcmul\s+42\s", True),
    # notebook runs on this course's 2-core EPYC VM, as committed (machine-dependent: checked at the kit's commit)
    ("LESSONS.md", "the Timer 2.6 ms against the harness's 16 ms on 2 threads", "00_timing_honestly",
     r"Timer default\s+2\.6 ms.*\n\s*harness \(2 threads, as torch runs now\)\s+16 ms.*"
     r"one thread ran 6\.1× faster than 2 threads: this machine's cores are busy", False),
    ("LESSONS.md", "7.99 ms hot, 7.99 ms rotating 32 copies, 8 ms\n   flushed", "00_timing_honestly",
     r"same input\s+7\.99 ms.*rotate 32 copies\s+7\.99 ms.*flush_cache=True\s+8 ms.*the two agree", False),
    ("LESSONS.md", "348.8 MiB against einsum's 27.1 MiB", "01_broadcast_matmul",
     r"broadcast matmul .* 348\.8 MiB .*\neinsum .* 27\.1 MiB", True),
    ("LESSONS.md", "checkpointed step at 1.38× the posted\n   one (and the posted step at 52.1× einsum's)", "02_autograd_memory",
     r"broadcast step vs einsum step: 52\.1× einsum's time\n\s*checkpointed vs posted step:\s+1\.38× the posted step", False),
    ("LESSONS.md", "Conv1d\n   0.55× the loop's time, `auto` 0.50× (0.91× the Conv1d's); in the training step 0.35× and 0.31×",
     "03_grouped_linear", r"forward, time over time: Conv1d / loop: 0\.55×; GroupedLinear\(auto\) / loop: 0\.50×; "
     r"GroupedLinear\(auto\) / Conv1d: 0\.91×\.\ntraining step, time over time: Conv1d / loop: 0\.35×; "
     r"GroupedLinear\(auto\) / loop: 0\.31×; GroupedLinear\(auto\) / Conv1d: 0\.89×", False),
    ("LESSONS.md", "12.4× the stacked pair's", "03_grouped_linear", r"the step takes 12\.4× the stacked step's time", False),
    ("LESSONS.md", "100 GFLOP/s and 27 GB/s", "04_launch_overhead", r"measured on AMD EPYC: 100 GFLOP/s .*, 27 GB/s", False),
    ("LESSONS.md", "Linear compute-bound at 522 µs and PseudoLinear\n   memory-bound at 95.7 µs (measured there, forward: 557 µs and 45.9 µs)",
     "04_launch_overhead", r"Linear\s+4\s+52\.4\s+2\.89\s+522 µs .* compute\s+557 µs.*\nPseudoLinear\s+8\s.*95\.7 µs .* memory\s+45\.9 µs",
     False),
    ("LESSONS.md", "PseudoLinear 3.75× as fast as Linear as posted, 7.99× with the posted\n   benchmark's mistakes fixed",
     "04_launch_overhead", r"posted benchmark: PseudoLinear is 3\.75× as fast as Linear.*\nfixed benchmark:\s+PseudoLinear is 7\.99× as fast",
     False),
    ("LESSONS.md", "1.04 µs for a 1-element add", "04_launch_overhead", r"A 1-element add costs 1\.04 µs", False),
    ("LESSONS.md", "allocator's share at 1.55×", "04_launch_overhead",
     r"allocator: eager with new outputs over eager into reused buffers, 1\.55× \(1 thread\)", False),
    ("LESSONS.md", "fusion alone at 3.01× against the 8.0× bytes bound", "04_launch_overhead",
     r"fusion alone \(compiled over eager into reused buffers\): 3\.01× faster, against the bytes bound of 8\.0×", False),
    ("README.md", "where the notebook's own run measured 52.09 ms", "07_capstone", r"original\s+52\.09 ms\s+49\.2 MiB", False),
    ("README.md", "tracing and compiling, took 1.7 s", "04_launch_overhead",
     r"torch\.compile \(backend 'inductor'\): first call, tracing and compiling, took 1\.7 s", False),
    ("LESSONS.md", "predicts 2.02× (model, with the 1.08 µs of\n   dispatch per op", "05_cuda_graphs",
     r"1\.08 µs dispatch per op measured here\): PseudoLinear step at width 256, batch 64, layers 8, 78 ops .*predicted 2\.02×",
     False),
    ("LESSONS.md", "×2.03 with the\n   dispatch of notebook 05's committed run", "05_cuda_graphs", r"with this host's dispatch: ×2\.03", False),
    ("LESSONS.md", "eager 1.31 ms, the graph 152 µs: 8.6×", "05_cuda_graphs", r"eager at 1\.31 ms, the graph at\s+152 µs \(8\.6×\)",
     True),
    ("LESSONS.md", "cat once 25× faster than the loop", "06_data_movement",
     r"at 64 pieces \(5 paired rounds\): cat once is 25× faster than cat in a loop", False),
    ("LESSONS.md", "6.32 µs, about 1.8 hours", "06_data_movement", r"\(6\.32 µs per element\).*≈ 1\.8 h", False),
    ("LESSONS.md", "took 52.09 ms a step for the original and 8.03 ms after the GEMM fix (5.13×)", "07_capstone",
     r"original\s+52\.09 ms\s+49\.2 MiB\n\+ gemm\s+8\.03 ms\s+5\.13× faster", False),
    ("LESSONS.md", "9.64× with every fix", "07_capstone", r"all fixes: 9\.64× faster than the original", False),
    ("LESSONS.md", "1.6 MiB with every fix", "07_capstone", r"\+ loop\s+[\d.]+ ms\s+.*\s1\.6 MiB", False),
    ("LESSONS.md", "49.2 MiB for the original", "07_capstone", r"original\s+[\d.]+ ms\s+49\.2 MiB", False),
]

# (kit page, the phrase as the kit writes it, recorded file, key path, scale, format)
RECORDED_QUOTES: list[tuple[str, str, str, str, float, str]] = [
    ("slides.md", "18.5 µs", "h200.json", "00_timing/demos/no_sync/wrong/median", 1e6, "{:.1f} µs"),
    ("slides.md", "2.67 ms", "h200.json", "00_timing/demos/no_sync/honest/median", 1e3, "{:.2f} ms"),
    ("slides.md", "97.3 ms", "h200.json", "00_timing/demos/first_call/wrong/median", 1e3, "{:.1f} ms"),
    ("slides.md", "0.366 ms", "h200.json", "01_broadcast_matmul/headline/variants/broadcast matmul/median", 1e3,
     "{:.3f} ms"),
    ("slides.md", "0.476 ms", "h200.json", "01_broadcast_matmul/headline/variants/loop/median", 1e3, "{:.3f} ms"),
    ("slides.md", "0.054 ms", "h200.json", "01_broadcast_matmul/headline/variants/einsum/median", 1e3, "{:.3f} ms"),
    ("slides.md", "| 1024 MiB | 2096 MiB |", "h200.json",
     "02_autograd_memory/headline/metrics/broadcast matmul/backward peak (MiB)", 1, "| 1024 MiB | {:.0f} MiB |"),
    ("slides.md", "| 0 MiB | 48 MiB |", "h200.json",
     "02_autograd_memory/headline/metrics/einsum/backward peak (MiB)", 1, "| 0 MiB | {:.0f} MiB |"),
    ("slides.md", "0.224 ms", "h200.json", "04_launch_overhead/headline/variants/Linear/median", 1e3, "{:.3f} ms"),
    ("slides.md", "0.130 ms", "h200.json", "04_launch_overhead/headline/variants/PseudoLinear/median", 1e3,
     "{:.3f} ms"),
    ("slides.md", "0.067 ms", "h200.json", "04_launch_overhead/headline/variants/addcmul/median", 1e3, "{:.3f} ms"),
    ("slides.md", "7.6 µs", "h200.json", "04_launch_overhead/overhead/1-element add/median", 1e6, "{:.1f} µs"),
    ("slides.md", "1.31 ms", "h200.json", "05_cuda_graphs/overhead_bound/variants/eager/median", 1e3, "{:.2f} ms"),
    ("slides.md", "0.152 ms", "h200.json", "05_cuda_graphs/overhead_bound/variants/CUDA graph/median", 1e3,
     "{:.3f} ms"),
    ("slides.md", "1.96 ms / 0.060 ms", "h200.json", "06_data_movement/headline/variants/cat in a loop/median", 1e3,
     "{:.2f} ms / 0.060 ms"),
    ("slides.md", "13.3 GB/s / 53.4 GB/s", "h200.json", "06_data_movement/transfers/host → device, pageable/gbs", 1,
     "{:.1f} GB/s / 53.4 GB/s"),
    ("slides.md", "4.50 ms / 0.167 ms", "h200.json", "06_data_movement/seed_example1/as posted/median", 1e3,
     "{:.2f} ms / 0.167 ms"),
    ("LESSONS.md", "7.43 ms and 7.74 ms a step", "h200.json", "07_capstone/waterfall/stages/original/median_per_step",
     1e3, "{:.2f} ms and 7.74 ms a step"),
    ("LESSONS.md", "every fix 3.20×", "h200.json", "07_capstone/waterfall/total/median", 1, "every fix {:.2f}×"),
    ("LESSONS.md", "159.5 ms per step for the original", "amd-epyc.json",
     "07_capstone/waterfall/stages/original/median_per_step", 1e3, "{:.1f} ms per step for the original"),
    ("README.md", "at 159.5 ms a step", "amd-epyc.json", "07_capstone/waterfall/stages/original/median_per_step", 1e3,
     "at {:.1f} ms a step"),
    ("LESSONS.md", "4.28×, decided", "amd-epyc.json", "07_capstone/waterfall/total/median", 1, "{:.2f}×, decided"),
    ("LESSONS.md", "the Timer 1.79 ms against the harness's 0.303 ms", "h200.json", "00_timing/demos/one_thread/wrong/median",
     1e3, "the Timer {:.2f} ms against the harness's 0.303 ms"),
    ("LESSONS.md", "the Timer 1.66 ms against 7.99 ms", "intel-r-xeon-r-processor.json",
     "00_timing/demos/one_thread/honest/median", 1e3, "the Timer 1.66 ms against {:.2f} ms"),
    ("LESSONS.md", "10.8 µs hot, 11.3 µs rotating 8 copies", "h200.json", "00_timing/demos/hot_cache/wrong/median", 1e6,
     "{:.1f} µs hot, 11.3 µs rotating 8 copies"),
    ("LESSONS.md", "broadcast 0.366 ms, the loop\n   0.476 ms, einsum 0.054 ms", "h200.json",
     "01_broadcast_matmul/headline/variants/loop/median", 1e3, "broadcast 0.366 ms, the loop\n   {:.3f} ms, einsum 0.054 ms"),
    ("LESSONS.md", "times the\n   checkpointed step at 3.58 ms", "h200.json", "02_autograd_memory/headline/variants/checkpointed/median",
     1e3, "times the\n   checkpointed step at {:.2f} ms"),
    ("LESSONS.md", "PseudoLinear 68.9 µs at batch 256", "h200.json", "04_launch_overhead/sweeps/batch/variants/PseudoLinear/median/0",
     1e6, "PseudoLinear {:.1f} µs at batch 256"),
    ("LESSONS.md", "pre-allocate and fill 2.11 ms", "h200.json",
     "06_data_movement/headline/variants/preallocate + fill/median", 1e3, "pre-allocate and fill {:.2f} ms"),
    ("LESSONS.md", "6.85 µs for `a + b`", "h200.json", "06_data_movement/inplace/a + b (new output)/median", 1e6,
     "{:.2f} µs for `a + b`"),
    ("LESSONS.md", "20.5 µs per element over 100", "h200.json", "06_data_movement/elementwise/per_element", 1e6,
     "{:.1f} µs per element over 100"),
    ("LESSONS.md", "worst 1.09 (forward)", "amd-epyc.json", "03_grouped_linear/paired/forward/ratios/1/0", 1, "worst {:.2f} (forward)"),
    ("LESSONS.md", "367 for the original, 346 after the GEMM\n   fix, 211 after GroupedLinear, 80 with every fix",
     "h200.json", "07_capstone/headline/variants/original/launches", 1,
     "{:.0f} for the original, 346 after the GEMM\n   fix, 211 after GroupedLinear, 80 with every fix"),
    ("LESSONS.md", "to 1.8 MiB after the\n   fused chains and 9.5 MiB", "h200.json", "07_capstone/waterfall/stages/+ fused/peak_bytes",
     2 ** -20, "to {:.1f} MiB after the\n   fused chains and 9.5 MiB"),
    ("LESSONS.md", "then GroupedLinear\n   1.60×", "h200.json", "07_capstone/waterfall/ratios/+ gemm -> + grouped/median", 1,
     "then GroupedLinear\n   {:.2f}×"),
]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def kit_commit() -> str:
    """The commit whose notebook outputs the kit read (LESSONS.md: 'read at commit abc1234')."""
    m = re.search(r"read at commit ([0-9a-f]{7,40})", (KIT / "LESSONS.md").read_text())
    if not m:
        raise ValueError("workshop/LESSONS.md names no commit ('read at commit <hash>') for the notebooks it quotes")
    return m.group(1)


def notebook(stem: str, commit: str | None = None) -> dict | None:
    """The notebook (its JSON) as it is now, or at `commit` (None where git or that commit is not here)."""
    folder = "notebooks/solutions" if stem.endswith("_solution") else "notebooks"
    if commit is None:
        return json.loads((ROOT / folder / f"{stem}.ipynb").read_text())
    text = _git("show", f"{commit}:{folder}/{stem}.ipynb")
    return json.loads(text) if text else None


def cell_texts(nb: dict) -> list[str]:
    """Each cell's source and its text outputs, as one string."""
    out = []
    for cell in nb["cells"]:
        parts = ["".join(cell.get("source", ""))]
        for o in cell.get("outputs", []):
            parts.append("".join(o.get("text", "")))
            parts.append("".join(o.get("data", {}).get("text/plain", "")))
        out.append("\n".join(parts))
    return out


def run_all_seconds(nb: dict) -> float:
    """Restart & Run All as committed: the first cell's start to the last cell's end (metadata.execution)."""
    def t(s: str) -> datetime:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))

    spans = [(t(e["iopub.execute_input"]), t(e["shell.execute_reply"]))
             for c in nb["cells"] if (e := c.get("metadata", {}).get("execution"))]
    if not spans:
        raise ValueError("the notebook carries no execution timestamps")
    return (max(b for _, b in spans) - min(a for a, _ in spans)).total_seconds()


def _at(data, path: str):
    for key in path.split("/"):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def check_notebook_quotes(commit: str) -> list[str]:
    problems, cache = [], {}
    for page, phrase, stem, pattern, fact in NOTEBOOK_QUOTES:
        if phrase not in (KIT / page).read_text():
            problems.append(f"workshop/{page} no longer quotes {phrase!r} (drop it from check_kit.NOTEBOOK_QUOTES)")
        for when in ([commit, None] if fact else [commit]):
            if (stem, when) not in cache:
                nb = notebook(stem, when)
                cache[stem, when] = cell_texts(nb) if nb is not None else None
            cells = cache[stem, when]
            if cells is None:
                problems.append(f"notebooks/{stem}.ipynb at commit {when}: not found (no git, or that commit)")
            elif not any(re.search(pattern, c, re.S) for c in cells):
                where = "as it is now" if when is None else f"at commit {when}"
                problems.append(f"workshop/{page} quotes {phrase!r}: notebook {stem} {where} has no cell matching "
                                f"{pattern!r}")
    return problems


def check_recorded_quotes() -> list[str]:
    problems = []
    for page, phrase, name, path, scale, fmt in RECORDED_QUOTES:
        value = _at(json.loads((REF / name).read_text())["lessons"], path) * scale
        wrote = fmt.format(value)
        if wrote != phrase:
            problems.append(f"{name} {path} now reads {wrote!r}, the kit quotes {phrase!r}")
        if phrase not in (KIT / page).read_text():
            problems.append(f"workshop/{page} no longer quotes {phrase!r} (drop it from check_kit.RECORDED_QUOTES)")
    return problems


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.strip().startswith(f"| {first_cell}")]


def check_run_all_table(commit: str) -> list[str]:
    """README.md's 'Run All' and 'its solution' rows against each notebook's timestamps at the kit's commit."""
    text = (KIT / "README.md").read_text()
    header = _table_rows(text, "notebook")
    if not header:
        return ["workshop/README.md has no Run All table ('| notebook | 00 | ...')"]
    problems, lessons = [], header[0][1:]
    for label, suffix in (("Run All", ""), ("its solution", "_solution")):
        row = _table_rows(text, label)
        if not row:
            problems.append(f"workshop/README.md's Run All table has no '{label}' row")
            continue
        for lesson, cell in zip(lessons, row[0][1:]):
            stem = next(p.stem for p in (ROOT / "notebooks").glob(f"{lesson}_*.ipynb")) + suffix
            nb = notebook(stem, commit)
            if nb is None:
                problems.append(f"notebooks/{stem}.ipynb at commit {commit}: not found")
                continue
            seconds = run_all_seconds(nb)
            if cell != f"{seconds:.0f} s":
                problems.append(f"{stem} at commit {commit} ran {seconds:.1f} s; workshop/README.md says {cell!r}")
    return problems


def check_recorded_files_table() -> list[str]:
    """README.md's table of measured files against each file's meta (date, threads, load range, lessons)."""
    problems = []
    rows = {r[0].strip("`"): r for r in _table_rows((KIT / "README.md").read_text(), "`")}
    for path in sorted(REF.glob("*.json")):
        meta = json.loads(path.read_text())["meta"]
        if meta.get("kind_of_figures") != "measured":
            continue
        row = rows.get(path.name)
        if row is None:
            problems.append(f"workshop/README.md's recorded files table has no row for {path.name}")
            continue
        cond = meta.get("conditions") or {}
        loads = [x for c in cond.values() for x in c["load_average"]]
        lessons = sorted(k[:2] for k in json.loads(path.read_text())["lessons"] if k != "targets")
        want = {"recorded": meta["date"], "threads": str(meta["threads"]),
                "load average": f"{_num(min(loads))}–{_num(max(loads))}"}
        have = dict(zip(["file", "kind", "machine", "recorded", "threads", "beside", "load average", "lessons"], row))
        for key, value in want.items():
            if have.get(key) != value:
                problems.append(f"{path.name}: README.md says {key} {have.get(key)!r}, its meta says {value!r}")
        if _lesson_list(have.get("lessons", "")) != lessons:
            problems.append(f"{path.name}: README.md says lessons {have.get('lessons')!r}, the file holds {lessons}")
    return problems


def _num(x: float) -> str:
    """1.0 -> '1.0', 6.2 -> '6.2', 4.66 -> '4.66': as the table writes a load average."""
    text = f"{x:.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _lesson_list(text: str) -> list[str]:
    """'00–02, 04–07' -> ['00', '01', '02', '04', '05', '06', '07']."""
    out = []
    for part in text.split(","):
        ends = [int(x) for x in re.findall(r"\d\d", part)]
        if ends:
            out += [f"{i:02d}" for i in range(ends[0], ends[-1] + 1)]
    return out


def problems() -> list[str]:
    commit = kit_commit()
    return (check_notebook_quotes(commit) + check_recorded_quotes() + check_run_all_table(commit)
            + check_recorded_files_table())


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) if found else
          f"every quote holds: {len(NOTEBOOK_QUOTES)} from notebooks (commit {kit_commit()}), "
          f"{len(RECORDED_QUOTES)} from recorded files, the Run All table and the recorded files' table")
    sys.exit(1 if found else 0)
