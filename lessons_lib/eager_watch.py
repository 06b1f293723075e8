"""EagerWatch: the dispatch mode every course watcher subclasses (trace, syncs, graph_check, memory, diagnose).

What a watcher sees of a torch.compile'd function called under it: its EAGER aten ops, as if it were not compiled,
never the compiled kernel (Inductor's fused code dispatches no aten op to see). That is what the watchers count
(ops, bytes, syncs, hazards), and it is what makes them give the same answer for a function compiled or not.
The function stays compiled afterwards, and on every other thread meanwhile.

Why it takes work: under a plain dispatch mode Dynamo skips the frame and keeps the skip for its code object
(torch/_dynamo/convert_frame.py's "non-infra torch dispatch mode" skip; ConvertFrameReturn.apply_to_code defaults to
True, _dynamo/types.py): one trace of lesson 04's compiled PseudoLinear left it eager for good (the H200's "fused
1.00x eager"). Dynamo's "force_eager" stance runs a compiled function eagerly without asking Dynamo, so nothing is
marked; but torch keeps ONE stance for the process (torch.compiler.set_stance sets eval_frame._stance), so the
course's first fix ran every thread's compiled calls eagerly while a watcher observed (an explorer's worker
timing a compiled variant beside a trace). Here the stance Dynamo reads is, while a watcher is active anywhere, one
that answers "force_eager" on the watcher's thread and the process's own stance on every other.

Not used: TorchDispatchMode.ignore_compile_internals (torch 2.9+). A mode that returns True is switched off while
Dynamo compiles and sees what the compiled artifact dispatches at run time: for Inductor's code, a few extern calls
(mm, empty_strided) instead of the eager ops, so a trace of a compiled function would differ from its eager one.
"""
from __future__ import annotations

import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_lock = threading.Lock()
_here = threading.local()  # .depth: watchers active on this thread
_active = [0]  # watchers active in the process
# torch keeps "is a dispatch mode active" in process-wide flags that each mode saves on enter and restores on exit
# (torch/utils/_python_dispatch.py). Two watchers on two threads exit in any order, so the last restores a True
# it saw on entering: torch 2.9's Dynamo reads that flag (convert_frame.should_skip_due_to_torch_dispatch_mode)
# and compiled nothing more in the process. The flags as they were before the first watcher come back after the last,
# and while one is active that Dynamo asks about this thread's modes, as torch 2.13's does (any_torch_dispatch_mode_on_
# stack): else a compiled function first called on an explorer's worker beside a watcher was skipped for good.
_FLAGS = ("_is_in_torch_dispatch_mode", "_is_in_non_infra_torch_dispatch_mode",
          "_is_in_any_mode_without_ignore_compile_internals")
_before: dict = {}
_skip_check: list = []  # [convert_frame module, its own should_skip_due_to_torch_dispatch_mode] while replaced


class _PerThreadStance:
    """Dynamo's stance as each thread sees it: "force_eager" where a watcher is active, else the process's (`base`,
    whatever torch.compiler.set_stance set); its other fields (backend, skip_guard_eval_unsafe) are the process's."""

    def __init__(self, base):
        self.base = base

    def __getattr__(self, name):
        return getattr(self.base, name)

    @property
    def stance(self) -> str:
        return "force_eager" if getattr(_here, "depth", 0) else self.base.stance


def _eval_frame():
    """torch._dynamo.eval_frame where it keeps its stance in `_stance` (torch 2.6+), else None."""
    try:
        from torch._dynamo import eval_frame
    except Exception:  # no Dynamo on this platform: nothing is compiled, nothing to keep eager
        return None
    return eval_frame if hasattr(eval_frame, "_stance") and hasattr(eval_frame, "_callback_from_stance") else None


def _watching(step: int) -> None:
    """One watcher more (+1) or fewer (-1) on this thread: the per-thread stance is in place while any is active."""
    from torch.utils import _python_dispatch as pd

    _here.depth = getattr(_here, "depth", 0) + step
    ef = _eval_frame()
    with _lock:
        _active[0] += step
        if step > 0 and _active[0] == 1:
            _before.clear()
            _before.update({f: getattr(pd, f) for f in _FLAGS if hasattr(pd, f)})
            _per_thread_skip_check(ef is not None)
        elif step < 0 and _active[0] == 0:
            _restore_flags(pd)
            _per_thread_skip_check(False)
        if ef is None:
            return
        current = ef._stance
        if step > 0 and not isinstance(current, _PerThreadStance):
            ef._stance = _PerThreadStance(current)
        elif step < 0 and _active[0] == 0 and isinstance(current, _PerThreadStance):
            ef._stance = current.base


def _mode_on_this_thread() -> bool:
    from torch.utils._python_dispatch import _get_dispatch_stack_at

    modes = (_get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack()))
    return any(not m.is_infra_mode() and not m.ignore_compile_internals() for m in modes)


def _per_thread_skip_check(on: bool) -> None:
    """Put in (on) or take out this thread's answer to Dynamo's "skip: a dispatch mode is active?", where Dynamo
    asks the process-wide flag (torch 2.9: no config.inline_torch_dispatch_torch_compile)."""
    if on and not _skip_check:
        from torch._dynamo import config, convert_frame

        own = getattr(convert_frame, "should_skip_due_to_torch_dispatch_mode", None)
        if own is not None and not getattr(config, "inline_torch_dispatch_torch_compile", False):
            _skip_check[:] = [convert_frame, own]
            convert_frame.should_skip_due_to_torch_dispatch_mode = _mode_on_this_thread
    elif not on and _skip_check:
        module, own = _skip_check
        module.should_skip_due_to_torch_dispatch_mode = own
        _skip_check.clear()


def _restore_flags(pd) -> None:
    for f, v in _before.items():
        setattr(pd, f, v)
    setter = getattr(pd, "set_is_in_mode_without_ignore_compile_internals", None)  # its copy in C (2.13; not 2.9)
    if setter is not None and "_is_in_any_mode_without_ignore_compile_internals" in _before:
        setter(_before["_is_in_any_mode_without_ignore_compile_internals"])


class EagerWatch(TorchDispatchMode):
    """A dispatch mode under which a compiled function runs eagerly on this thread only, so the watcher sees its
    eager aten ops (not the compiled kernel), and stays compiled afterwards (see the module's docstring)."""

    def __enter__(self):
        _watching(+1)
        try:
            return super().__enter__()
        except BaseException:
            _watching(-1)
            raise

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _watching(-1)
