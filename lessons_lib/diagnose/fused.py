"""Work that CUDA runs fused, as foreach, or compiled, where meta and the CPU run many small ops.

- nn.LSTM, nn.GRU and nn.RNN call torch.lstm / gru / rnn_tanh / rnn_relu; on CUDA these dispatch cuDNN's RNN
  (`_cudnn_rnn`: a few kernels for the whole sequence), while on meta and on the CPU they decompose into a handful
  of ops per time step and layer: one region, one kernel forward and one backward.
- nn.LSTMCell and nn.GRUCell call lstm_cell / gru_cell: on CUDA their two GEMMs, then one fused kernel for the gates
  (`_thnn_fused_lstm_cell`, RNN.cpp's LSTMCell for CUDA inputs): a region whose GEMMs count apart.
- torch.nn.utils.clip_grad_norm_ and clip_grad_value_ run as foreach on CUDA (their foreach=None default,
  `_has_foreach_support`), a loop over the gradients on meta and the CPU: one region, counted as one kernel.
- A function under torch.compile runs eagerly under the course's watchers (compiling.EagerWatch); compiled, its
  GEMMs stay library kernels and Inductor fuses what is between them: a region whose GEMMs count apart and whose
  other ops, forward and backward, count as one kernel between GEMMs.
Left as they are, those ops would read as elementwise chains and a launch-bound step the GPU never runs. So during
the run a torch-function mode marks each such call as a region: its forward ops, and its backward ops (found by the
graph nodes it created: torch._C._current_autograd_node() names the node backward is running), take the phase
"fused", which the detectors leave alone, and costs.kernels counts each region as CUDA runs it. (Scaled dot
product attention is handled apart, by trace.sdpa_as_on_cuda, because meta can run CUDA's kernel for it.)
"""
from __future__ import annotations

import sys

import torch
from torch.overrides import TorchFunctionMode

ONE, APART = "one kernel", "GEMMs apart"  # how costs.kernels counts a region's ops
FUSED_ON_CUDA = {"lstm": ("cuDNN LSTM", ONE), "gru": ("cuDNN GRU", ONE), "rnn_tanh": ("cuDNN RNN", ONE),
                 "rnn_relu": ("cuDNN RNN", ONE), "lstm_cell": ("fused LSTM cell", APART),
                 "gru_cell": ("fused GRU cell", APART)}
_CALLS = {getattr(torch._C._VariableFunctions, name) for name in FUSED_ON_CUDA}
_CLIP = "/torch/nn/utils/clip_grad.py"
_COMPILED = ("/_dynamo/eval_frame.py", "compile_wrapper")


def _python_region(frame, compiled: frozenset = frozenset()) -> tuple | None:
    """(key frame, name, mode) when the torch function called from `frame` runs inside clip_grad_* or a
    torch.compile'd function (its compile_wrapper frame further out, or a frame running the code of a callable
    that was under torch.compile before diagnose copied it: `compiled`), else None."""
    clip = None
    f = frame
    while f is not None:
        code = f.f_code
        name = code.co_filename.replace("\\", "/")
        if name.endswith(_CLIP):
            clip = f  # the outermost frame of clip_grad.py: one region a call
        elif clip is not None:
            return clip, "foreach clip_grad_norm_", ONE
        if code in compiled:
            return f, f"torch.compile'd {code.co_name}()", APART
        if code.co_name == _COMPILED[1] and name.endswith(_COMPILED[0]):
            inner = f.f_locals.get("fn")
            return f, f"torch.compile'd {getattr(inner, '__name__', 'function')}()", APART
        f = f.f_back
    return (clip, "foreach clip_grad_norm_", ONE) if clip is not None else None


def compiled_codes(objects) -> frozenset:
    """The code objects of callables that were under torch.compile (functions, and modules' forward), from the
    objects a copy of the step lists as compiled (names in the list are skipped)."""
    out = set()
    for o in objects:
        fn = type(o).forward if isinstance(o, torch.nn.Module) else getattr(o, "_torchdynamo_orig_callable", o)
        code = getattr(fn, "__code__", None)
        if code is not None:
            out.add(code)
    return frozenset(out)


class FusedOnCuda(TorchFunctionMode):
    """Marks the collector's ops inside a region: `collector.region` is its id meanwhile."""

    def __init__(self, collector, compiled: frozenset = frozenset()):
        super().__init__()
        self.col = collector
        self.compiled = compiled  # code objects of what was under torch.compile (compiled_codes)
        self.nodes: dict = {}  # graph node -> region id: its backward's ops are the region's too
        self.names: dict[int, str] = {}
        self.modes: dict[int, str] = {}
        self._frame = 0  # id of the key frame of the Python region open now (not the frame: it would hold the
        self._frame_region = -1  # stack's locals alive), and that region

    def _open(self, name: str, mode: str) -> int:
        region = len(self.names)
        self.names[region], self.modes[region] = name, mode
        return region

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.col.region is not None:
            return func(*args, **kwargs)
        if func in _CALLS:
            region = self._open(*FUSED_ON_CUDA[func.__name__])
        else:
            found = _python_region(sys._getframe(1), self.compiled)
            if found is None:
                return func(*args, **kwargs)
            frame, name, mode = found
            if id(frame) != self._frame:
                self._frame, self._frame_region = id(frame), self._open(name, mode)
            del frame
            region = self._frame_region
        self.col.region = region
        try:
            out = func(*args, **kwargs)
        finally:
            self.col.region = None
        self._mark(region, args, kwargs, out)
        return out

    def _mark(self, region: int, args, kwargs, out) -> None:
        """The graph nodes between the call's outputs and its inputs: what its backward runs."""
        from torch.utils._pytree import tree_flatten

        stop = {t.grad_fn for t in tree_flatten((args, kwargs))[0]
                if isinstance(t, torch.Tensor) and t.grad_fn is not None}
        stack = [t.grad_fn for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while stack:
            node = stack.pop()
            if node is None or node in stop or node in self.nodes or type(node).__name__ == "AccumulateGrad":
                continue
            self.nodes[node] = region
            stack.extend(n for n, _ in node.next_functions)

    def close(self) -> None:
        """Let go of the graph nodes held during the run."""
        self.nodes.clear()

    def backward_region(self) -> int | None:
        """The region whose backward is running now, if any."""
        if not self.nodes:
            return None
        return self.nodes.get(torch._C._current_autograd_node())
