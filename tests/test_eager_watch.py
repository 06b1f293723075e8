"""compiling.EagerWatch (eager_watch.py): under a watcher a compiled function runs eagerly on the watcher's thread
only, the watcher sees its eager aten ops, and every other thread's compiled calls stay compiled meanwhile.

A counting backend (tests/stays_compiled.py) tells a run of the compiled graph from an eager run, with no code
generation: cheap on a CPU. Each test compiles a function of its own (Dynamo keeps what it learns per code object)."""
import threading

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


def test_nested_and_concurrent_watchers_leave_dynamos_stance_as_they_found_it():
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
    assert len(calls) == n + 1
    assert eval_frame._stance is before
