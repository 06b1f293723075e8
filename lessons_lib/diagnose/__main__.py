"""`python -m lessons_lib.diagnose module:callable [--gpu T4] [--device meta] [--graphs]`: diagnose a script's step.

`module` is a file (`train.py`, loaded under a private module name, so a file named io.py, types.py or inspect.py
works) or a module importable from the current folder (`pkg.train`); `callable` is the step in it: a function,
or an nn.Module instance. Loading the file runs its top level in the sandbox (no write to disk; the budget stops
a script that trains at import: put that under `if __name__ == "__main__":`). Its inputs, by convention:
- the module defines `example_inputs()`, returning the step's arguments as a tuple (or a dict of keyword
  arguments); it is called once, and what it returns is copied to meta as diagnose copies any input;
- else every parameter of the callable has a default: those defaults are the inputs.
It prints the report. Exit status: 0 a clean report, 1 pitfalls found, 2 could not run (the file does not load,
no inputs, the step did not run or did not run to the end; one line says why, or the step's own traceback when
the step raised), 3 diagnose itself failed (a bug: please report the line it prints).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback

# For a terminal that cannot print the report's marks (PYTHONIOENCODING=ascii, an old Windows console).
_PLAIN = str.maketrans({"✓": "ok", "✗": "x", "⚠": "!", "≈": "~", "µ": "u", "→": "->", "×": "x", "…": "...",
                        "—": "-", "–": "-", "§": "S", "²": "^2", "≤": "<=", "≥": ">=", "·": "-"})


def _say(text: str, stream) -> None:
    """Print, whatever the stream's encoding: what it cannot show becomes plain ASCII, or '?'. A stream with no
    encoding (io.StringIO, a notebook's capture) holds any text: the marks stay."""
    encoding = getattr(stream, "encoding", None)
    try:
        if encoding:
            text.encode(encoding)
    except (UnicodeEncodeError, LookupError) as err:
        encoding = encoding if isinstance(err, UnicodeEncodeError) else "ascii"
        text = text.translate(_PLAIN).encode(encoding, "replace").decode(encoding)
    print(text, file=stream)


def _where(err: BaseException, path: str) -> str:
    for frame, line in reversed(list(traceback.walk_tb(err.__traceback__))):
        if os.path.abspath(frame.f_code.co_filename) == os.path.abspath(path):
            return f" at line {line}"
    return ""


def _load_file(path: str):
    """The reader's file as a module of its own private name (never the name of a module it would shadow)."""
    from .. import sandbox

    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    name = f"_lessons_lib_step_{stem}"
    found = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.append(folder)  # its own imports (a helpers.py beside it), after the standard library
    with sandbox.sandbox() as box:
        try:
            sandbox.call(found.loader.exec_module, module)
        except SyntaxError as err:
            raise ValueError(f"{path} line {err.lineno}: syntax error ({err.msg}).") from None
        except ImportError as err:
            raise ValueError(f"{path}{_where(err, path)}: {type(err).__name__}: {err} (it imports something this "
                             "Python cannot find).") from None
        except sandbox.Stopped:
            raise ValueError(f"{path} did not finish loading: {box.stopped}. Put what runs a script (training, "
                             "plots) under `if __name__ == \"__main__\":`.") from None
        except (Exception, SystemExit) as err:
            raise ValueError(f"{path}{_where(err, path)}: loading it raised {type(err).__name__}: "
                             f"{(str(err).splitlines() or [''])[0][:200]}.") from None
    return module


def _load(spec: str):
    if ":" not in spec:
        raise ValueError(f"{spec!r}: name the step as module:callable (for example train:step or train.py:step).")
    name, attr = spec.rsplit(":", 1)
    as_file = name if name.endswith(".py") else name.replace(".", os.sep) + ".py"
    if os.path.isfile(as_file):
        module = _load_file(as_file)
    elif name.endswith(".py"):
        raise ValueError(f"{name}: no such file.")
    else:
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            raise ValueError(f"{name}: no such module here ({err}); run from its folder, or give its file.") from None
        except SyntaxError as err:
            raise ValueError(f"{name} line {err.lineno}: syntax error ({err.msg}).") from None
        except Exception as err:
            raise ValueError(f"{name}: importing it raised {type(err).__name__}: {err}.") from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise ValueError(f"{name} has no {attr!r}.")
    return module, fn


def inputs_for(module, fn, spec: str) -> tuple[tuple, dict]:
    """The step's inputs by the convention above, or a ValueError that says what to add."""
    import torch

    from .. import sandbox

    if inspect.isclass(fn):
        raise ValueError(f"{spec} is a class: make an instance in the module (model = {fn.__name__}(...)) and name it.")
    maker = getattr(module, "example_inputs", None)
    if maker is not None:
        with sandbox.sandbox() as box:
            try:
                made = sandbox.call(maker) if callable(maker) else None
            except sandbox.Stopped:
                raise ValueError(f"example_inputs() did not finish: {box.stopped}.") from None
            except Exception as err:
                file = getattr(module, "__file__", "") or ""
                raise ValueError(f"example_inputs(){_where(err, file)} raised {type(err).__name__}: "
                                 f"{(str(err).splitlines() or [''])[0][:200]}.") from None
        if not callable(maker):
            raise ValueError("example_inputs must be a function returning the step's arguments as a tuple.")
        if isinstance(made, dict):
            return (), made
        return (tuple(made) if isinstance(made, (tuple, list)) else (made,)), {}
    if isinstance(fn, torch.nn.Module):
        raise ValueError(f"{spec} is a module: define example_inputs() in its file, returning a batch (a tuple).")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise ValueError(f"{spec} is not a function diagnose can read: name the step (a function or a model).") \
            from None
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
    parser.add_argument("step", help="module:callable (a .py file, or a module importable from here)")
    parser.add_argument("--gpu", default="T4", help="the GPU whose datasheet prices the evidence (default T4)")
    parser.add_argument("--device", default=None, help="meta (the default: copies, nothing runs for real), cpu or cuda")
    parser.add_argument("--graphs", action="store_true", help="also check CUDA-graph capture (a second run)")
    args = parser.parse_args(argv)
    from . import diagnose
    from .outcome import STEP_RAISED

    try:
        module, fn = _load(args.step)
        inputs, kwargs = inputs_for(module, fn, args.step)
        report = diagnose(fn, *inputs, **kwargs, device=args.device, gpu=args.gpu, graphs=args.graphs)
    except ValueError as err:
        _say(f"python -m lessons_lib.diagnose: {err}", sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - the step's own error, or diagnose's
        if getattr(err, STEP_RAISED, False):
            _say("".join(traceback.format_exception(err)).rstrip(), sys.stderr)
            _say("python -m lessons_lib.diagnose: the step raised this itself (above), so nothing was diagnosed.",
                 sys.stderr)
            return 2
        _say(f"python -m lessons_lib.diagnose: internal error, a bug in lessons_lib ({type(err).__name__}: {err}); "
             "please report this line.", sys.stderr)
        return 3
    try:
        _say(str(report), sys.stdout)
    except BrokenPipeError:  # `| head`: the reader has read enough
        sys.stdout = open(os.devnull, "w")
    return 0 if report.clean else 1 if report.ran else 2


if __name__ == "__main__":
    sys.exit(main())
