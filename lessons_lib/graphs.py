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
(a failure explained in one sentence, the CUDA context left usable) and feature detection.
Facts relied on: PyTorch's "CUDA Graphs" notes (docs/source/notes/cuda.rst) and
torch/cuda/graphs.py; the optimizer check mirrors `_cuda_graph_capture_health_check` in
torch/optim/optimizer.py; CUDA's "CPU scalar" kernel arguments: TensorIterator's `is_cpu_scalar`
(a 0-dim CPU operand of a CUDA op is read on the host and passed by value).
graph_check and its report live in graph_hazards.py; this module re-exports them.
"""
from __future__ import annotations

import contextlib
import time
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
    pool_bytes: int  # memory reserved by capture (the graph's private pool), measured

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


def capture(fn, *inputs, warmup: int = 3) -> Captured:
    """Capture `fn(*inputs)` as PyTorch's notes describe: static copies of the inputs, a few
    warm-up calls on a side stream (lazy initialisation, autograd's buffers), then capture.
    Raises what capture raises; `try_capture` turns that into a sentence."""
    if not has_graphs():
        raise ValueError(no_graphs_reason())
    static = tuple(_static_copy(t) if isinstance(t, torch.Tensor) else t for t in inputs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    before = _memory()
    t0 = time.perf_counter()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return Captured(graph, static, out, seconds, _memory() - before)


def try_capture(fn, *inputs, warmup: int = 3) -> tuple[Captured | None, str]:
    """(Captured, "") or (None, one sentence saying why capture failed and which hazard caused it).
    After a failure the CUDA context is checked with a synchronize, so later cells still run."""
    try:
        return capture(fn, *inputs, warmup=warmup), ""
    except TimeLimit:  # a checker's time limit: end cleanly, then let the checker say so
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        raise
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
    with contextlib.suppress(Exception):
        torch.cuda.synchronize()  # the failed capture has ended; the stream is usable again
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


__all__ = ["Hazard", "GraphReport", "KINDS", "BLIND_SPOTS", "FAILS", "FROZEN", "CLEAN", "graph_check", "has_graphs", "has_graphed_callables",
           "graphed_callables_problem", "no_graphs_reason", "Captured", "capture", "try_capture", "reduce_overhead_problem"]
