"""CUDA graphs: what in a function capture would refuse or freeze, and (on a GPU) capture and replay done right.

A CUDA graph records the kernels one call launches and replays them with one launch. It records
kernels, not Python: whatever the host did during capture (read a value, pick a branch, copy
from host memory, use a Python number) is either refused during capture or frozen into every
replay. `graph_check(fn, *example_inputs)` runs `fn` once on any device (CPU and `meta` included),
watching at PyTorch's dispatcher and a few Python entry points, and lists what it sees:

- host syncs (`.item()`, `.cpu()`, `.tolist()`, `print(t)`, `if t:`, ops that read on the host
  inside ATen, syncs.CUDA_KERNEL_SYNCS) and ops whose output size depends on the data (`nonzero`,
  `x[mask]`, `unique`, `masked_select`): capture refuses them ("operation not permitted when stream
  is capturing");
- copies from host memory inside the function: `torch.tensor(data, device=...)`, and a tensor made on
  the host (a factory without `device=`) then moved with `.to(device)` / `.cuda()` (a blocking
  pageable copy: a sync); `torch.cuda.synchronize()`;
- frozen values: a 0-dim host tensor meeting device tensors (CUDA passes it to the kernel by value:
  `x * torch.tensor(2.0)` captures, with 2.0 baked in), Python numbers among the arguments,
  optimizers' float learning rates, numbers from Python's `random`, and another call's other path
  (`also=`); all capture, and replays keep what capture saw;
- shape changes between calls (`also=`), and optimizers with a `capturable` option built without it.

What it cannot see is printed with every verdict (`BLIND_SPOTS`): it runs on a CPU, not under CUDA.

The rest of the module needs a real GPU (or the test suite's simulated one): `capture` (static
inputs, warm-up on a side stream, the graph's private memory pool measured), `try_capture`
(a failure explained in one sentence), `recover_from_failed_capture` (what a failed capture leaves
behind, undone: the stream, the allocator's pool, the CUDA generator's capture mode) and feature detection.
Facts relied on: PyTorch's "CUDA Graphs" notes (docs/source/notes/cuda.rst) and
torch/cuda/graphs.py; the optimizer check mirrors `_cuda_graph_capture_health_check` in
torch/optim/optimizer.py; CUDA's "CPU scalar" kernel arguments: TensorIterator's `is_cpu_scalar`
(a 0-dim CPU operand of a CUDA op is read on the host and passed by value).
graph_check and its report live in graph_hazards.py; this module re-exports them.
"""
from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass

import torch

from .grading import TimeLimit
from .graph_hazards import (_FACTORIES, _HERE, _RANDOM, _SHAPE_OPS, BLIND_SPOTS, CLEAN, FAILS,  # noqa: F401
                            FROZEN, KINDS, GraphReport, Hazard, _default_device_is_cpu, _moves_to_device,
                            _one_call, _signature, _tensors, _user_line, _Watch, _watch_python,
                            _watch_syncs_and_optimizers, graph_check)


# --- on a GPU: capture and replay ---------------------------------------------------------------


def has_graphs() -> bool:
    """torch.cuda.CUDAGraph can be used here (a CUDA build with a GPU; it raises on a CPU-only build)."""
    return torch.cuda.is_available() and hasattr(torch.cuda, "CUDAGraph") and hasattr(torch.cuda, "graph")


def has_graphed_callables() -> bool:
    return has_graphs() and hasattr(torch.cuda, "make_graphed_callables")


def graphed_callables_problem() -> str | None:
    """Why torch.cuda.make_graphed_callables cannot be used here, or None."""
    if not has_graphs():
        return no_graphs_reason()
    if not hasattr(torch.cuda, "make_graphed_callables"):
        return (f"This torch ({torch.__version__}) has no torch.cuda.make_graphed_callables: upgrade torch "
                "(the course needs 2.9 or newer); a graph captured by hand (torch.cuda.graph) still works.")
    return None


def no_graphs_reason() -> str:
    if not torch.cuda.is_available():
        return ("No CUDA GPU here: CUDA graphs record GPU kernel launches, so there is nothing to capture. "
                "The model and the recorded figures below stand in.")
    if not hasattr(torch.cuda, "CUDAGraph") or not hasattr(torch.cuda, "graph"):
        return f"This torch ({torch.__version__}) has no torch.cuda.CUDAGraph: upgrade torch to use CUDA graphs."
    return ""


def _memory() -> int:
    return torch.cuda.memory_reserved()


@dataclass
class Captured:
    """One captured graph, its static inputs and outputs. `replay(*inputs)` copies the inputs into
    the static buffers and replays; it returns the static outputs, which the next replay
    overwrites: clone what you keep."""

    graph: object
    static_inputs: tuple
    static_outputs: object
    capture_seconds: float
    pool_bytes: int  # memory the capture reserved (the graph's private pool), measured from an emptied cache
    pool: object = None  # the private pool's handle (torch.cuda.graph_pool_handle), to share it with another graph

    def replay(self, *inputs):
        with torch.no_grad():  # the static inputs may be leaves that require grad
            for dst, src in zip(self.static_inputs, inputs):
                if isinstance(dst, torch.Tensor) and src is not dst:
                    if tuple(src.shape) != tuple(dst.shape):
                        raise ValueError(f"A graph has static shapes: captured with {tuple(dst.shape)}, "
                                         f"called with {tuple(src.shape)}. Capture one graph per shape.")
                    dst.copy_(src)
        self.graph.replay()
        return self.static_outputs


def _static_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy the graph owns, keeping requires_grad and a gradient already there (an optimizer's input)."""
    out = t.detach().clone().requires_grad_(t.requires_grad)
    if t.grad is not None:
        out.grad = t.grad.detach().clone()
    return out


def capture(fn, *inputs, warmup: int = 3, copy_inputs: bool = True) -> Captured:
    """Capture `fn(*inputs)` as PyTorch's notes describe: static copies of the inputs (copy_inputs=False:
    the inputs themselves are the static buffers), a few warm-up calls on a side stream (lazy
    initialisation, autograd's buffers), then capture on that stream into a private pool.
    Raises what capture raises, after undoing what a failed capture leaves behind
    (`recover_from_failed_capture`); `try_capture` turns the error into a sentence. What `fn` reads
    besides its inputs (a model's weights, an optimizer's state) is read at its address by every
    replay: keep it alive as long as the graph."""
    if not has_graphs():
        raise ValueError(no_graphs_reason())
    static = tuple(_static_copy(t) if copy_inputs and isinstance(t, torch.Tensor) else t for t in inputs)
    caller = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(caller)
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn(*static)
    caller.wait_stream(side)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # as torch.cuda.graph does on entry, so the pool is measured from an emptied cache
    before = _memory()
    pool = torch.cuda.graph_pool_handle()  # named here, so that a failed capture's pool can be closed
    graph = torch.cuda.CUDAGraph()
    t0 = time.perf_counter()
    failed = None
    with warnings.catch_warnings(record=True) as seen:
        try:
            with torch.cuda.graph(graph, pool=pool, stream=side):
                out = fn(*static)
        except BaseException as err:
            failed = err
            with contextlib.suppress(Exception):  # the capture's own error is the one to see
                recover_from_failed_capture(caller, side, pool, graph)
    _warn_again(seen, drop=_EMPTY_GRAPH if failed is not None else None)
    if failed is not None:
        raise failed
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return Captured(graph, static, out, seconds, _memory() - before, pool)


# What CUDAGraph::capture_end warns when a capture recorded no kernel (aten/src/ATen/cuda/CUDAGraph.cpp). After a
# failure torch raised before CUDA saw anything (a pageable host copy: Copy.cu's "Cannot copy between CPU and CUDA
# tensors during CUDA graph capture"; an optimizer's health check), that empty graph is the failure's echo, not news.
_EMPTY_GRAPH = "The CUDA Graph is empty"


def _warn_again(seen, drop: str | None = None) -> None:
    """Re-issue the warnings caught around a capture (the caller's filters apply as usual), less those starting
    with `drop`."""
    for w in seen:
        if drop is None or not str(w.message).startswith(drop):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def recover_from_failed_capture(stream, capture_stream=None, pool=None, graph=None) -> list[str]:
    """Undo what a failed capture leaves behind; returns what it did, a sentence each.

    When an op the capture refuses runs (`.item()`, say), CUDA invalidates the capture, and
    `CUDAGraph::capture_end` (aten/src/ATen/cuda/CUDAGraph.cpp) raises at cudaStreamEndCapture, before:
    - `torch.cuda.graph.__exit__` makes the stream from before the capture current again (torch/cuda/graphs.py):
      the capture's side stream stays current;
    - the caching allocator's endAllocateToPool: the private pool stays "capture under way", so the
      allocator defers its event processing and the pool's memory is never released;
    - the generators' capture_epilogue: on torch 2.9 to 2.12 the default CUDA generator stays in capture
      mode (CUDAGeneratorState::capturing_), and the next random op outside capture raises "Offset increment
      outside graph capture encountered unexpectedly" (2.13 keeps per-capture RNG state instead).
    stream: the stream current before the capture; capture_stream, pool, graph: the capture's, where known
    (a capture made without pool= has a pool that Python cannot name, so it cannot be closed here)."""
    done = []
    if capture_stream is not None and graph is not None:
        with torch.cuda.stream(capture_stream):
            if torch.cuda.is_current_stream_capturing():  # capture_end failed before ending the capture
                with contextlib.suppress(Exception):
                    graph.capture_end()
                done.append("ended the capture still under way")
    if torch.cuda.current_stream() != stream:
        torch.cuda.set_stream(stream)
        done.append("made the stream from before the capture current again")
    if pool is not None and _close_pool(pool):
        done.append("closed the capture's private pool and released it")
    _clear_generator_capture_mode(capture_stream or torch.cuda.Stream())
    done.append("ran an empty capture, whose epilogue takes the CUDA generator out of capture mode if the failure "
                "left it there")
    with contextlib.suppress(Exception):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return done


def _close_pool(pool) -> bool:
    """End a failed capture's allocation to `pool` and drop its use (CUDACachingAllocator's endAllocateToPool
    and releasePool, the calls torch.cuda.use_mem_pool makes). False where capture_end got that far itself
    (the graph object then releases the pool) or this torch lacks the calls (feature-detected)."""
    end, release = (getattr(torch._C, n, None) for n in ("_cuda_endAllocateToPool", "_cuda_releasePool"))
    if isinstance(end, type) or not callable(end) or isinstance(release, type) or not callable(release):
        return False  # a CPU-only build's placeholders are classes
    device = torch.cuda.current_device()
    try:
        end(device, pool)
    except RuntimeError:  # "not currently recording to mempool_id"
        return False
    release(device, pool)
    return True


def _clear_generator_capture_mode(stream) -> None:
    """An empty capture: capture_begin's prologue and a capture_end that succeeds, whose epilogue clears
    the default generator's capture flag (torch 2.9 to 2.12; harmless on 2.13). Only public calls."""
    g = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(), torch.cuda.stream(stream):
        warnings.filterwarnings("ignore", message=_EMPTY_GRAPH)
        g.capture_begin()
        g.capture_end()
    g.reset()


def _root_cause(err: BaseException) -> BaseException:
    """The first error of a chain: capture_end's "operation failed due to a previous error during capture"
    carries the op's own error as its context."""
    while err.__context__ is not None and err.__context__ is not err:
        err = err.__context__
    return err


def try_capture(fn, *inputs, warmup: int = 3) -> tuple[Captured | None, str]:
    """(Captured, "") or (None, one sentence saying why capture failed and which hazard caused it).
    A failed capture is cleaned up (`recover_from_failed_capture`), so later cells still run."""
    try:
        return capture(fn, *inputs, warmup=warmup), ""
    except TimeLimit:  # a checker's time limit: end cleanly, then let the checker say so
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        raise
    except Exception as err:
        root = _root_cause(err)
        first = (str(root).strip().splitlines() or [type(root).__name__])[0][:160]
    found = graph_check(fn, *inputs)
    cause = f" The likely cause: {found.hazards[0].kind}, {found.hazards[0].what} [{found.hazards[0].where}]." \
        if found.hazards else ""
    return None, f"Capture failed ({first}).{cause}"


def reduce_overhead_problem(device="cuda") -> str | None:
    """Why torch.compile(mode="reduce-overhead") cannot be used here, or None. On a CPU it runs,
    but records no graphs at all (CUDA graphs are a GPU feature)."""
    from . import compiling

    if torch.device(device).type != "cuda":
        return "On a CPU, mode='reduce-overhead' compiles but uses no CUDA graphs: there is nothing to replay."
    if not hasattr(torch, "compile") or not hasattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin"):
        return (f"This torch ({torch.__version__}) has no torch.compile with cudagraph_mark_step_begin, so no "
                "mode='reduce-overhead': upgrade torch (the course needs 2.9 or newer).")
    return compiling.problem(device)


__all__ = ["Hazard", "GraphReport", "KINDS", "BLIND_SPOTS", "FAILS", "FROZEN", "CLEAN", "graph_check", "has_graphs",
           "has_graphed_callables", "graphed_callables_problem", "no_graphs_reason", "Captured", "capture",
           "try_capture", "recover_from_failed_capture", "reduce_overhead_problem"]
