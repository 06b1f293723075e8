"""Lesson 06: host syncs, copies from pageable memory, cat in a loop, the same tensor made on every pass.

Evidence: the sync detector's events, each placed among the ops (collect.py), and the op trace.
- host syncs: what the sync detector's CUDA view counts (on a CPU run, every host read, an upper bound): a
  value read on the host, a boolean-mask index, nonzero, an index tensor on the host used on the device, a
  blocking copy, a tensor made from Python data on the device (host_data.py), the ops that read on the host
  inside ATen's CUDA code (syncs.CUDA_KERNEL_SYNCS), at least once a step (a read after the loop, or every N
  steps, is a round trip now and then). Each costs what the launch model says the host's waits add, with the
  step run twice in a row: the queue drains, the GPU idles while the host issues what follows, and each wait
  pays a round trip (launch_queue.SYNC_COST). The fix follows what was read: a batch copied in, a tensor made
  in the step, a value the host must have (an action, a token), or a value only logged;
- a pageable transfer: a host-to-device copy from memory that is not pinned, at least once a step, at least
  MIN_PAGEABLE bytes a step (smaller copies cost their latency, pinned or not) and at least MATERIAL of the step's
  time by the link model (a few copies next to a long step cost nothing worth a finding);
- cat in a loop: a cat that reads the previous cat's output at the same line (the tensor grows);
- allocation churn: a factory op at one line making the same shape two or more times in one step, with other
  work between (a loop's passes, not nn.LSTM's h0 and c0), its extra launches at least MATERIAL of the step's
  time by the model; or (on meta or CUDA) making it in host memory each step and copying it to the device. A
  tensor made on the host for host work (an index for host data) is not the GPU's.
"""
from __future__ import annotations

from .. import launch_queue
from ..sync_table import CUDA_KERNEL_SYNCS
from ..syncs import HostSync, Transfer
from ..transfers import MODEL_NOTE, model as link_model
from .collect import FACTORY_OPS
from ..display import count, number
from .costs import HOST_PER_OP, b, kernels, per_step, t
from .report import Finding

MIN_PAGEABLE = 64 * 2**10
MATERIAL = 0.005  # a cost under this share of the step (half a percent, by the model) is nothing worth a finding
_CHOSEN = ("multinomial", "argmax", "argmin", "topk", "sort", "randint", "bernoulli", "max")  # an action, a token
_NEEDED_FIX = ("the host needs this value (an environment's action, a token to stop on): read many at once (step a "
               "batch of environments per read: a vectorized environment; check every N tokens), or run a network "
               "this small on the CPU")
_DATA_FIX = ("copy it with .to(device, non_blocking=True) from pinned memory (DataLoader(pin_memory=True), or a "
             "pinned buffer reused), or keep the data on the device")
_PYTHON_FIX = ("build it on the device from device tensors (torch.stack, t.view, torch.arange(..., device=...)); if "
               "it does not change, make it once, outside the step")
_LIST_FIX = "index with a slice (x[:, -1:] keeps the dim), or with an index tensor made once on the device"
_CHECK_FIX = ("pass validate_args=False to the distribution (or torch.distributions.Distribution."
              "set_default_validate_args(False) once): its argument checks read their result on the host")

_FIXES = (  # (a piece of HostSync.what, the fix)
    ("(index on the host)", "make the index on the device (torch.randperm(n, device=...), or idx.to(device, "
                            "non_blocking=True) once, outside the loop)"),
    ("(bool mask)", "keep the shape fixed: torch.where(mask, x, 0), x * mask or masked_fill; if the mask "
                    "selects everything, drop it"),
    ("nonzero", "keep the mask as a mask (torch.where / masked_fill), or torch.nonzero_static(x, size=...)"),
    ("repeat_interleave", "pass output_size= (then nothing is read on the host)"),
    ("one_hot", "pass num_classes="),
    ("bincount", "torch.zeros(n, device=...).index_add_(0, x, ones): no host read"),
    ("_to_copy", "make it on the device (device=...) once, outside the loop; or pin it and copy with "
                 "non_blocking=True"),
    ("copy_", "copy from pinned memory with non_blocking=True, or keep the data on the device"),
    ("__repr__", "print every N steps, or keep the value on the device (t.detach()) and print after the loop"),
    ("is_nonzero", "torch.where on the device instead of a Python if on a tensor"),
    ("Tensor.cpu()", "keep it on the device; copy to the host once, after the loop"),
    ("Tensor.tolist()", "keep it on the device; copy to the host once, after the loop"),
    ("Tensor.numpy()", "keep it on the device; copy to the host once, after the loop"),
)
_READ_FIX = ("keep the value on the device (losses[s] = loss.detach()) and read it once at the end, or every N "
             "steps")


def _fix(what: str) -> str:
    for piece, fix in _FIXES:
        if piece in what:
            return fix
    for op in CUDA_KERNEL_SYNCS:
        if op.split(" ")[0] in what:
            return f"avoid the host read: {CUDA_KERNEL_SYNCS[op][1]} (syncs.CUDA_KERNEL_SYNCS)"
    return _READ_FIX


def _source(ev, at: int):
    """The op that made what the blocking copy just before the event `at` copied, or None (storage keys are
    reused once freed: the last op before the copy that made it)."""
    i = at - 1
    if not 0 <= i < len(ev.info):
        return None
    ins = set(ev.info[i].ins)
    j = next((j for j in range(i - 1, -1, -1) if ins & set(ev.info[j].outs)), None)
    return ev.trace.ops[j] if j is not None else None


def _fits(ev, at: int, event: HostSync) -> str:
    """The fix for this sync, from what it read or copied."""
    what = event.what
    if "validate_args" in event.why:
        return _CHECK_FIX
    if "Python list" in what:
        return _LIST_FIX
    if "Python data" in what:
        return _PYTHON_FIX
    if what.startswith(("aten._to_copy", "aten.copy_")) and "(cpu → " in what:
        src = _source(ev, at)
        return _fix(what) if src is not None and src.name in FACTORY_OPS else _DATA_FIX
    if any(f", made by {name}" in event.why for name in _CHOSEN) and "read: float" not in event.why \
            and "read: bfloat" not in event.why:  # host_data.what_was_read: an integer the data chose
        return _NEEDED_FIX
    return _fix(what)


def host_syncs(ev, gpu, ks, sync_after: set) -> list[Finding]:
    by: dict = {}
    for at, event, where, step, phase in ev.sync_at:
        if isinstance(event, HostSync):
            by.setdefault((where.file, where.line), []).append((event, where, phase, at))
    if not by:
        return []
    total = len([e for e in ev.sync_at if isinstance(e[1], HostSync)])
    extra = max(0.0, gpu.sync_cost(ks, sync_after)) / ev.steps
    view = "" if ev.syncs.view == "cuda" else " (a CPU run: every host read counted, as if every tensor were on " \
                                              "a GPU; an upper bound)"
    out = []
    for rows in by.values():
        if len(rows) < ev.steps:  # fewer than once a step: after the loop, or every N steps
            continue
        whats = dict.fromkeys(e.what for e, _w, _p, _a in rows)
        why = "; ".join(dict.fromkeys(e.why for e, _w, _p, _a in rows))
        in_backward = " in backward (the backward of a boolean-mask index: index_put_ with the saved mask)" \
            if all(p == "backward" for _e, _w, p, _a in rows) and any("bool mask" in w for w in whats) else \
            " in backward" if all(p == "backward" for _e, _w, p, _a in rows) else ""
        share = extra * len(rows) / total
        fix = _FIXES[1][1] + " (in the forward)" if "bool mask" in in_backward else \
            _fits(ev, rows[0][3], rows[0][0])
        out.append(Finding(
            "host sync", rows[0][1],
            f"{count(per_step(len(rows), ev.steps), 'host sync')} a step{in_backward}: {', '.join(whats)} — {why}{view}",
            f"≈ {t(share)} a step: the host waits here until the GPU's queue has drained, so it cannot queue work "
            f"ahead; the GPU then idles while the host issues what follows, and each wait pays a host-GPU round trip "
            f"({t(launch_queue.SYNC_COST)}, reported) — this line's share of {t(extra)} for "
            f"{'the' if total == ev.steps else 'all'} {count(per_step(total, ev.steps), 'sync')} a step; {gpu.label}",
            fix, {"per_step": len(rows) / ev.steps, "what": list(whats)}, share))
    return out


def pageable_transfers(ev, gpu) -> list[Finding]:
    link = link_model(gpu.name)
    by: dict = {}
    for _at, event, where, _step, _phase in ev.sync_at:
        if isinstance(event, Transfer) and event.direction == "host → device" and not event.pinned:
            by.setdefault((where.file, where.line), []).append((event, where))
    out = []
    step_s = gpu.eager(kernels(ev)) / ev.steps
    for rows in by.values():
        nbytes = sum(e.nbytes for e, _w in rows)
        per, each = nbytes / ev.steps, nbytes / len(rows)
        copies_s = len(rows) / ev.steps * link.seconds(each, pinned=False) if link else None
        if len(rows) < ev.steps or per < MIN_PAGEABLE or (copies_s is not None and copies_s < MATERIAL * step_s):
            continue
        cost = (f"{t(link.seconds(per, pinned=False))} a step over {link.pcie} from pageable memory, "
                f"{t(link.seconds(per, pinned=True))} pinned — {MODEL_NOTE}") if link else "no link model for this GPU"
        blocking = sum(e.blocking for e, _w in rows)
        out.append(Finding(
            "pageable transfer", rows[0][1],
            f"{count(per_step(len(rows), ev.steps), 'copy')} host → device a step, {b(per)} a step, from pageable memory"
            + (f"; {number(per_step(blocking, ev.steps))} blocking (also a host sync)" if blocking else ", non_blocking"),
            cost,
            "keep the data on the device; else pin the host buffer once (DataLoader(pin_memory=True), or a pinned "
            "buffer reused) and copy with .to(device, non_blocking=True)",
            {"bytes_per_step": per, "copies_per_step": len(rows) / ev.steps},
            (link.seconds(per, False) - link.seconds(per, True)) if link else None))
    return out


def cat_loops(ev, gpu) -> list[Finding]:
    made_by_cat: dict = {}  # storage key -> index of the cat that made it
    chains: dict = {}  # (file, line) -> [cat indices that grew the previous one]
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if op.name != "cat" or info.phase not in ("forward", "optimizer") or op.where is None:
            for k in info.outs:  # memory made anew by another op: a freed cat's storage reused (keys are addresses)
                if k not in info.ins:
                    made_by_cat.pop(k, None)
            continue
        for k in info.ins:
            j = made_by_cat.get(k)
            if j is not None and ev.trace.ops[j].where == op.where:
                chains.setdefault((op.where.file, op.where.line), [j]).append(i)
                break
        for k in info.outs:
            made_by_cat[k] = i
    out = []
    for idx in chains.values():
        ops = [ev.trace.ops[i] for i in idx]
        copied = sum(op.write_bytes for op in ops)
        final = ops[-1].write_bytes
        seconds = gpu.bytes_time(2 * max(0, copied - final)) / ev.steps
        out.append(Finding(
            "cat in a loop", ops[0].where,
            f"{count(len(ops), 'cat')} in one call, each reading the last one's output: {b(copied)} copied to build "
            f"{b(final)} ({copied / max(final, 1):.1f}×), growing as n²",
            (f"≥ {t(seconds)} a step on the extra bytes" if seconds >= 1e-7 else
             "negligible at this size: the extra bytes grow as n² with the passes") + f" — {gpu.label}",
            "collect the pieces in a list and torch.cat once at the end (lesson 06 §3: cat once)",
            {"cats": len(ops), "copied": copied, "final": final}, seconds))
    return out


def allocation_churn(ev, gpu) -> list[Finding]:
    on_device = ev.device in ("meta", "cuda")
    moved = {k for _at, e, w, _s, _p in ev.sync_at if isinstance(e, Transfer) for k in [(w.file, w.line)]}
    step_s = gpu.eager(kernels(ev)) / ev.steps
    by: dict = {}
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if op.name in FACTORY_OPS and info.phase == "forward" and op.where is not None and op.out_shapes:
            key = (op.where.file, op.where.line, op.name, op.out_shapes[0])
            by.setdefault(key, []).append((op, info.step, i))
    out = []
    for (f, line, _name, shape), rows in by.items():
        per: dict = {}
        for (_op, s, i), (_o2, s2, j) in zip(rows, rows[1:]):  # again after other work: a loop, not h0 and c0
            if s == s2 and any(not ev.trace.ops[k].is_view and ev.trace.ops[k].name not in FACTORY_OPS
                               for k in range(i + 1, j)):
                per[s] = per.get(s, 1) + 1
        per = per or {0: 1}
        on_host = on_device and rows[0][0].device == "cpu"
        host_moved = on_host and (f, line) in moved and len(rows) >= ev.steps
        if (max(per.values()) < 2 or on_host or (len(rows) - ev.steps) * HOST_PER_OP < MATERIAL * ev.steps * step_s) \
                and not (host_moved and len(rows) >= 2):  # host work for host data, or costs next to nothing
            continue
        op = rows[0][0]
        how = "in host memory, then copied to the device, " if host_moved else ""
        out.append(Finding(
            "allocation churn", op.where,
            f"torch.{op.name}(...) of {'x'.join(map(str, shape)) or 'a scalar'} made {count(len(rows), 'time')} in "
            f"one call ({how}{number(per_step(len(rows), ev.steps))} a step), the same shape each time",
            f"{count(per_step(len(rows), ev.steps), 'extra launch')} a step"
            + (" and a copy from the host each (see the transfer and sync findings)" if host_moved else "")
            + f" — {gpu.label}",
            "make it once, outside the loop, on the device (device=...), and reuse it (or drop it, if it is a "
            "constant the ops can take as a number)",
            {"made": len(rows), "per_step": len(rows) / ev.steps}))
    return out
