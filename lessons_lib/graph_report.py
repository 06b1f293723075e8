"""graph_check's report: the kinds of hazard (what each does under capture and its fix), a Hazard, the
GraphReport with its verdict and blind spots, and the user's line of code. graph_hazards.py finds the
hazards; graph_optim.py adds an optimizer's; graphs.py re-exports these names."""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field

FAILS, FROZEN, CLEAN, NO_VERDICT = "fails", "frozen", "no hazard seen", "no verdict"
# What each kind of hazard does under capture, and what to do instead.
KINDS = {
    "host sync": (FAILS, "the host waits for the GPU: capture refuses it",
                  "log outside the captured region, or keep the value on the device"),
    "data-dependent shape": (FAILS, "the output size depends on the data, so the host must wait to learn it",
                             "keep shapes fixed: torch.where / masked_fill / multiply by the mask"),
    "mask to indices": (FAILS, "a boolean mask is turned into indices (nonzero): the host waits to learn how many",
                        "multiply by the mask, or use torch.where / masked_fill (x[mask] = scalar is fine)"),
    "host↔device copy": (FAILS, "a copy between host memory and the device inside the function (a blocking "
                         "copy is a sync)", "make such tensors once, outside, on the device (or with device=); pass them in"),
    "device sync": (FAILS, "a synchronize inside the captured region: capture refuses it",
                    "synchronize outside the captured region"),
    "optimizer": (FAILS, "this optimizer's step reads its step count on the host unless built with capturable=True",
                  "build it with capturable=True (and a learning rate that is a tensor on the device, if it changes)"),
    "optimizer lr": (FAILS, "this optimizer reads a tensor learning rate on the host at every step (a sync on the "
                     "device): capture refuses it", "SGD(fused=True), or an optimizer built with capturable=True, "
                     "reads a tensor lr on the device"),
    "shape change": (FAILS, "a graph has static shapes: a replay cannot take another shape",
                     "pad to a few fixed shapes, one graph each (reduce-overhead records one per shape)"),
    "control flow": (FROZEN, "another call took another path: a graph replays the path seen at capture",
                     "make the branch a tensor op (torch.where), or capture one graph per path"),
    "frozen Python value": (FROZEN, "a Python number is baked into the graph: replays keep the value seen at capture",
                            "pass a 0-dim device tensor and copy_ new values into it"),
    "frozen host tensor": (FROZEN, "a 0-dim host tensor meets device tensors: CUDA passes its value to the kernel "
                           "at launch, so the graph keeps the value seen at capture (harmless for a constant)",
                           "make it on the device (device=x.device) and copy_ new values into it"),
}
_HERE = ("graph_hazards.py", "graph_optim.py", "graph_report.py", "syncs.py", "sandbox.py", "sandbox_disk.py",
         "step_call.py")  # frames that are not the user's (the sandbox's own included)
# Printed with every verdict: what a dispatch-level run on this machine cannot see.
BLIND_SPOTS = (
    "it runs the function on {device}, at PyTorch's dispatcher, not under CUDA: what capture refuses or "
    "freezes is inferred from PyTorch's rules and ATen's source",
    "on a CPU run it cannot tell whether 0-dim tensor arguments and tensors from outside the function (globals, "
    "module buffers, a CPU learning-rate tensor) will live on the host (frozen into the graph) or on the GPU: "
    "check with those on the CPU and the other inputs on `meta`",
    "Python values read from globals, closures or attributes are frozen without a trace (only arguments, "
    "optimizer lrs and Python's `random` are watched; numpy's random and factories imported by name are not)",
    "host reads inside CUDA kernels are known from syncs.CUDA_KERNEL_SYNCS; custom kernels, C++ extensions and "
    "other libraries are not seen; nor is memory (a graph's private pool, outputs overwritten by the next replay)",
)


@dataclass(frozen=True)
class Hazard:
    kind: str  # a key of KINDS
    what: str  # the op, method or value
    where: str  # the user's line of code
    detail: str = ""
    advice: str = ""  # a fix for this case (an optimizer's learning rate), instead of the kind's own

    @property
    def effect(self) -> str:
        return KINDS[self.kind][0]

    @property
    def why(self) -> str:
        return KINDS[self.kind][1] + (f" ({self.detail})" if self.detail else "")

    @property
    def fix(self) -> str:
        return self.advice or KINDS[self.kind][2]

    def __str__(self) -> str:
        mark = "✗" if self.effect == FAILS else "⚠"  # frozen: captures, replays keep what capture saw
        return f"{mark} {self.kind}: {self.what} — {self.why}  [{self.where}]"


@dataclass
class GraphReport:
    """What `graph_check` found: hazards in the order they happened, and whether `fn` ran to the end."""

    hazards: list[Hazard] = field(default_factory=list)
    ops: int = 0  # aten ops dispatched (first call)
    error: str = ""  # what `fn` raised, if it did not run to the end (on meta, `.item()` raises)
    device: str = "cpu"  # where the function ran
    not_run: str = ""  # why `fn` did not run at all (not a function, a call it cannot take), or ""

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys(h.kind for h in self.hazards))

    @property
    def verdict(self) -> str:
        """"fails" (capture raises or a replay cannot run), "frozen" (captures; replays keep values or a
        path seen at capture) or "no hazard seen" (which is not "safe": see `blind_spots`)."""
        effects = {h.effect for h in self.hazards}
        if self.not_run:
            return NO_VERDICT
        return FAILS if FAILS in effects else FROZEN if FROZEN in effects else CLEAN

    @property
    def safe(self) -> bool:
        """No hazard seen and the function ran to the end (the exercise's bar; not a proof)."""
        return not self.hazards and not self.error and not self.not_run

    def blind_spots(self) -> list[str]:
        return [b.format(device=self.device) for b in BLIND_SPOTS]

    def summary(self) -> str:
        if self.not_run:
            return f"✗ the function did not run, so there is no verdict: {self.not_run}"
        head = {CLEAN: "✓ no hazard seen (no host syncs, host copies, frozen values or shape changes in this run)",
                FAILS: "✗ capture would fail (or a replay could not run)",
                FROZEN: "⚠ capture would succeed, but replays keep values or a path seen at capture"}[self.verdict]
        if self.error:
            head += f"\n  (the function stopped early: {self.error}; hazards after that line are not seen)"
        return head + "\n  what graph_check cannot see:\n" + "\n".join(f"  - {b}" for b in self.blind_spots())

    def table(self) -> str:
        if self.not_run:
            return self.summary()
        head, _sep, blind = self.summary().partition("\n  what graph_check cannot see:")
        lines = [head]
        for h in self.hazards:
            lines.append(f"  {h}")
            lines.append(f"      fix: {h.fix}")
        return "\n".join(lines) + "\n  what graph_check cannot see:" + blind

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return self.table()

    def __bool__(self) -> bool:
        return self.safe


def _user_line() -> str:
    """The innermost frame outside torch and this toolkit: the user's line, as its source text."""
    for frame in reversed(traceback.extract_stack()):
        f = frame.filename.replace("\\", "/")
        if "/torch/" in f or "<frozen" in f or f.endswith(_HERE) or f.endswith("contextlib.py"):
            continue
        return (frame.line or "").split("  #")[0].strip() or f"line {frame.lineno}"
    return "?"
