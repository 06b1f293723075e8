"""How a diagnosed run ended, in words: it ran to the end, it was stopped (the sandbox's budget, or a limit of
meta), or the step raised its own error, which goes back to the reader with the reader's traceback.

- Stopped by the sandbox (a loop that waits on a stand-in value, a write into the reader's data): the report
  keeps what was seen before and says why, with the line; it gives no verdict.
- An error on meta that meta caused (an op without a meta kernel, tensors on meta meeting the host's, a value
  read as a stand-in earlier in the step): the same, with "pass device='cpu'" (a real run, on copies).
- A step that needs a CUDA GPU on a machine without one: did not run, in one sentence.
- Anything else is the step's own error: `reraise` raises it as the reader would see it from their own call,
  its traceback starting at their code (diagnose's frames cut), with a note saying that it ran on copies.
  The step was called once; nothing else runs.
"""
from __future__ import annotations

import traceback

from ..code_lines import NOWHERE, Where, source_text
from ..code_lines import library_file
from ..syncs import HostSync

_NO_CUDA = ("Torch not compiled with CUDA", "Found no NVIDIA driver", "No CUDA GPUs are available",
            "Cannot access accelerator device when none is available", "CUDA driver initialization failed")
STEP_RAISED = "_lessons_lib_step_raised"  # set on an exception that is the step's own (the CLI prints it so)


def raised_at(err: BaseException) -> Where:
    """The innermost line of the reader's code in the error's traceback."""
    found = NOWHERE
    for frame, line in traceback.walk_tb(err.__traceback__):
        file = frame.f_code.co_filename
        if not library_file(file):
            found = Where(file, line, source_text(file, line), frame.f_code.co_name)
    return found


def _words(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"


def judge(ev, box, step) -> tuple[str, str]:
    """("ran", "") | ("stopped", sentence) | ("not run", sentence); raises the step's own error."""
    err = ev.exception
    if box.stopped:
        return "stopped", box.stopped
    if err is None:
        return "ran", ""
    where = raised_at(err)
    at = f" at {where.place} (`{where.text}`)" if where is not NOWHERE else ""
    if any(s in str(err) for s in _NO_CUDA):
        return "not run", (f"it needs a CUDA GPU{at} and this machine has none ({_words(err)}): run it on meta "
                           "copies (device=None, the default), or make that line take its device from the model")
    if step.device == "meta" and _meta_made_it(err, ev):
        return "stopped", (f"on meta it raised {_words(err)}{at}; meta holds no values (.item() is 0, a mask "
                           "selects everything), so this may not happen on a GPU: pass device='cpu' to run it for "
                           "real, on copies of your objects")
    reraise(err, step)
    return "ran", ""  # not reached


def _meta_made_it(err: BaseException, ev) -> bool:
    text = str(err)
    read = any(isinstance(e[1], HostSync) for e in ev.sync_at)  # a stand-in value was read before the error
    return isinstance(err, NotImplementedError) or "meta" in text.lower() or read


def reraise(err: BaseException, step) -> None:
    """Raise the step's own error, its traceback from the reader's first frame (diagnose's frames cut)."""
    tb = err.__traceback__
    while tb is not None and library_file(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    how = "on meta copies of your objects" if step.device == "meta" else \
        f"for real, on copies of your objects on the {step.device.upper() if step.device == 'cpu' else 'GPU'}"
    note = f"(raised by your step, which lessons_lib.diagnose ran once, {how}: nothing of yours changed)"
    if hasattr(err, "add_note"):
        err.add_note(note)
    try:
        setattr(err, STEP_RAISED, True)
    except AttributeError:
        pass
    raise err.with_traceback(tb if tb is not None else err.__traceback__)


def time_on_copies(fn, inputs: tuple, kwargs: dict, device) -> tuple:
    """(Timing or None, calls of the step that ran, a note): the course's harness on fresh copies of the step,
    on the device it runs on (never meta: nothing to time there). Each call trains the copies, never yours."""
    import torch

    from .. import sandbox, step_call, timing
    from .inputs import prepare

    if device is None or torch.device(device).type == "meta":
        return None, 0, "timed=True: nothing to time on meta (shapes only); pass device='cpu' or 'cuda' (it times copies)"
    step = prepare(fn, inputs, kwargs, device, step_call.names(fn, len(inputs)))
    calls = [0]

    def once():
        calls[0] += 1
        return step()

    label = "step (forward and backward)" if step.module else getattr(fn, "__name__", "step")
    try:
        with sandbox.sandbox(home=step.home, shared=step.shared, ops=10 ** 12, seconds=60.0):
            took = timing.measure(once, label=label, device=torch.device(step.device), max_time=5.0)
    except (Exception, sandbox.Stopped) as err:
        return None, calls[0], (f"timed=True: not timed, the step raised on its call {calls[0]} on the copies "
                                f"({_words(err)})")
    return took, calls[0], ""
