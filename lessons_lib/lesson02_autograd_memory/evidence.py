"""Lesson 02's evidence: the thread's numbers reproduced, and what autograd keeps and allocates (on meta:
any shape, nothing allocated)."""
from __future__ import annotations

import torch

from .. import device as _device
from .. import memory
from ..device import fmt_bytes
from ..display import text_table
from .variants import THREAD_SHAPE, broadcast_matmul, make_inputs, strategy_1, strategy_2

# What the thread printed with torch.cuda.memory_allocated() after each forward (x requires grad).
POSTED = {"strategy 1": 1107427328, "strategy 2": 34603008}
MiB = 2**20


def expanded_copy_bytes(p: dict = THREAD_SHAPE, dtype=torch.float32) -> int:
    """Bytes of W expanded to every row of the batch: B·G·D·D elements (1 GiB at the seed)."""
    return p["batch"] * p["groups"] * p["dim"] ** 2 * dtype.itemsize


def step_memory(fn, x, W, g=None) -> dict[str, float]:
    """A variant's memory in one step, in MiB: new bytes saved for backward (the ledger) and the
    forward and backward peaks (the timeline: measured where it can be, else predicted)."""
    saved = memory.ledger(fn, x, W).total_bytes
    p = memory.timeline(fn, x, W).peaks()

    def best(b: memory.Bytes) -> int:
        return b.measured if b.measured is not None else b.predicted

    return {"saved for backward (MiB)": saved / MiB, "forward peak (MiB)": best(p.forward) / MiB,
            "backward peak (MiB)": best(p.backward) / MiB}


# --- reproduce and look inside (on meta: any shape, nothing allocated) ------------------------------


def thread_inputs(params: dict = THREAD_SHAPE, x_grad: bool = True, w_grad: bool = False, device="meta"):
    """x and W at a shape (the thread's by default), on `meta` unless told otherwise."""
    x, W, _g = make_inputs(params, torch.device(device), torch.float32, x_grad, w_grad)
    return x, W


def allocated_after_forward(fn, *inputs) -> int:
    """What `torch.cuda.memory_allocated()` would print after `fn(*inputs)` on an otherwise empty
    GPU: the inputs plus whatever the call allocated that is still alive (the output, and what
    autograd saved). Predicted from the op trace and tensor lifetimes, so `meta` inputs work."""
    held = sum(t.untyped_storage().nbytes() for t in inputs)

    def call_then_look(*args):
        out = fn(*args)
        # One more (empty) op, so that the timeline samples memory after `fn` has returned: a
        # temporary that `fn`'s C++ code holds until it returns is freed by then.
        torch.empty(0, device=args[0].device)
        return out

    return held + memory.timeline(call_then_look, *inputs, backward=False, measure=False).peaks().after_forward.predicted


def reproduce_table(params: dict = THREAD_SHAPE) -> str:
    """The thread's two strategies, with and without x requiring grad, predicted on `meta`."""
    B, G, D = params["batch"], params["groups"], params["dim"]
    rows = [("strategy", "x requires grad", "predicted memory_allocated()", "posted")]
    for name, fn in (("strategy 1", strategy_1), ("strategy 2", strategy_2)):
        for grad in (True, False):
            x = torch.empty(B, G * D, device="meta", requires_grad=grad)
            W = torch.empty(G, D, D, device="meta") if fn is strategy_1 else torch.empty(G * D, G * D, device="meta")
            n = allocated_after_forward(fn, x, W)
            posted = f"{POSTED[name]:,}" if grad and params == THREAD_SHAPE else ""
            rows.append((name, "yes" if grad else "no", f"{n:,} B ({fmt_bytes(n)})", posted))
    return text_table(rows, numbers=True)


def measure_reproduction(device="cuda") -> dict[str, int] | None:
    """The thread's experiment on a CUDA GPU: memory_allocated() after each forward, counted from
    before x and W were made (as in the post). None without CUDA."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    B, G, D = THREAD_SHAPE["batch"], THREAD_SHAPE["groups"], THREAD_SHAPE["dim"]
    torch.bmm(torch.ones(1, 1, 1, device=dev), torch.ones(1, 1, 1, device=dev))  # cuBLAS's one-off workspace
    out = {}
    for name, w_shape in (("strategy 1", (G, D, D)), ("strategy 2", (G * D, G * D))):
        for grad in (True, False):
            _device.free_memory(dev)
            torch.cuda.synchronize(dev)
            base = torch.cuda.memory_allocated(dev)
            x = torch.randn(B, G * D, device=dev, requires_grad=grad)
            W = torch.randn(*w_shape, device=dev)
            y = (strategy_1 if name == "strategy 1" else strategy_2)(x, W)
            torch.cuda.synchronize(dev)
            out[f"{name}, x requires grad: {'yes' if grad else 'no'}"] = torch.cuda.memory_allocated(dev) - base
            del x, W, y
    _device.free_memory(dev)
    return out


def requires_grad_facts(fn=broadcast_matmul, params: dict = THREAD_SHAPE) -> list[dict]:
    """What a variant keeps and allocates, depending on which of x and W require grad (on meta).

    One dict per case: bytes saved for backward (new), held after the forward, the forward and
    backward peaks (beyond the inputs), and the largest allocation of the backward as
    (op, shape, bytes)."""
    facts = []
    for label, xg, wg in (("x only (the thread)", True, False), ("W only", False, True), ("x and W", True, True)):
        x, W = thread_inputs(params, xg, wg)
        led = memory.ledger(fn, x, W)
        tl = memory.timeline(fn, x, W)
        p = tl.peaks()
        back = [op for op, r in zip(tl.trace.ops, tl.rows) if r.phase == "backward" and not op.is_view]
        big = max(back, key=lambda op: op.alloc_bytes, default=None)
        facts.append({"requires grad": label, "saved": led.total_bytes, "after forward": p.after_forward.predicted,
                      "forward peak": p.forward.predicted, "backward peak": p.backward.predicted,
                      "largest backward allocation": (big.name, big.out_shapes[0], big.alloc_bytes) if big else None})
    return facts


def requires_grad_table(fn=broadcast_matmul, params: dict = THREAD_SHAPE) -> str:
    """`requires_grad_facts` as a fixed-width table."""
    rows = [("requires grad", "saved for backward", "held after forward", "forward peak", "backward peak",
             "largest backward allocation")]
    for f in requires_grad_facts(fn, params):
        big = f["largest backward allocation"]
        big_s = f"{big[0]} {'x'.join(map(str, big[1]))} ({fmt_bytes(big[2])})" if big else "-"
        rows.append((f["requires grad"], *(fmt_bytes(f[k]) for k in ("saved", "after forward", "forward peak",
                                                                      "backward peak")), big_s))
    return text_table(rows, numbers=True)

