"""Lessons 01 and 02: operands expanded and copied before a GEMM, and what autograd keeps of them.

Evidence, from the op trace and the saved-tensor watch (never from a name):
- a copy op (clone, contiguous, _reshape_copy) in the forward that writes at least twice the bytes it reads
  has copied an expanded (stride-0, broadcast) view; when a GEMM runs on the same line it is matmul's broadcast
  path (LinearAlgebra.cpp, _matmul_impl: both operands expanded to the full batch and copied, then one bmm);
- a tensor saved for backward whose storage that copy made: BmmBackward0 keeps the copy (lesson 02's gigabyte);
- a softmax over a square last pair of dims (…, T, T) whose result is saved for backward: attention by hand,
  which keeps the probabilities; scaled_dot_product_attention keeps O(B·H·T) (trace.sdpa_as_on_cuda);
- a contraction written as a broadcast multiply then a sum (a product EXPANDED times larger than each operand,
  reduced at once at the same line): lesson 01's expansion beyond matmul. Autograd's MulBackward keeps the
  operands, not the product (checked with memory.ledger), but the product is written and read in the forward and
  made again, product-sized, for each operand's gradient in backward; einsum runs it as one batched GEMM.
"""
from __future__ import annotations

import math

from ..display import count
from .costs import b, per_step, saved_at_peak, share, t
from .report import Finding

COPIES = ("clone", "contiguous", "_reshape_copy")
EXPANDED = 2  # a copy writing >= 2x what it reads copied a broadcast view
SOFTMAX = ("_softmax", "_safe_softmax")


def expanded_copies(ev) -> dict[int, int]:
    """{op index: expansion factor} of the forward copies of expanded views."""
    out = {}
    for i, (op, info) in enumerate(zip(ev.trace.ops, ev.info)):
        if info.phase == "forward" and op.name in COPIES and 0 < EXPANDED * op.read_bytes <= op.write_bytes:
            out[i] = round(op.write_bytes / op.read_bytes)
    return out


def _operands(ev, i: int) -> tuple:
    """The shape matmul expanded for copy i (the latest expand at its line producing its input's shape)."""
    op = ev.trace.ops[i]
    for j in range(i - 1, max(-1, i - 12), -1):
        e = ev.trace.ops[j]
        if e.name == "expand" and e.where == op.where and e.out_shapes and e.out_shapes[0] == op.in_shapes[0]:
            return e.in_shapes[0]
    return op.in_shapes[0]


def _matmul_operands(ev, gemm: int) -> tuple | None:
    """The two shapes matmul was given, from the two expands before its bmm at the same line."""
    where, found = ev.trace.ops[gemm].where, []
    for j in range(gemm - 1, max(-1, gemm - 12), -1):
        e = ev.trace.ops[j]
        if e.where != where:
            break
        if e.name == "expand":
            found.append(e.in_shapes[0])
            if len(found) == 2:
                return found[1], found[0]
    return None


def einsum_fix(a: tuple, c: tuple) -> str:
    """One einsum over matmul's own operands: a size-1 batch dim broadcasts without a copy of the other side."""
    nb = max(len(a), len(c)) - 2
    batch = "abcdefghij"[:nb]
    sa = batch[nb - (len(a) - 2):] + "mk"
    sc = batch[nb - (len(c) - 2):] + "kn"
    return f'torch.einsum("{sa},{sc}->{batch}mn", A, B)'


def _shape(s) -> str:
    return "x".join(map(str, s))


def broadcast_matmuls(ev, gpu) -> list[Finding]:
    copies = expanded_copies(ev)
    by_line: dict = {}
    for i, factor in copies.items():
        op = ev.trace.ops[i]
        gemm = next((j for j in range(i + 1, min(len(ev.trace.ops), i + 12))
                     if ev.trace.ops[j].gemm and ev.trace.ops[j].where == op.where), None)
        if gemm is not None:
            by_line.setdefault((op.where.file, op.where.line), []).append((i, factor, gemm))
    out = []
    for rows in by_line.values():
        first = ev.trace.ops[rows[0][0]]
        written = sum(ev.trace.ops[i].write_bytes for i, _f, _g in rows)
        kinds = dict.fromkeys(f"{_shape(_operands(ev, i))} → {_shape(ev.trace.ops[i].out_shapes[0])} ({f}×)"
                              for i, f, _g in rows)
        operands = _matmul_operands(ev, rows[0][2])
        gemm = ev.trace.ops[rows[0][2]]
        seconds = sum(gpu.kernel(0, ev.trace.ops[i].accessed_bytes) for i, _f, _g in rows) / ev.steps
        fix = (f"{einsum_fix(*operands)} on matmul's own operands ({_shape(operands[0])} and {_shape(operands[1])}): "
               "one GEMM over views, nothing copied" if operands else
               "torch.einsum over the original operands, or fold the batch into one GEMM (x.reshape(-1, K) @ W)")
        out.append(Finding(
            "broadcast matmul", first.where,
            f"{count(per_step(len(rows), ev.steps), 'expanded copy')} a step "
            f"({b(written / ev.steps)} written): "
            f"{'; '.join(kinds)}, each before one {gemm.name} ({_shape(gemm.in_shapes[-2])} @ "
            f"{_shape(gemm.in_shapes[-1])})",
            f"≥ {t(seconds)} a step writing and reading the copies (forward only; backward also makes a gradient "
            f"per batch row and sums it) — {gpu.label}",
            fix, {"copies": len(rows) / ev.steps, "bytes": written / ev.steps}, seconds))
    return out


def saved_copies_and_attention(ev, gpu) -> list[Finding]:
    """Lesson 02: the first backward's ledger (or the returned graph's), rows made by an expanded copy or a
    square softmax."""
    if not ev.ledgers:
        return []
    snap = max(ev.ledgers, key=lambda s: s.ledger.total_bytes)
    copies = expanded_copies(ev)
    groups: dict = {}
    for row, op_i in zip(snap.ledger.entries, snap.made_by):
        if op_i is None or not row.counted:
            continue
        op = ev.trace.ops[op_i]
        if op_i in copies:
            kind = "expanded copy kept for backward"
        elif op.name in SOFTMAX and len(op.out_shapes[0]) >= 3 and op.out_shapes[0][-1] == op.out_shapes[0][-2]:
            kind = "attention matrix kept for backward"
        else:
            continue
        groups.setdefault((kind, op.where.file, op.where.line), []).append((row, op))
    out = []
    for (kind, _f, _l), rows in groups.items():
        nbytes = sum(r.bytes for r, _op in rows)
        nodes = ", ".join(dict.fromkeys(f"{r.node}.{r.slot}" for r, _op in rows))
        shapes = ", ".join(dict.fromkeys(_shape(r.shape) for r, _op in rows))
        part = f"{share(nbytes, snap.ledger.total_bytes)} of the {b(snap.ledger.total_bytes)} saved"
        if kind == "expanded copy kept for backward":
            evidence = f"{count(len(rows), 'expanded copy')} ({shapes}) kept for backward by {nodes}: {b(nbytes)}, {part}"
            fix = ("the einsum of lesson 01 (or one GEMM over a reshape): backward then keeps views of the operands "
                   "you already hold, or a copy of their own size, not one per batch row")
        else:
            evidence = f"the probabilities ({shapes}) kept for backward by {nodes}: {b(nbytes)}, {part}"
            fix = ("F.scaled_dot_product_attention(q, k, v) (is_causal=True for a causal mask): its flash and "
                   "memory-efficient kernels keep the output and one logsumexp per row, not (…, T, T); "
                   "nn.MultiheadAttention takes that path with need_weights=False")
        cost = (f"memory: {b(nbytes)} held from the forward to the backward of every step; writing and reading "
                f"it back ≥ {t(gpu.bytes_time(2 * nbytes))} a step — {gpu.label}")
        out.append(Finding(kind, rows[0][1].where, evidence, cost, fix,
                           {"saved_bytes": nbytes, "of_total": snap.ledger.total_bytes}))
    return out


def _reduced_dims(before: tuple, after: tuple) -> list[int]:
    """The dims a sum or mean took `before` to `after` (keepdim or not)."""
    if len(after) == len(before):
        return [d for d, (a, b) in enumerate(zip(before, after)) if b == 1 and a != 1]
    out, j = [], 0
    for d, size in enumerate(before):
        if j < len(after) and after[j] == size and len(before) - d > len(after) - j - 1:
            j += 1
        else:
            out.append(d)
    return out


def contraction_fix(product: tuple, operands: tuple, reduced: list[int]) -> str:
    """torch.einsum over the operands with their broadcast (size-1) dims squeezed, the summed dims contracted."""
    letters = "abcdefghijklmnop"[:len(product)]
    subs, shapes = [], []
    for shape in operands:
        own = letters[len(product) - len(shape):]
        keep = [(c, n) for c, n in zip(own, shape) if not (n == 1 and product[letters.index(c)] != 1)]
        subs.append("".join(c for c, _n in keep))
        shapes.append(_shape(tuple(n for _c, n in keep)) or "scalar")
    out = "".join(c for d, c in enumerate(letters) if d not in reduced)
    return (f'torch.einsum("{subs[0]},{subs[1]}->{out}", A, B), with A and B the operands without their size-1 '
            f"dims ({shapes[0]} and {shapes[1]}): one batched GEMM, the product never in memory")


def broadcast_contractions(ev, gpu) -> list[Finding]:
    """A broadcast multiply whose product is EXPANDED times or more larger than each operand, summed at once at the
    same line: a contraction written out. The product is written and read back in the forward; in backward the
    gradient of each operand that needs one is product-sized before it is summed; einsum does it as one GEMM."""
    ops, by = ev.trace.ops, {}
    for i, (op, info) in enumerate(zip(ops, ev.info)):
        if op.name != "mul" or info.phase != "forward" or len(op.in_shapes) != 2 or not op.out_shapes:
            continue
        sizes = [math.prod(s) for s in op.in_shapes]
        if min(sizes) == 0 or math.prod(op.out_shapes[0]) < EXPANDED * max(sizes):
            continue
        j = next((j for j in range(i + 1, len(ops)) if not ops[j].is_view), None)
        if j is None or ops[j].name not in ("sum", "mean") or ops[j].where != op.where \
                or not set(info.outs) & set(ev.info[j].ins):
            continue
        by.setdefault((op.where.file, op.where.line), []).append((i, j))
    kept_rows = saved_at_peak(ev)
    out = []
    for rows in by.values():
        i, j = rows[0]
        op = ops[i]
        product = op.write_bytes
        moved = (2 + (4 if ev.backward_calls else 0)) * product * len(rows) / ev.steps
        kept = sum(kept_rows.get(k, 0) for k, _j in rows)
        out.append(Finding(
            "contraction by broadcast", op.where,
            f"{_shape(op.in_shapes[0])} * {_shape(op.in_shapes[1])} makes a {_shape(op.out_shapes[0])} product "
            f"({b(product)}, {math.prod(op.out_shapes[0]) // max(math.prod(s) for s in op.in_shapes)}× its larger "
            f"operand), then {ops[j].name} reduces it, {count(per_step(len(rows), ev.steps), 'time')} a step"
            + (f"; {b(kept)} of it kept for backward" if kept else "; backward makes a product-sized gradient for "
               "each operand that needs one" if ev.backward_calls else ""),
            f"≥ {t(gpu.bytes_time(moved))} a step writing and reading products (forward"
            + (" and backward" if ev.backward_calls else "") + f"), and {b(product)} of memory at its peak — "
            + gpu.label,
            contraction_fix(op.out_shapes[0], op.in_shapes, _reduced_dims(ops[j].in_shapes[0], ops[j].out_shapes[0])),
            {"product_bytes": product, "times_per_step": len(rows) / ev.steps}, gpu.bytes_time(moved)))
    return out
