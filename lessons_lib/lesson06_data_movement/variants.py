"""Lesson 06's variants: the forum's code (seed 001) and its fixes, claim by claim.

The notebook renders these with `show_source`; the experiments that time and trace them are in the
evidence_*.py files beside this one.
"""
from __future__ import annotations

import torch


# === 1 · transfers and syncs (seed example 1) =====================================================

# The seed's three examples, at its sizes (it reports no timings: "the output demonstrates...").
SEED_EXAMPLE1 = {"size": (10000, 1000), "num_iterations": 100}
SEED_EXAMPLE2 = {"size": (5000, 2000), "num_iterations": 100}
SEED_EXAMPLE3 = {"num_tensors": 10, "size": (1000, 1000), "num_iterations": 100}


def posted_transfer_loop(cpu_tensor, num_iterations: int, device):
    """Seed example 1, 'inefficient', as posted (`.cuda()` written as `.to(device)`)."""
    for _ in range(num_iterations):
        gpu_tensor = cpu_tensor.to(device)
        result = torch.sum(gpu_tensor)
        result = result.cpu()
    return result


def copy_only_loop(cpu_tensor, num_iterations: int, device):
    """The same copies, but the result stays on the device: the copy's cost without a read-back."""
    for _ in range(num_iterations):
        gpu_tensor = cpu_tensor.to(device, non_blocking=True)
        result = torch.sum(gpu_tensor)
    return result


def kept_on_device_loop(gpu_tensor, num_iterations: int):
    """Seed example 1, 'efficient': the data made once on the device, nothing copied in the loop."""
    for _ in range(num_iterations):
        result = torch.sum(gpu_tensor)
    return result


def hidden_syncs_example(x, threshold: float = 0.5):
    """A training-loop fragment full of host syncs that look harmless."""
    loss = (x * x).mean()
    print(f"loss {loss:.3f}")  # f-string of a 0-d tensor: .item()
    if loss > threshold:  # a tensor in an if
        x = x / 2
    big = x[x > threshold]  # boolean mask: output size depends on the data
    rows = torch.nonzero(x > threshold)  # data-dependent size
    stats = x.mean(0).tolist()  # copies to the host
    total = x.sum().item()  # reads a value
    return big, rows, stats, total


def hidden_syncs_fixed(x, threshold: float = 0.5):
    """The same results, kept on the device: masks become multiplications and `where`."""
    loss = (x * x).mean()
    x = torch.where(loss > threshold, x / 2, x)
    keep = x > threshold
    big = torch.where(keep, x, torch.zeros_like(x))  # fixed size: zeros where the mask is False
    return big, keep, x.mean(0), x.sum(), loss


def copy_pageable(dst, host, pinned):
    """Copy from ordinary (pageable) host memory."""
    return dst.copy_(host)


def copy_pinned(dst, host, pinned):
    """Copy from an already pinned buffer, queued (non_blocking)."""
    return dst.copy_(pinned, non_blocking=True)


def pin_then_copy(dst, host, pinned):
    """Pin a fresh copy, then copy: the pin is a host copy of its own."""
    fresh = host if host.is_meta else host.pin_memory()  # traced on meta (the estimate): nothing to pin
    return dst.copy_(fresh, non_blocking=True)


# === 2 · Python loops vs vector ops (seed example 2) ==============================================


def posted_elementwise(a, b, out, count: int):
    """Seed example 2's inner loops, for the first `count` elements of `out` (never run it whole)."""
    cols = a.shape[1]
    for k in range(count):
        i, j = divmod(k, cols)
        out[i, j] = a[i, j] + b[j % 10]
    return out


def posted_broadcast(a, b):
    """Seed example 2's 'efficient' version as posted: a (5000, 2000) + b (10,) does not broadcast."""
    return a + b


def broadcast_view(a, b):
    """What the loop computes, as one op: column j gets b[j % 10]. Columns viewed as (cols/10, 10):
    b broadcasts over them without a copy (cols must be a multiple of b's length)."""
    rows, cols = a.shape
    return (a.view(rows, cols // b.shape[0], b.shape[0]) + b).view(rows, cols)


def broadcast_gather(a, b):
    """Any number of columns: gather b[j % 10] once (a vector of cols elements), then broadcast."""
    idx = torch.arange(a.shape[1], device=a.device) % b.shape[0]
    return a + b[idx]


# === 3 · torch.cat in a loop (seed example 3) =====================================================
# Inputs are the pieces themselves: fn(*pieces), each (rows, cols).


def cat_in_a_loop(*pieces):
    """Seed example 3, 'inefficient': grow the result by one piece per pass (minus the `.cuda()`)."""
    result = pieces[0].new_empty(0)
    for tensor in pieces:
        result = torch.cat((result, tensor))
    return result


def preallocate_and_fill(*pieces):
    """Seed example 3, 'efficient': allocate the result once, copy each piece into its rows."""
    rows = sum(p.shape[0] for p in pieces)
    result = pieces[0].new_empty((rows, *pieces[0].shape[1:]))
    offset = 0
    for tensor in pieces:
        result[offset:offset + tensor.size(0)] = tensor
        offset += tensor.size(0)
    return result


def cat_once(*pieces):
    """Collect the pieces, then one `torch.cat`: one op, every byte copied once."""
    return torch.cat(pieces)


# === 4 · in-place ops =============================================================================


def out_of_place(a, b):
    return a + b


def in_place(a, b):
    return a.add_(b)


def into_buffer(a, b, out):
    return torch.add(a, b, out=out)


def normalise_in_place(x):
    """Looks harmless, changes the caller's tensor: a second call sees different data."""
    x -= x.mean()
    x /= x.std()
    return x


# === 5 · no_grad and inference_mode ===============================================================


def forward_with_grad(model, x):
    return model(x)


def forward_no_grad(model, x):
    with torch.no_grad():
        return model(x)


def forward_inference_mode(model, x):
    with torch.inference_mode():
        return model(x)


GRAD_MODES = {"with autograd": forward_with_grad, "no_grad": forward_no_grad, "inference_mode": forward_inference_mode}
