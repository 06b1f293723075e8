"""Lesson 06, claim 4 (in-place ops avoid copies): what in place saves in the trace, timings, the cause
measured in paired rounds, and the three ways in place goes wrong (autograd's version counter, an
expanded view, the caller's data overwritten)."""
from __future__ import annotations

import torch

from .. import claim_table, noise, timing
from .. import device as _device
from ..display import text_table
from ..trace import trace_ops
from .evidence import _course_device, _measure, _whole
from .variants import in_place, into_buffer, normalise_in_place, out_of_place


def inplace_traces(n: int = 1 << 20) -> str:
    """What in-place saves, from the trace: the allocation, not the bytes read and written."""
    a, b, out = (torch.empty(n, device="meta") for _ in range(3))
    rows = [("version", "op", "new allocation", "bytes read + written")]
    for name, fn, args in (("a + b", out_of_place, (a, b)), ("a.add_(b)", in_place, (a, b)),
                           ("torch.add(a, b, out=buf)", into_buffer, (a, b, out))):
        t = trace_ops(fn, *args)
        rows.append((name, t.compute_ops[0].name, _device.fmt_bytes(t.alloc_bytes), _device.fmt_bytes(t.accessed_bytes)))
    return text_table(rows)


def inplace_timings(device=None, n: int | None = None, min_run_time: float = 0.1) -> dict[str, timing.Timing]:
    """a + b (a fresh output each call) vs a.add_(b) vs add into a reused buffer, timed.

    On a CPU a fresh large output comes from the OS (mmap), and its first touch page-faults: the
    out=buf version separates the allocation from in-place-ness. On CUDA the caching allocator
    hands back the same block, so the three are close."""
    dev = _course_device(device)
    n = _whole(n, "n") if n is not None else (1 << 26 if dev.type == "cuda" else 1 << 23)
    _device.check_fits(4 * 4 * n, dev, "the in-place comparison")
    a, b, buf = torch.rand(n, device=dev), torch.rand(n, device=dev), torch.empty(n, device=dev)
    calls = {"a + b (new output)": (out_of_place, a, b), "torch.add(a, b, out=buf)": (into_buffer, a, b, buf),
             "a.add_(b) (in place)": (in_place, a, b)}
    return {name: _measure(fn, *args, label=name, min_run_time=min_run_time, device=dev)
            for name, (fn, *args) in calls.items()}


# What inplace_cause's sentences compare (num, den), in their order: out=a vs the method, a separate buffer vs
# writing over an input, a copy vs the in-place add, a fresh output vs a reused buffer.
INPLACE_PAIRS = [("torch.add(a, b, out=a)", "a.add_(b)"), ("torch.add(a, b, out=buf)", "torch.add(a, b, out=a)"),
                 ("buf.copy_(a)", "a.add_(b)"), ("a + b (new output)", "torch.add(a, b, out=buf)")]


def inplace_cause(device=None, n: int | None = None, max_time: float = 4.0):
    """Why a.add_(b) beats torch.add(a, b, out=buf) on a CPU although the op reads and writes the same bytes.

    Five calls in paired rounds (the noise rule): a fresh output (the allocation's cost); the in-place method; the same add written over its own
    input with out=a (is it the method, or where the result goes?); the add into a separate buffer; and a
    copy into that buffer (reads one array, writes one). A CPU cache is write-allocate: storing to a line
    it does not hold first reads that line from memory (unless the store is streamed), so a separate
    destination adds one array of reads; writing over an input that was just read does not. If that is
    the cause, out=buf costs ~4/3 of in-place (4 arrays of traffic against 3) and the copy costs about the
    in-place add (3 against 3) although it moves two thirds of the useful bytes. Returns (Comparison,
    sentences); `claim_table.of(cmp, INPLACE_PAIRS)` is the sentences' table."""
    dev = _course_device(device)
    n = _whole(n, "n") if n is not None else (1 << 26 if dev.type == "cuda" else 1 << 22)
    _device.check_fits(4 * 3 * n, dev, "the in-place comparison")
    a, b, buf = torch.rand(n, device=dev), torch.rand(n, device=dev), torch.empty(n, device=dev)
    fns = {"a + b (new output)": lambda: a + b, "a.add_(b)": lambda: a.add_(b),
           "torch.add(a, b, out=a)": lambda: torch.add(a, b, out=a),
           "torch.add(a, b, out=buf)": lambda: torch.add(a, b, out=buf), "buf.copy_(a)": lambda: buf.copy_(a)}
    pairs = INPLACE_PAIRS
    cmp = noise.compare(fns, pairs=pairs, min_run_time=0.03, max_time=max_time, device=dev)

    def say(pair, template, tie):
        return claim_table.say(cmp.ratio(*pair), template, tie=tie)

    mib = _device.fmt_bytes(4 * n)
    lines = [f"{len(cmp.rounds['a.add_(b)'])} paired rounds, {mib} per array, {dev.type}:",
             "- " + say(pairs[3], "a fresh output each call (a + b) takes {x} adding into a reused buffer: "
                            "the allocation's cost" + (" (a large fresh block comes from the operating system and "
                                                       "page-faults on first touch)" if dev.type == "cpu" else ""),
                            tie="a fresh output each call (a + b) costs the same as a reused buffer (within 5%)"),
             "- " + say(pairs[0], "the same add written over its own input (out=a) takes {x} a.add_(b)",
                            tie="the same add written over its own input (out=a) is as fast as a.add_(b) (within 5%): "
                                "the method is not the difference, where the result goes is"),
             "- " + say(pairs[1], "writing the result into a separate buffer (out=buf) takes {x} writing it "
                            "over an input (out=a), for the same bytes read and written by the op",
                            tie="writing into a separate buffer costs the same as writing over an input (within 5%)"),
             "- " + say(pairs[2], "a copy into that buffer (reads 1 array, writes 1) takes {x} the in-place "
                            "add (reads 2, writes 1)",
                            tie="a copy into that buffer (reads 1 array, writes 1) takes as long as the in-place add "
                                "(reads 2, writes 1)")]
    return cmp, "\n".join(lines)


def inplace_reading(cmp) -> str:
    """What the four ratios of `inplace_cause` say about the cause, only from what they decided."""
    r_sep, r_copy = cmp.ratio("torch.add(a, b, out=buf)", "torch.add(a, b, out=a)"), cmp.ratio("buf.copy_(a)", "a.add_(b)")
    if not (r_sep.decided and r_copy.decided):
        return "The cause is " + (r_copy if r_sep.decided else r_sep).not_decided()
    if r_sep.faster == "torch.add(a, b, out=a)" and r_copy.median > 0.85:
        return ("Read together: a separate destination costs about one more array of memory traffic than the op's "
                "own reads and writes, as write-allocate predicts (4/3 ≈ 1.33× when memory-bound; more where the "
                "buffer's lines must also be evicted from cache). In-place saves that traffic and the allocation, "
                "not the op's bytes.")
    alloc = cmp.ratio("a + b (new output)", "torch.add(a, b, out=buf)")
    if alloc.faster == "torch.add(a, b, out=buf)":
        return ("Here a separate destination costs no more than writing over an input: what in place saved on this "
                "run is the allocation, not memory traffic.")
    return ("Here neither the allocation nor a separate destination cost measurable time at this size: in place saved "
            "memory (no second array), not time.")


def version_counter_error() -> str:
    """Reproduce autograd's refusal: sigmoid saves its output for backward; mul_ then changes it."""
    x = torch.randn(4, requires_grad=True)
    y = x.sigmoid()
    before = y._version
    y.mul_(2)
    after = y._version
    try:
        y.sum().backward()
    except RuntimeError as err:
        first = str(err).split(":")[0].split("\n")[0]  # the sentence; the tensor details vary by version
        return f"y._version {before} -> {after} after y.mul_(2); backward raised:\n  {first}"
    return "backward did not raise"


def expanded_write_error() -> str:
    """Writing in place into an expanded (stride-0) view: many elements share one location."""
    b = torch.zeros(4)
    try:
        b.expand(3, 4).add_(1)
    except RuntimeError as err:
        return str(err).splitlines()[0]
    return "no error"


def aliasing_demo() -> str:
    data = torch.arange(1.0, 6.0)
    first = normalise_in_place(data).clone()
    return (f"data after one call: {data.tolist()}\n"
            f"the caller's tensor was overwritten: {not torch.equal(data, torch.arange(1.0, 6.0))}; "
            f"first result kept: {[round(v, 3) for v in first.tolist()]}")
