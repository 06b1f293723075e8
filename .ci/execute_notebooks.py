"""Execute notebooks top to bottom with nbclient (Restart & Run All), one at a time.

    python .ci/execute_notebooks.py notebooks/05_cuda_graphs.ipynb [more.ipynb ...] [--inplace] [--out DIR]
                                    [--timeout S] [--notebook-timeout S] [--budget S] [--allow-errors]

Each notebook runs in a fresh kernel with its own folder as the working directory, as JupyterLab
runs it. One line per notebook: ok or FAILED, seconds, the slowest cell, and the first error.
--inplace writes the executed notebook back (what maintainers commit); --out DIR writes it there
instead. --allow-errors keeps going after a failing cell (a validation run sees every cell; the
failures are still reported and the exit status is non-zero). --notebook-timeout S stops a notebook
after S seconds (STOPPED: the cells run so far keep their outputs, the rest are left as they were).
--budget S: no notebook runs past S seconds from the start (the one running is stopped, STOPPED), and
those left are listed as NOT RUN. Needs nbclient, nbformat and ipykernel only (no nbconvert), which
is all a GPU machine's image is given.
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


def run_one(path: Path, dest: Path, timeout: float, allow_errors: bool,
            deadline: float | None = None, why: str = "") -> tuple[bool, str]:
    """Execute one notebook into `dest`; (ok, its line). deadline (time.monotonic()): the notebook is
    stopped there, whatever cell is running (`why` says whose limit that was)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    def left() -> float:  # a cell's timeout: its own, or what the deadline leaves (never 0: that is "none")
        return timeout if deadline is None else max(0.1, min(timeout, deadline - time.monotonic()))

    times: dict[int, float] = {}
    started: dict[int, float] = {}

    def new_client():
        client = NotebookClient(nbformat.read(path, as_version=4), timeout=timeout,
                                timeout_func=lambda cell: left(), kernel_name="python3", allow_errors=allow_errors,
                                startup_timeout=max(1, min(60, int(left()))), shutdown_kernel="immediate",
                                resources={"metadata": {"path": str(path.parent)}})
        client.on_cell_execute = lambda cell, cell_index: started.__setitem__(cell_index, time.perf_counter())
        client.on_cell_executed = lambda cell, cell_index, execute_reply: times.__setitem__(
            cell_index, time.perf_counter() - started.get(cell_index, time.perf_counter()))
        return client

    client = new_client()
    t0 = time.perf_counter()
    problem, word = "", "FAILED"
    try:
        try:
            client.execute()
        except RuntimeError as err:
            # Two kernels started at once can pick the same TCP port ("Kernel died before replying to
            # kernel_info": ZMQError, address in use; CI's three legs side by side). A kernel that never
            # started ran no cell: start it once more.
            if started or "Kernel died before replying" not in str(err) or left() < 5:
                raise
            client = new_client()
            client.execute()
    except CellTimeoutError:
        cell = max(started) if started else -1
        times[cell] = time.perf_counter() - started.get(cell, t0)
        if deadline is not None and time.monotonic() >= deadline - 0.5:
            word, problem = "STOPPED", f"in cell {cell}: {why or 'its time'} ran out"
        else:
            problem = f"cell {cell} timed out after {timeout:g} s (--timeout)"
    except CellExecutionError as err:
        problem = ANSI.sub("", str(err).strip().splitlines()[-1])[:300]
    except Exception as err:  # a dead kernel, a kernel that did not start in time
        text = ANSI.sub("", str(err)).strip()
        problem = f"{type(err).__name__}: {text.splitlines()[0][:300] if text else ''}"
        if deadline is not None and time.monotonic() >= deadline - 0.5:
            word, problem = "STOPPED", f"{why or 'its time'} ran out ({problem})"
    seconds = time.perf_counter() - t0
    nb = client.nb
    nbformat.write(nb, dest)
    errs = _errors(nb)
    if errs:
        first = f"cell {errs[0][0]}: {errs[0][1]}" + (f" (+{len(errs) - 1} more)" if len(errs) > 1 else "")
        problem = f"{problem}; {first}" if problem and word == "STOPPED" else problem or first
    slow = max(times.items(), key=lambda kv: kv[1]) if times else (-1, 0.0)
    ok = not problem
    return ok, (f"{'ok' if ok else word} {path} {seconds:.1f}s slowest cell {slow[0]} {slow[1]:.1f}s"
                + (f" {problem}" if problem else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--inplace", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--timeout", type=float, default=600, help="seconds one cell may take")
    ap.add_argument("--notebook-timeout", type=float, default=None, help="seconds one notebook may take")
    ap.add_argument("--budget", type=float, default=None, help="seconds all of them may take")
    ap.add_argument("--allow-errors", action="store_true")
    a = ap.parse_args(argv)
    if not a.inplace and a.out is None:
        ap.error("say where the executed notebooks go: --inplace or --out DIR")
    import nbclient  # noqa: F401  (imported before any clock starts: seconds on a busy machine)

    start, status = time.monotonic(), 0
    end = None if a.budget is None else start + a.budget
    for i, path in enumerate(a.notebooks):
        if end is not None and time.monotonic() >= end - 1:
            for left in a.notebooks[i:]:
                print(f"NOT RUN {left} (the budget of {a.budget:g} s was spent)", flush=True)
            return 1
        dest = path if a.inplace else a.out / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        cap = None if a.notebook_timeout is None else time.monotonic() + a.notebook_timeout
        deadline = min((d for d in (cap, end) if d is not None), default=None)
        why = (f"its cap of {a.notebook_timeout:g} s (--notebook-timeout)" if cap is not None and deadline == cap
               else f"the budget of {a.budget:g} s (--budget)" if end is not None else "")
        ok, line = run_one(path, dest, a.timeout, a.allow_errors, deadline, why)
        print(line, flush=True)
        status |= not ok
    return status


if __name__ == "__main__":
    sys.exit(main())
