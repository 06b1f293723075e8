"""compiling.EagerWatch (eager_watch.py): under a watcher a compiled function runs eagerly on the watcher's thread
only, the watcher sees its eager aten ops, and every other thread's compiled calls stay compiled meanwhile.

A counting backend (tests/stays_compiled.py) tells a run of the compiled graph from an eager run, with no code
generation: cheap on a CPU. Each test compiles a function of its own (Dynamo keeps what it learns per code object)."""
import threading

import pytest
import torch

from lessons_lib.compiling import EagerWatch

from .stays_compiled import counted


class _Seen(EagerWatch):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_a_compiled_call_on_another_thread_stays_compiled_while_a_watcher_is_active():
    compiled, calls = counted(lambda x: x * 2 + 1)
    x = torch.ones(3)
    compiled(x)  # compiled outside any watch
    before, seen_by_worker = len(calls), []
    watch = _Seen()

    def worker():
        compiled(x)
        seen_by_worker.append(len(calls))

    with watch:
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        watched = compiled(x)  # on the watcher's thread: eager
    assert seen_by_worker == [before + 1], "the worker's compiled call ran eagerly while a watcher observed"
    assert len(calls) == before + 1, "the watcher's own call ran the compiled graph"
    assert {"mul", "add"} <= set(watch.ops), watch.ops  # what the watcher sees: the eager aten ops
    assert torch.equal(watched, x * 2 + 1)
    compiled(x)
    assert len(calls) == before + 2, "the function no longer runs compiled after the watch"


def _nested_and_concurrent() -> dict:
    """Two watchers nested on this thread and one on another, at once; then a new function compiled after them."""
    from torch._dynamo import eval_frame

    before = eval_frame._stance
    compiled, calls = counted(lambda x: x - 3)
    x = torch.ones(2)
    compiled(x)
    n = len(calls)
    inner_done, outer_go = threading.Event(), threading.Event()

    def other_watcher():
        with _Seen():
            compiled(x)  # eager on this thread too
            inner_done.set()
            outer_go.wait(10)

    t = threading.Thread(target=other_watcher)
    with _Seen():
        with _Seen():
            t.start()
            inner_done.wait(10)
        compiled(x)
    compiled(x)  # the other watcher is still active on its thread: this thread compiles all the same
    outer_go.set()
    t.join()
    fresh, fresh_calls = counted(lambda x: x * 7)
    fresh(x)
    from torch.utils import _python_dispatch as pd

    return {"compiled_calls": len(calls) - n, "stance_restored": eval_frame._stance is before,
            "fresh_compiles": len(fresh_calls), "mode_flags": [pd._is_in_torch_dispatch_mode,
                                                               pd._is_in_non_infra_torch_dispatch_mode]}


@pytest.mark.own_process
def test_nested_and_concurrent_watchers_leave_dynamos_stance_as_they_found_it():
    # In a fresh process: before eager_watch put torch's process-wide "a dispatch mode is active" flags back, this
    # sequence left them True on torch 2.9 (two threads' modes exit out of order), whose Dynamo then compiled nothing
    # more in the process: every later compiled-function test of the run failed. A fresh process keeps it to one.
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = "import json; from tests.test_eager_watch import _nested_and_concurrent as f; print(json.dumps(f()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["compiled_calls"] == 1 and got["stance_restored"], got
    assert got["fresh_compiles"] == 1 and got["mode_flags"] == [False, False], got


def test_a_function_first_called_on_another_thread_beside_a_watcher_is_compiled_and_stays_so():
    # torch 2.9's Dynamo asks a process-wide flag whether a dispatch mode is active and skips the code for good:
    # an explorer's worker calling a compiled variant for the first time beside a trace ran it eagerly ever after
    fresh, calls = counted(lambda x: x * 5 - 2)
    x = torch.ones(3)
    with _Seen():
        t = threading.Thread(target=fresh, args=(x,))
        t.start()
        t.join()
    assert len(calls) == 1, "the worker's first call ran eagerly beside the watcher"
    fresh(x)
    assert len(calls) == 2, "the function no longer runs compiled after the watch"
