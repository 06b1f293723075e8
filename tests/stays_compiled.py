"""Does a watcher leave a torch.compile'd function compiled? Dynamo skips a frame it first meets under a
TorchDispatchMode and keeps that skip for the code object (torch/_dynamo/convert_frame.py), so one watch made
lesson 04's fused variant run eagerly for good on the H200 ("fused 1.00x eager"). compiling.EagerWatch is the
fix every watcher shares; each watcher's test calls `check` with a function of its own (the skip is kept per
code object, so two tests must never share one).

The backend counts each run of the compiled graph and generates no code: cheap on a CPU."""
import torch


def counted(fn):
    """`fn` compiled with a backend that counts the runs of its graph: (compiled, calls)."""
    calls = []

    def backend(gm, _example_inputs):
        def run(*args):
            calls.append(1)
            return gm.forward(*args)

        return run

    return torch.compile(fn, backend=backend), calls


def check(watch, fn, *args):
    """Compile `fn`, meet it first under `watch(compiled)`, then call it: the compiled graph must run."""
    compiled, calls = counted(fn)
    watch(compiled)
    before = len(calls)
    compiled(*args)
    assert len(calls) == before + 1, "the compiled graph no longer runs after the watch: Dynamo skipped its code"
