"""torch.compile in one place: can it run here, what did it capture, what did it cost.

Three questions every lesson that compiles asks, answered once:

* **Can it run?** `problem(device, backend)` feature-detects torch.compile, Dynamo on this
  Python and platform, a working C++ compiler (Inductor's CPU code) or Triton (its GPU code),
  and says in one sentence why not. Nothing here compares version strings.
* **What did it capture?** `record_graphs` compiles with a *recording* backend: Dynamo hands
  it the FX graph (and, with `aten=True`, AOTAutograd's forward and backward graphs) and the
  graph runs as it is. No code generation and no compiler, so it is cheap, and the op lists
  are the same on every device, so notebooks can show them under nbval.
* **What did it cost?** `compile_cold` times the first call (tracing plus code generation)
  on its own, so a compile is reported, never hidden in a warm-up; the steady state is then
  timed with the course harness like any other function. With `capture_code=True` it also
  keeps Inductor's generated source: `kernels` counts its kernels and `kernel_excerpt` shows
  the first one, shortened.

No lesson is imported here.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch

from .compile_notice import announce
from .display import count
from .hardware import synchronize

# --- can it run? -----------------------------------------------------------------------------------


def _cxx_candidates() -> list[str]:
    """The compilers Inductor would try for CPU code, in its order (CXX first)."""
    if sys.platform == "win32":
        return [os.environ.get("CXX", "cl")]
    default = "clang++" if sys.platform == "darwin" else "g++"
    return list(dict.fromkeys([os.environ.get("CXX", default), default, "c++", "clang++"]))


@functools.lru_cache(maxsize=1)
def cxx_compiler() -> str | None:
    """A C++ compiler that really compiles a one-line program here, or None. Cached: about 0.3 s once."""
    for cxx in _cxx_candidates():
        path = shutil.which(cxx)
        if not path:
            continue
        if sys.platform == "win32":  # cl.exe takes other flags; Inductor itself only checks that it exists
            return path
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "probe.cpp")
            with open(src, "w") as f:
                f.write("int main() { return 0; }\n")
            try:
                done = subprocess.run([path, src, "-o", os.path.join(tmp, "probe")], capture_output=True,
                                      timeout=60)
            except (OSError, subprocess.SubprocessError):
                continue
            if done.returncode == 0:
                return path
    return None


def _dynamo_problem() -> str | None:
    if not callable(getattr(torch, "compile", None)):
        return f"torch {torch.__version__} has no torch.compile (it arrived in 2.0); upgrade torch to compile."
    try:
        from torch._dynamo.eval_frame import check_if_dynamo_supported
    except ImportError:
        return None
    try:
        check_if_dynamo_supported()
    except Exception as err:  # its message names the unsupported Python or platform
        return f"torch.compile cannot run on this Python/platform ({err})."
    return None


def problem(device: torch.device | str = "cpu", backend: str = "inductor") -> str | None:
    """Why `torch.compile(backend=backend)` cannot run on `device` here, or None if it should.

    A recording backend (any callable) needs only Dynamo; Inductor also needs a C++ compiler
    for CPU code and Triton (on a GPU of compute capability 7.0 or newer) for CUDA code.
    """
    why = _dynamo_problem()
    if why or backend != "inductor":
        return why
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "Inductor writes Triton kernels for a GPU and Triton is not installed (`pip install triton`)."
        major, _minor = torch.cuda.get_device_capability(dev)
        if major < 7:
            return f"Inductor's Triton kernels need compute capability 7.0 or newer; this GPU has {major}.x."
        return None
    if cxx_compiler() is None:
        hint = ("install the Visual Studio C++ build tools and run from their developer prompt"
                if sys.platform == "win32" else "install g++ (e.g. `apt install g++`) or set CXX")
        return f"Inductor compiles C++ for the CPU and no working C++ compiler was found; {hint}."
    return None


def default_backend(device: torch.device | str) -> str:
    """Inductor on a GPU. On a CPU, Inductor's decompositions and partitioner without its C++ code
    generator (`aot_eager_decomp_partition`): what it saves and fuses-to-be, at a fraction of the cost."""
    return "inductor" if torch.device(device).type == "cuda" else "aot_eager_decomp_partition"


def reset() -> None:
    """Forget every compiled graph, so the next compile starts from scratch (not from Dynamo's cache)."""
    fn = getattr(getattr(torch, "compiler", None), "reset", None) or torch._dynamo.reset
    fn()


# EagerWatch (the watchers' dispatch mode: a compiled function runs eagerly under it, on that thread only, and stays
# compiled) lives in eager_watch.py; its home was here, and the watchers import it from here.
from .eager_watch import EagerWatch  # noqa: E402


# --- what did it capture? (a recording backend: no code generation) --------------------------------


@dataclass
class Graph:
    """One captured FX graph: its kind and the ops it calls, in order."""

    kind: str  # "dynamo" (torch-level), "forward" or "backward" (aten-level, from AOTAutograd)
    ops: list[str]
    code: str  # the graph as Python, as FX prints it

    def __str__(self) -> str:
        return f"{self.kind} graph, {count(len(self.ops), 'op')}: {', '.join(self.ops)}"


@dataclass
class Captured:
    graphs: list[Graph] = field(default_factory=list)
    problem: str | None = None
    seconds: float = 0.0

    def of_kind(self, kind: str) -> list[Graph]:
        return [g for g in self.graphs if g.kind == kind]

    @property
    def breaks(self) -> int:
        """Graph breaks: torch-level graphs beyond the first (Dynamo split the function)."""
        return max(len(self.of_kind("dynamo")) - 1, 0)

    def summary(self) -> str:
        """One line a graph. Deterministic (no timings, no addresses), so nbval can compare it."""
        if self.problem:
            return f"No graph recorded: {self.problem}"
        lines = [str(g) for g in self.graphs]
        lines.append(f"graph breaks: {self.breaks}")
        return "\n".join(lines)


def _op_name(node) -> str:
    target = node.target
    name = getattr(target, "__name__", None) or str(target)
    packet = getattr(target, "overloadpacket", None)  # aten ops: "mul.Tensor" -> "mul"
    if packet is not None:
        name = packet.__name__
    return name


def _ops_of(gm) -> list[str]:
    return [_op_name(n) for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


def record_graphs(fn, *inputs, aten: bool = False, backward: bool = False, dynamic: bool = False) -> Captured:
    """Compile `fn` with a recording backend, call it once on `inputs`, and return the graphs.

    aten: also go through AOTAutograd and record the aten-level forward graph (what Inductor
        would fuse), and with `backward=True` call `.sum().backward()` to record the backward one.
    Never raises for a platform that cannot trace: `Captured.problem` says why.
    """
    rec = Captured(problem=_dynamo_problem())
    if rec.problem:
        return rec

    def keep(kind):
        def compiler(gm, _example_inputs):
            rec.graphs.append(Graph(kind, _ops_of(gm), gm.code.strip()))
            return _boxed(gm.forward)

        return compiler

    def dynamo_backend(gm, example_inputs):
        rec.graphs.append(Graph("dynamo", _ops_of(gm), gm.code.strip()))
        if not aten:
            return gm.forward
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))(gm, example_inputs)

    t0 = time.perf_counter()
    try:
        compiled = torch.compile(fn, backend=dynamo_backend, dynamic=dynamic)
        out = compiled(*inputs)
        if backward:
            out.sum().backward()
    except Exception as err:  # a construct Dynamo cannot trace, an old torch: say so
        rec.problem = f"tracing failed ({type(err).__name__}: {_first_line(err)})"
    rec.seconds = time.perf_counter() - t0
    return rec


# --- what did it cost? ------------------------------------------------------------------------------


@dataclass
class Compiled:
    """A compiled function, the cost of its first (cold) call, and Inductor's generated code."""

    fn: object  # the compiled callable, or None when it could not compile
    backend: str
    cold_s: float = 0.0  # the first call: tracing, code generation (and the C++/Triton compiler)
    problem: str | None = None
    code: list[str] = field(default_factory=list)  # Inductor's generated modules (capture_code=True)

    @property
    def ok(self) -> bool:
        return self.fn is not None and self.problem is None

    def __str__(self) -> str:
        if self.fn is not None and self.problem:  # compiled, then failed (at another shape, say)
            return (f"torch.compile (backend {self.backend!r}) compiled in {self.cold_s:.1f} s, then: "
                    f"{self.problem}")
        if not self.ok:
            return f"torch.compile was not run: {self.problem}"
        return f"torch.compile (backend {self.backend!r}): first call, tracing and compiling, took {self.cold_s:.1f} s"


# Seconds an explorer counts for a compile it has not seen here (`Variant.prepare_budget`; then what it took). The
# H200 run (2026-11-26): 0.9 s (04's PseudoLinear), 2.9 s (03's loop), 5.8 s (05's reduce-overhead step).
COMPILE_BUDGET_S = 10.0


def compile_cold(fn, *inputs, backend: str = "inductor", dynamic: bool | None = False, step=None,
                 capture_code: bool = False, mode: str | None = None, busy_s: float | None = None) -> Compiled:
    """Compile `fn` and time its first call on `inputs` apart from anything else, announced first (`announce`).

    step: how one call is made, `step(compiled, *inputs)` (e.g. forward and backward); default
        `compiled(*inputs)`. With a step that runs backward, the backward graph compiles too.
    capture_code: keep Inductor's generated source (Inductor only; a private hook, feature-detected).
    busy_s: this compile's seconds on a busy laptop, measured, for the announcement (`compile_notice`).
    Never raises: a missing compiler or a failed compile comes back as `problem`, a sentence.
    """
    dev = _device_of(inputs)
    out = Compiled(None, backend if isinstance(backend, str) else getattr(backend, "__name__", "custom"))
    out.problem = problem(dev, backend) if isinstance(backend, str) else _dynamo_problem()
    if out.problem:
        return out
    try:
        kwargs = {"backend": backend, "dynamic": dynamic}
        if mode:
            kwargs["mode"] = mode
        compiled = torch.compile(fn, **kwargs)

        def first_call():
            return step(compiled, *inputs) if step else compiled(*inputs)

        announce(getattr(fn, "__name__", "a function"), out.backend, dev, busy_s)
        t0 = time.perf_counter()
        if capture_code and backend == "inductor":
            out.code = _run_and_get_code(first_call)
        else:
            first_call()
        synchronize(dev)
        out.cold_s = time.perf_counter() - t0
        out.fn = compiled
    except Exception as err:  # no compiler after all, a lowering bug, an unsupported op: explain
        out.problem = f"torch.compile failed here ({type(err).__name__}: {_first_line(err)})"
    return out


def _run_and_get_code(call) -> list[str]:
    """Run `call()` and return the modules Inductor generated (empty where the hook is missing).

    Inductor's `run_and_get_code` resets Dynamo first (a cached graph would not be generated
    again), so every earlier compiled function recompiles on its next call.
    """
    try:
        from torch._inductor.utils import run_and_get_code
    except ImportError:
        call()
        return []
    _result, codes = run_and_get_code(call)
    return list(codes)


# --- reading Inductor's generated code ------------------------------------------------------------

_KERNEL_MARKERS = ("async_compile.cpp_pybinding(", "async_compile.cpp(", "async_compile.triton(")


def kernels(code: list[str] | str) -> dict[str, list[str]]:
    """Kernels in Inductor's generated modules: {"generated": names, "library": extern calls}.

    Generated kernels are the fused loops Inductor wrote (C++ on a CPU, Triton on a GPU);
    library calls are GEMMs and the like it hands to a vendor library (extern_kernels.mm ...).
    """
    text = code if isinstance(code, str) else "\n".join(code)
    generated, library = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if any(m in stripped for m in _KERNEL_MARKERS) and "=" in stripped:
            generated.append(stripped.split("=", 1)[0].strip())
        elif "extern_kernels." in stripped and "(" in stripped and not stripped.startswith(("from", "import")):
            library.append(stripped.split("extern_kernels.", 1)[1].split("(", 1)[0])
    return {"generated": list(dict.fromkeys(generated)), "library": library}


def kernel_excerpt(code: list[str] | str, max_lines: int = 24) -> str:
    """The first generated kernel, cut to what it computes: its signature, its loops, the
    arithmetic on its temporaries and the first store (the rest is boilerplate and tail loops)."""
    text = code if isinstance(code, str) else "\n".join(code)
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if any(m in line for m in _KERNEL_MARKERS)), None)
    if start is None:
        return "(no generated kernel found)"
    keep = [lines[start].split("=", 1)[0].strip() + ":"]
    for line in lines[start + 1:]:
        stripped = line.strip()
        if stripped.startswith(("\'\'\'", '"""')) or (keep[1:] and stripped.startswith("def ")):
            break  # the end of the kernel's source string
        if any(k in stripped for k in ("kernel(", "for(", "for (", "tmp", "store(", "tl.load", "tl.store")):
            keep.append(line.rstrip())
        if "store(" in stripped:
            break
    if len(keep) > max_lines:
        keep = keep[: max_lines - 1] + [f"    ... ({len(keep) - max_lines + 1} more lines)"]
    return "\n".join(keep)


# --- helpers --------------------------------------------------------------------------------------


def _boxed(fn):
    """AOTAutograd calls its compilers' results with one list of arguments ("boxed")."""
    try:
        from torch._functorch.aot_autograd import make_boxed_func
    except ImportError:
        return fn
    return make_boxed_func(fn)


def _device_of(inputs) -> torch.device:
    for t in inputs:
        if isinstance(t, torch.Tensor):
            return t.device
    return torch.device("cpu")


def _first_line(err: BaseException) -> str:
    """The error's first line; when torch wraps the real error (BackendCompilerFailed says
    "backend='x' raised:"), the wrapped error's line too."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()] or [""]
    text = lines[0]
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[1]}"
    return text[:240]


__all__ = ["problem", "cxx_compiler", "default_backend", "reset", "EagerWatch", "record_graphs", "Captured", "Graph",
           "compile_cold", "announce", "Compiled", "kernels", "kernel_excerpt"]
