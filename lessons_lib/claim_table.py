"""One number per claim: a table of timings whose ratio column is the very `noise.Ratio` its sentences quote.

A sentence decided by paired rounds quotes the median of the per-round ratios (`Ratio.median`). A table of
each variant's median time invites the reader to divide two rows, and that is another statistic: the ratio
of the medians, which a load that changed between rounds moves (a student saw "3.28 ms against 279 µs",
11.8×, beside a sentence's 16.4×). So a table beside such a sentence prints the ratio itself, from the same
`Ratio` object, formatted by `ratio_text`, and `say` puts that same text in the sentence. Where dividing the
medians would give a visibly different number, the table says so in one line, and why.

    pairs = [("broadcast matmul", "einsum")]
    cmp = noise.compare(fns, pairs=pairs)
    print(claim_table.of(cmp, pairs))                       # ... 52.1× einsum
    print(claim_table.say(cmp.ratio(*pairs[0]), "it takes {x} einsum's time"))   # it takes 52.1× einsum's time

`tests/test_one_number.py` reads the executed notebooks and fails where a sentence and its table disagree.
"""
from __future__ import annotations

import math
import re

from .timing import Timing, fmt_time

HEADER = "× the time of"  # the ratio column's header starts so: `read` (and the notebook test) find the tables by it
PAIRED = "median of the paired rounds' ratios"  # what the column holds, for `noise.compare`'s ratios
NOT_DECIDED = "(not decided)"


def ratio_text(r: float) -> str:
    """A ratio as every table and sentence prints it: three significant figures, then ×."""
    if not math.isfinite(r):
        return f"{r}×"
    return f"{float(f'{r:.3g}'):g}×"


def say(ratio, template: str, tie: str | None = None, **extra) -> str:
    """`ratio.say(template, tie=...)` with one more field, {x}: `ratio_text` of the ratio's median, the text
    its table prints. Not decided: the noise rule's sentence, as `Ratio.say` gives it."""
    return ratio.say(template, tie=tie, x=ratio_text(ratio.median), **extra)


def table(timings, ratios, how: str = PAIRED) -> str:
    """Each variant's time over the rounds (`Comparison.over_rounds()`: median and IQR of the rounds' medians),
    and, on the row of each ratio's `num`, the ratio to its `den` (the `Ratio` objects the sentences read).

    timings: a list of `Timing` (named by their labels), or a dict name -> Timing. ratios: `noise.Ratio`s whose
    `num` and `den` are those names; one the noise rule has not decided is printed with "(not decided)".
    how: what the ratios are, in the column's header ("ratio of the medians" for `noise.from_timings`' ones)."""
    named = dict(timings) if isinstance(timings, dict) else {t.label: t for t in timings}
    for r in ratios:
        if r.num not in named or r.den not in named:
            raise ValueError(f"the ratio {r.num!r} / {r.den!r} names a row the table does not have: "
                             f"pass the timings of both ({sorted(named)}).")
    cells = {n: "; ".join(f"{ratio_text(r.median)} {named[r.den].label}" + ("" if r.decided else f" {NOT_DECIDED}")
                           for r in ratios if r.num == n) for n in named}
    w = max(len("variant"), *(len(t.label) for t in named.values()))
    cw = max(len(c) for c in cells.values())
    lines = [f"{'variant'.ljust(w)}  {'median':>9}  {'± IQR/2':>11}   {HEADER} ({how})"]
    for n, t in named.items():
        line = f"{t.label.ljust(w)}  {fmt_time(t.median):>9}  ± {fmt_time(t.iqr / 2):>9}   {cells[n].ljust(cw)}"
        lines.append((line + ("   ⚠ noisy" if t.noisy else "")).rstrip())
    noisy = [t for t in named.values() if t.noisy]
    if noisy:
        lines.append(f"⚠ {noisy[0].label}: {noisy[0].noise_note()}")
    lines += _medians_note(named, ratios)
    return "\n".join(lines)


def of(cmp, pairs) -> str:
    """`table` of a `noise.Comparison`: every variant over its rounds, and the ratios `pairs` names (the
    `(num, den)` pairs its sentences quote: pass the same list as to `noise.compare(pairs=...)`)."""
    return table(cmp.over_rounds(), [cmp.ratio(a, b) for a, b in pairs])  # keyed by the variants' names


def _medians_note(named: dict[str, Timing], ratios) -> list[str]:
    """One line where a reader dividing two medians of the table would read another number than its ratio."""
    med = {n: t.median for n, t in named.items()}
    off = [(r, med[r.num] / med[r.den]) for r in ratios if med[r.den] > 0
           and ratio_text(med[r.num] / med[r.den]) != ratio_text(r.median)]
    if not off:
        return []
    said = "; ".join(f"{named[r.num].label} ÷ {named[r.den].label} {ratio_text(q)}" for r, q in off)
    return [f"(÷ of the medians: {said}; the column is the median of each round's own ratio, which cancels a load "
            "that changed between rounds)"]


_ROW = re.compile(r"^(?P<r>[0-9.]+(?:e[+-]?\d+)?|inf|nan)× (?P<den>.+?)(?: \(not decided\))?$")


def read(text: str) -> dict[tuple[str, str], float]:
    """The ratios of every table `table` printed in `text` (a cell's output): {(num, den): ratio}. What the
    notebook test compares each sentence with; it reads what a reader sees, so it works on any executed notebook."""
    out: dict[tuple[str, str], float] = {}
    col = None
    for line in text.splitlines():
        if line.startswith("variant") and HEADER in line:
            col = line.index(HEADER)
            continue
        if col is None or not line.strip() or line.startswith(("⚠", "(")):
            col = None if not line.strip() else col
            continue
        label = re.split(r"\s{2,}", line.strip())[0]
        for item in line[col:].replace("⚠ noisy", "").strip().split("; "):
            m = _ROW.match(item.strip())
            if m:
                out[(label, m["den"])] = float(m["r"])
    return out
