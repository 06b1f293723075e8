"""Lesson 05's capture-safety catalogue: each function of variants.py with the verdict CUDA's and
PyTorch's rules give it under capture (safe, fails, frozen) and its source; graph_check run on each."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .. import graphs
from .variants import (
    adam_step, branch_on_value, class_counts, constant_from_python, constant_tensor, decay_in_place, device_sync,
    distinct, dropout, every_other_step, gather_rows, grads, leaky, log_item, mlp, noise_from_host, noise_on_device,
    noise_scale_from_random, one_hot_fixed, positives_mask, positives_nonzero, print_loss, scale_by_float, selected,
    adam_capturable_tensor_lr_step, sgd_fused_tensor_lr_step, sgd_step, sgd_tensor_lr, sgd_tensor_lr_step, to_host,
    top3, zero_negatives, zero_negatives_by_index,
)


# --- capture safety: a catalogue of functions known to be safe or unsafe ---------------------------


@dataclass
class Entry:
    name: str
    fn: Callable
    inputs: Callable[[torch.device], tuple]  # example inputs on a device
    verdict: str  # expected under capture: "safe", "fails" or "frozen" (from CUDA's and PyTorch's rules)
    kinds: tuple[str, ...] = ()  # hazard kinds graph_check must name
    also: Callable[[torch.device], list] | None = None  # other calls (shape changes, control flow)
    second: Callable[[tuple], tuple] | None = None  # frozen entries: the call whose replay differs from eager
    source: str = ""  # where the expected behaviour is documented
    eager_on_cpu: bool = True  # False: the function itself needs a GPU (capturable=True steps only there)

    @property
    def expected_report(self) -> str:
        """The graph_check verdict this entry expects ("safe" shows as "no hazard seen": not a proof)."""
        return graphs.CLEAN if self.verdict == "safe" else self.verdict


def _xy(device, n: int = 8):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n, n, generator=gen).to(device), torch.randn(n, generator=gen).to(device)


def _sgd_inputs(device, momentum: bool = False):
    p = torch.nn.Parameter(torch.randn(8, device=device))
    p.grad = torch.ones(8, device=device)
    return (p,)


def _prepared(step):
    """Inputs for an optimizer step whose optimizer is built beforehand, outside the checked call."""
    def inputs(device):
        (p,) = _sgd_inputs(device)
        step.prepare(p)
        return (p,)
    return inputs


_NOTES = "CUDA Graphs notes, cuda.rst"  # PyTorch's docs/source/notes/cuda.rst
CATALOGUE = [
    Entry("matmul + relu", mlp, _xy, "safe", source="kernels only"),
    Entry("torch.where instead of a branch", leaky, _xy, "safe", source="kernels only"),
    Entry("masked_fill instead of a boolean index", zero_negatives, _xy, "safe", source="kernels only"),
    Entry("x[mask] = 0 (ATen makes it masked_fill_)", zero_negatives_by_index, _xy, "safe",
          source="TensorAdvancedIndexing.cpp, _index_put_impl_ / canDispatchToMaskedFill"),
    Entry("topk (a fixed k)", top3, _xy, "safe", source="a fixed output size"),
    Entry("in-place update of an input", decay_in_place, _xy, "safe", source="kernels only"),
    Entry("forward + backward (autograd.grad)", grads, lambda d: (_xy(d)[0], _xy(d)[1].requires_grad_()), "safe",
          source=_NOTES + ": backward can be captured"),
    Entry("SGD by hand, lr a 0-dim device tensor", sgd_tensor_lr,
          lambda d: (*_sgd_inputs(d), torch.tensor(0.1, device=d)), "safe", source=_NOTES + ": tensor lr"),
    Entry("index_select with a tensor index", gather_rows,
          lambda d: (_xy(d)[0], torch.tensor([3, 1, 4], device=d)), "safe", source="a fixed output size"),
    Entry("dropout (graph-safe random numbers)", dropout, _xy, "safe", source=_NOTES + ": graph-safe RNG"),
    Entry("randn(shape, device=x.device)", noise_on_device, _xy, "safe", source=_NOTES + ": graph-safe RNG"),
    Entry("one_hot with num_classes", one_hot_fixed, _xy, "safe", source="Onehot.cpp: CUDA skips the host checks"),
    Entry("SGD(fused=True), lr a device tensor", sgd_fused_tensor_lr_step, _prepared(sgd_fused_tensor_lr_step), "safe",
          source="sgd.py _fused_sgd: _fused_sgd_.tensor_lr reads lr on the device (FusedSgdKernel.cu)"),
    Entry("Adam(capturable=True), lr a device tensor", adam_capturable_tensor_lr_step,
          _prepared(adam_capturable_tensor_lr_step), "safe", eager_on_cpu=False,
          source="adam.py: capturable keeps step and lr on the device"),
    Entry(".item() to log the loss", log_item, _xy, "fails", ("host sync",), source=_NOTES + ": no sync"),
    Entry("print(loss)", print_loss, _xy, "fails", ("host sync",), source=_NOTES + ": no sync"),
    Entry("if tensor: a branch on a value", branch_on_value, _xy, "fails", ("host sync",), source=_NOTES + ": no sync"),
    Entry(".cpu() of a result", to_host, _xy, "fails", ("host sync",), source="cuda/Copy.cu: memcpy_and_sync"),
    Entry("nonzero", positives_nonzero, _xy, "fails", ("data-dependent shape",),
          source="cuda/Nonzero.cu: memcpy_and_sync"),
    Entry("boolean-mask indexing x[x > 0]", positives_mask, _xy, "fails", ("data-dependent shape",),
          source="index with a bool mask calls nonzero"),
    Entry("unique", distinct, _xy, "fails", ("data-dependent shape",), source="output size from the data"),
    Entry("masked_select", selected, _xy, "fails", ("data-dependent shape",), source="output size from the data"),
    Entry("bincount", class_counts, _xy, "fails", ("host sync",), source="cuda/SummaryOps.cu: .item() inside"),
    Entry("torch.tensor(data, device=x.device) inside", constant_from_python, _xy, "fails", ("host↔device copy",),
          source="a copy from host memory (Copy.cu)"),
    Entry("torch.randn(shape).to(x.device)", noise_from_host, _xy, "fails", ("host↔device copy",),
          source="a blocking pageable copy (Copy.cu)"),
    Entry("torch.cuda.synchronize() inside", device_sync, _xy, "fails", ("device sync",), source=_NOTES),
    Entry("a new shape on the next call", mlp, _xy, "fails", ("shape change",),
          also=lambda d: [(torch.randn(16, 8, device=d), _xy(d)[1])], source=_NOTES + ": static shapes"),
    Entry("Adam built without capturable=True", adam_step, _sgd_inputs, "fails", ("optimizer",),
          source="torch/optim/optimizer.py: _accelerator_graph_capture_health_check"),
    Entry("SGD (foreach, CUDA's default), lr a device tensor", sgd_tensor_lr_step, _prepared(sgd_tensor_lr_step),
          "fails", ("optimizer lr",), source="sgd.py _multi_tensor_sgd: alpha=-lr reads it on the host"),
    Entry("x * torch.tensor(2.0): a 0-dim host tensor", constant_tensor, _xy, "frozen", ("frozen host tensor",),
          source="cuda/Loops.cuh, gpu_kernel_with_scalars: a CPU scalar is a kernel argument"),
    Entry("a learning rate passed as a Python float", scale_by_float, lambda d: (_xy(d)[0], 0.1), "frozen",
          ("frozen Python value",), second=lambda inputs: (inputs[0], 0.2), source=_NOTES + ": kernel arguments"),
    Entry("SGD with a float lr (a scheduler changes it)", sgd_step, _sgd_inputs, "frozen",
          ("frozen Python value",), source=_NOTES + ": kernel arguments"),
    Entry("a number from Python's random", noise_scale_from_random, _xy, "frozen", ("frozen Python value",),
          source=_NOTES + ": host code runs once, at capture"),
    Entry("a Python counter picks the branch", every_other_step, _xy, "frozen", ("control flow",),
          also=lambda d: [_xy(d)], source=_NOTES + ": host code runs once, at capture"),
]


def check_entry(e: Entry, device="cpu") -> graphs.GraphReport:
    dev = torch.device(device)
    also = e.also(dev) if e.also else ()
    return graphs.graph_check(e.fn, *e.inputs(dev), also=also)


def catalogue_table(device="cpu"):
    """graph_check's verdict on every catalogue entry, next to the verdict the course expects from CUDA's and
    PyTorch's rules (not a capture: on a GPU, tests/test_graphs.py captures each). Device-independent:
    nbval compares it. An HTML table in a notebook, fixed-width text when printed."""
    from ..display import html_table

    rows = [("function", "expected (source)", "graph_check", "hazards named", "as expected")]
    for e in CATALOGUE:
        r = check_entry(e, device)
        ok = r.verdict == e.expected_report and set(e.kinds) <= set(r.kinds)
        rows.append((e.name, f"{e.verdict} ({e.source})", r.verdict, ", ".join(r.kinds) or "-", "✓" if ok else "✗"))
    return html_table(rows, caption="expected: from the rules and source named; graph_check: this run, on this "
                                    "machine, at the dispatcher (what it cannot see is listed under any report)")
