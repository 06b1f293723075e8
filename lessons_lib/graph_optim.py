"""What an optimizer's step does under CUDA graph capture, and the advice that fits the optimizer in hand.

graph_check (graph_hazards.py) calls `optimizer_hazards(opt)` before each optimizer step it watches. Facts
relied on (torch/optim, checked on torch 2.13; the same since 2.9):
- Optimizers with a `capturable` option (Adam, AdamW, ...) refuse capture without it
  (`Optimizer._accelerator_graph_capture_health_check`, optimizer.py); with capturable=True a learning rate
  that is a tensor on the parameters' device stays on the device (adam.py), so `lr.fill_(new)` between
  replays reaches them.
- SGD has no `capturable` option. foreach SGD (CUDA's default, `_multi_tensor_sgd`) and for-loop SGD
  (`_single_tensor_sgd`) pass the learning rate as `alpha=-lr`: a tensor lr is read on the host
  (`aten._local_scalar_dense`). On the device that read is a sync, which capture refuses; a CPU tensor is
  read once at capture and frozen. SGD(fused=True) calls `_fused_sgd_.tensor_lr`, whose CUDA kernel reads
  a float32 lr on the parameters' device (aten/src/ATen/native/cuda/FusedSgdKernel.cu; a CPU lr is read
  with `.item()` there, frozen too).
- A Python float learning rate is a kernel argument: frozen into every replay whatever the optimizer.
"""
from __future__ import annotations

import contextlib

import torch

from .graph_report import Hazard, _user_line

# Optimizers whose fused kernels take a tensor lr and read it on the device (the `.tensor_lr` overloads of
# _fused_sgd_ and _fused_adam_/_fused_adamw_ in native_functions.yaml). Adam and AdamW still need
# capturable=True under capture.
_FUSED_TENSOR_LR = ("SGD", "Adam", "AdamW")
_ON_DEVICE = "lr=torch.tensor(lr, device=<the parameters' device>) (float32)"


def lr_advice(opt) -> str:
    """How to change this optimizer's learning rate between replays, for the optimizer in hand."""
    name = type(opt).__name__
    if name == "SGD":
        return (f"build it with fused=True and {_ON_DEVICE}, then lr.fill_(new) between replays: fused SGD reads "
                "its lr on the device; foreach or for-loop SGD read a tensor lr on the host (alpha=-lr), and "
                "capture fails")
    if "capturable" in opt.defaults:
        return f"build it with capturable=True and {_ON_DEVICE}, then lr.fill_(new) between replays"
    return (f"{name} reads its learning rate on the host at every step: keep it fixed while you replay, or capture "
            "again after changing it")


def _reads_lr_on_device(opt, group: dict) -> bool:
    return bool(group.get("capturable")) or (bool(group.get("fused")) and type(opt).__name__ in _FUSED_TENSOR_LR)


def optimizer_hazards(opt) -> list[tuple[str, str, str, str]]:
    """(kind, what, detail, advice) for each thing this optimizer's next step would do under capture (the
    kinds are graph_hazards.KINDS keys; advice "" means the kind's own fix applies)."""
    name = type(opt).__name__
    out = []
    if "capturable" in opt.defaults and not all(g.get("capturable") for g in opt.param_groups):
        out.append(("optimizer", f"{name}.step() built with capturable=False", "", ""))
    group = opt.param_groups[0] if opt.param_groups else {}
    lr, params = group.get("lr"), group.get("params") or []
    where = params[0].device if params else None
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        out.append(("frozen Python value", f"{name} lr={lr:g} (a Python float)",
                    "a scheduler's later changes would not reach replays", lr_advice(opt)))
    elif isinstance(lr, torch.Tensor) and where is not None:
        if lr.device.type == "cpu" and where.type != "cpu":
            out.append(("frozen host tensor", f"{name} lr, a CPU tensor",
                        "read on the host at capture: a scheduler's later changes would not reach replays",
                        lr_advice(opt)))
        elif "capturable" not in opt.defaults and not _reads_lr_on_device(opt, group):
            how = " (SGD without fused=True: alpha=-lr, aten._local_scalar_dense)" if name == "SGD" else ""
            out.append(("optimizer lr", f"{name} lr, a tensor read on the host{how}", "", lr_advice(opt)))
    return out


@contextlib.contextmanager
def _watch_syncs_and_optimizers(hazards: list[Hazard], watch):
    """Record device synchronizes (without running them) and optimizer steps, for the duration."""
    from torch.optim import optimizer as optim

    def before_step(opt, _args, _kwargs):
        watch.in_optimizer = True
        where = _user_line()
        hazards.extend(Hazard(kind, what, where, detail, advice)
                       for kind, what, detail, advice in optimizer_hazards(opt))

    def after_step(_opt, _args, _kwargs):
        watch.in_optimizer = False

    def fake_sync(*_a, **_k):
        hazards.append(Hazard("device sync", "torch.cuda.synchronize()", _user_line()))

    handles = [optim.register_optimizer_step_pre_hook(before_step), optim.register_optimizer_step_post_hook(after_step)]
    saved = [(mod, mod.synchronize) for mod in (torch.cuda, getattr(torch, "accelerator", None))
             if mod is not None and hasattr(mod, "synchronize")]
    try:
        for mod, _old in saved:
            mod.synchronize = fake_sync
        yield
    finally:
        for mod, old in saved:
            mod.synchronize = old
        for h in handles:
            h.remove()
        watch.in_optimizer = False
