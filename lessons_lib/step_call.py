"""Before a course tool runs a reader's step: can this call run it at all? One sentence when it cannot.

`problem(fn, args, kwargs, tool)` is None when `fn(*args, **kwargs)` (an nn.Module: its forward) is a call the
step accepts, else the sentence that says why nothing ran and what to pass: not callable (None, a number), a
class, a generator or async function (calling it runs none of its body), inputs that do not fit the signature
(a model without a batch, the inputs as one tuple, an unknown keyword). `names(fn, n)` are the names of its
first n parameters, for sentences about them.
"""
from __future__ import annotations

import inspect

import torch

_TOOL_WORDS = {"diagnose": "device=, gpu=, graphs= and timed=", "graph_check": "also="}


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _signature(fn):
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):  # a builtin without one: let the call decide
        return None


def names(fn, n: int) -> tuple[str, ...]:
    sig = _signature(fn)
    if sig is None:
        return ()
    out = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return tuple(out[:n])


def problem(fn, args: tuple, kwargs: dict, tool: str = "diagnose") -> str | None:
    """Why `fn(*args, **kwargs)` cannot run the step (one sentence), or None."""
    if fn is None or not callable(fn):
        got = "None" if fn is None else f"{type(fn).__name__} {fn!r:.40}"
        return (f"{tool} needs the step itself, a function (or an nn.Module) and then its inputs, as "
                f"{tool}(step, *inputs); it got {got}.")
    name = _name(fn)
    if inspect.isclass(fn):
        example = f"{tool}({fn.__name__}(...), x)" if issubclass(fn, torch.nn.Module) else \
            f"{tool}(step, *inputs) with the function that runs one step"
        return f"`{name}` is a class, not a step: make the object first and pass it, {example}."
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        return (f"`{name}` is a generator function: calling it runs none of its body. Put one step in a plain "
                f"function (def step(...): ...) and pass that to {tool}.")
    if inspect.iscoroutinefunction(fn):
        return (f"`{name}` is an async function: calling it only makes a coroutine, and nothing in it runs. Pass "
                f"{tool} a plain function that runs one step.")
    sig = _signature(fn)
    if sig is None:
        return None
    try:
        sig.bind(*args, **kwargs)
        return None
    except TypeError as err:
        why = str(err)
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    needed = [p.name for p in params if p.default is p.empty]
    if isinstance(fn, torch.nn.Module) and not args and not kwargs:
        return (f"`{type(fn).__name__}` is a model, and its forward takes {', '.join(needed) or 'inputs'}: pass a "
                f"batch too, {tool}(model, x).")
    if len(args) == 1 and isinstance(args[0], (tuple, list)) and not kwargs:
        try:
            sig.bind(*args[0])
            return (f"the inputs came as one {type(args[0]).__name__}; `{name}` takes them one by one: "
                    f"{tool}(step, *inputs).")
        except TypeError:
            pass
    unknown = [k for k in kwargs if k not in sig.parameters]
    if unknown and not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        return (f"`{name}` has no parameter {unknown[0]!r}, so nothing ran ({tool}'s own keywords are "
                f"{_TOOL_WORDS.get(tool, 'its documented ones')}; every other keyword goes to the step).")
    shown = ", ".join(p.name for p in params) or "nothing"
    return (f"`{name}` takes ({shown}) and cannot be called with {len(args)} positional input"
            f"{'s' if len(args) != 1 else ''}{' and ' + ', '.join(kwargs) if kwargs else ''} ({why}), so nothing "
            f"ran: pass its inputs as its own call would, {tool}(step, *inputs).")
