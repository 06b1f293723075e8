"""`python -m lessons_lib.diagnose module:callable [--gpu T4] [--device meta] [--graphs]`: diagnose a script's step.

`module` is a module importable from the current folder (`train` or `pkg.train`) or a file (`train.py`); `callable`
is the step in it: a function, or an nn.Module instance. Its inputs, by convention:
- the module defines `example_inputs()`, returning the step's arguments as a tuple (or a dict of keyword
  arguments); it is called once, and what it returns is moved to meta as diagnose moves any input;
- else every parameter of the callable has a default: those defaults are the inputs.
Anything else is refused in one line. It prints the report; the exit status is 0 for a clean report, 1 when
pitfalls were found, 2 when it could not run.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import sys


def _load(spec: str):
    if ":" not in spec:
        raise ValueError(f"{spec!r}: name the step as module:callable (for example train:step or train.py:step).")
    name, attr = spec.rsplit(":", 1)
    sys.path.insert(0, os.getcwd())
    if name.endswith(".py"):
        if not os.path.exists(name):
            raise ValueError(f"{name}: no such file.")
        found = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(name))[0], name)
        module = importlib.util.module_from_spec(found)
        sys.modules[found.name] = module
        found.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            raise ValueError(f"{name}: no such module here ({err}); run from its folder, or give its file.") from err
    fn = getattr(module, attr, None)
    if fn is None:
        raise ValueError(f"{name} has no {attr!r}.")
    return module, fn


def inputs_for(module, fn, spec: str) -> tuple[tuple, dict]:
    """The step's inputs by the convention above, or a ValueError that says what to add."""
    import torch

    if inspect.isclass(fn):
        raise ValueError(f"{spec} is a class: make an instance in the module (model = {fn.__name__}(...)) and name it.")
    maker = getattr(module, "example_inputs", None)
    if maker is not None:
        made = maker()
        if isinstance(made, dict):
            return (), made
        return (tuple(made) if isinstance(made, (tuple, list)) else (made,)), {}
    if isinstance(fn, torch.nn.Module):
        raise ValueError(f"{spec} is a module: define example_inputs() in its file, returning a batch (a tuple).")
    params = list(inspect.signature(fn).parameters.values())
    missing = [p.name for p in params if p.default is inspect.Parameter.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if missing:
        raise ValueError(f"{spec} takes {', '.join(missing)} without defaults: define example_inputs() in its module "
                         "returning them as a tuple, or give each a default.")
    return tuple(p.default for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                 and p.default is not inspect.Parameter.empty), \
        {p.name: p.default for p in params if p.kind == p.KEYWORD_ONLY}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons_lib.diagnose", description=__doc__.split("\n")[0])
    parser.add_argument("step", help="module:callable (the module importable from here, or a .py file)")
    parser.add_argument("--gpu", default="T4", help="the GPU whose datasheet prices the evidence (default T4)")
    parser.add_argument("--device", default=None, help="meta (default where the step allows), cpu or cuda")
    parser.add_argument("--graphs", action="store_true", help="also check CUDA-graph capture (a second run)")
    args = parser.parse_args(argv)
    from . import diagnose

    try:
        module, fn = _load(args.step)
        inputs, kwargs = inputs_for(module, fn, args.step)
        report = diagnose(fn, *inputs, **kwargs, device=args.device, gpu=args.gpu, graphs=args.graphs)
    except ValueError as err:
        print(f"python -m lessons_lib.diagnose: {err}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
