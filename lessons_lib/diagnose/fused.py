"""Calls that CUDA runs as one fused library kernel where meta and the CPU run many small ops.

nn.LSTM, nn.GRU and nn.RNN call torch.lstm / gru / rnn_tanh / rnn_relu; on CUDA these dispatch cuDNN's RNN
(`_cudnn_rnn`: a few kernels for the whole sequence, forward and backward), while on meta and on the CPU they
decompose into a handful of ops per time step and layer. Left as they are, those ops would read as elementwise
chains and a launch-bound step that the GPU never runs. So, during the run, a torch-function mode marks each such
call as a region: its forward ops, and its backward ops (found by the graph nodes it created:
torch._C._current_autograd_node() names the node backward is running), take the phase "fused", which every
detector leaves alone, and costs.kernels counts each region as one kernel forward and one backward. (Scaled dot
product attention is handled apart, by trace.sdpa_as_on_cuda, because meta can run CUDA's kernel for it.)
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

FUSED_ON_CUDA = {"lstm": "cuDNN LSTM", "gru": "cuDNN GRU", "rnn_tanh": "cuDNN RNN", "rnn_relu": "cuDNN RNN"}
_CALLS = {getattr(torch._C._VariableFunctions, name) for name in FUSED_ON_CUDA}


class FusedOnCuda(TorchFunctionMode):
    """Marks the collector's ops inside a fused call: `collector.region` is (region id, name) meanwhile."""

    def __init__(self, collector):
        super().__init__()
        self.col = collector
        self.nodes: dict = {}  # graph node -> region id: its backward's ops are the region's too
        self.names: dict[int, str] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _CALLS or self.col.region is not None:
            return func(*args, **kwargs)
        region = len(self.names)
        self.names[region] = FUSED_ON_CUDA[func.__name__]
        self.col.region = region
        try:
            out = func(*args, **kwargs)
        finally:
            self.col.region = None
        self._mark(region, args, out)
        return out

    def _mark(self, region: int, args, out) -> None:
        """The graph nodes between the call's outputs and its inputs: what its backward runs."""
        from torch.utils._pytree import tree_flatten

        stop = {t.grad_fn for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None}
        stack = [t.grad_fn for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while stack:
            node = stack.pop()
            if node is None or node in stop or node in self.nodes or type(node).__name__ == "AccumulateGrad":
                continue
            self.nodes[node] = region
            stack.extend(n for n, _ in node.next_functions)

    def backward_region(self) -> int | None:
        """The region whose backward is running now, if any."""
        if not self.nodes:
            return None
        return self.nodes.get(torch._C._current_autograd_node())
