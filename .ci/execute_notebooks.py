"""Execute notebooks top to bottom with nbclient (Restart & Run All), one at a time.

    python .ci/execute_notebooks.py notebooks/05_cuda_graphs.ipynb [more.ipynb ...] [--inplace] [--out DIR]
                                    [--timeout S] [--budget S] [--allow-errors]

Each notebook runs in a fresh kernel with its own folder as the working directory, as JupyterLab
runs it. One line per notebook: ok or FAILED, seconds, the slowest cell, and the first error.
--inplace writes the executed notebook back (what maintainers commit); --out DIR writes it there
instead. --allow-errors keeps going after a failing cell (a validation run sees every cell; the
failures are still reported and the exit status is non-zero). --budget S: no notebook starts after
S seconds; those left are listed as not run. Needs nbclient, nbformat and ipykernel only (no
nbconvert), which is all a GPU machine's image is given.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _errors(nb) -> list[tuple[int, str]]:
    out = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                out.append((i, ANSI.sub("", f"{o.get('ename')}: {o.get('evalue')}")[:300]))
    return out


def run_one(path: Path, dest: Path, timeout: int, allow_errors: bool) -> tuple[bool, str]:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    times: dict[int, float] = {}
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}})
    started: dict[int, float] = {}
    client.on_cell_execute = lambda cell, cell_index: started.__setitem__(cell_index, time.perf_counter())
    client.on_cell_executed = lambda cell, cell_index, execute_reply: times.__setitem__(
        cell_index, time.perf_counter() - started.get(cell_index, time.perf_counter()))
    t0 = time.perf_counter()
    problem = ""
    try:
        client.execute()
    except CellExecutionError as err:
        problem = ANSI.sub("", str(err).strip().splitlines()[-1])[:300]
    except Exception as err:  # a dead kernel, a timeout
        problem = f"{type(err).__name__}: {ANSI.sub('', str(err)).strip().splitlines()[0][:300] if str(err).strip() else ''}"
    seconds = time.perf_counter() - t0
    nbformat.write(nb, dest)
    errs = _errors(nb)
    if errs and not problem:
        problem = f"cell {errs[0][0]}: {errs[0][1]}" + (f" (+{len(errs) - 1} more)" if len(errs) > 1 else "")
    slow = max(times.items(), key=lambda kv: kv[1]) if times else (-1, 0.0)
    ok = not problem
    return ok, (f"{'ok' if ok else 'FAILED'} {path} {seconds:.1f}s slowest cell {slow[0]} {slow[1]:.1f}s"
                + (f" {problem}" if problem else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--inplace", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--timeout", type=int, default=600, help="seconds one cell may take")
    ap.add_argument("--budget", type=float, default=None, help="no notebook starts after this many seconds")
    ap.add_argument("--allow-errors", action="store_true")
    a = ap.parse_args(argv)
    if not a.inplace and a.out is None:
        ap.error("say where the executed notebooks go: --inplace or --out DIR")
    start, status = time.perf_counter(), 0
    for i, path in enumerate(a.notebooks):
        if a.budget is not None and time.perf_counter() - start > a.budget:
            for left in a.notebooks[i:]:
                print(f"NOT RUN {left} (the stage's budget of {a.budget:.0f} s was spent)", flush=True)
            return 1
        dest = path if a.inplace else a.out / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        ok, line = run_one(path, dest, a.timeout, a.allow_errors)
        print(line, flush=True)
        status |= not ok
    return status


if __name__ == "__main__":
    sys.exit(main())
