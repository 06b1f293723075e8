"""One number per claim (issue 33 §2): where a notebook's sentence quotes a ratio that its table shows, both
print the same number. A student saw five that did not (00 §3.3 "4.0×" beside a table's 5.3×, 01 11.56× against
9.99×, 02, 03's Adam, 06): each from another statistic or another measurement than its table.

This reads what a reader sees: the outputs of executed notebooks, the committed ones by default. To check freshly
executed copies, point ONE_NUMBER_NOTEBOOKS at their folder (the same file names, solutions/ inside):

    ONE_NUMBER_NOTEBOOKS=/tmp/executed python -m pytest tests/test_one_number.py -o addopts=""

A claim names its cell, the sentence's line and the (numerator, denominator) rows of its table. The table's number
is read, in this order, from a `claim_table` ratio column, from a `timing.table(baseline=...)` column, or as the
quotient of the two rows' printed times (what a reader computes). They agree when they differ by no more than
their printed precision allows. A sentence the noise rule left undecided quotes no number: nothing to compare.
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from lessons_lib import claim_table

ROOT = Path(__file__).resolve().parents[1] / "notebooks"
NUMBER = re.compile(r"(\d+(?:\.\d+)?)×")
TIME = re.compile(r"(\d+(?:\.\d+)?) (s|ms|µs|ns)\b")
SCALE = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class Claim:
    cell: str  # the id of the cell whose output holds the sentence
    line: str | tuple[str, ...]  # text in the sentence's line (any of several wordings); the first such line
    pair: tuple[str, str] | None = None  # (numerator, denominator) rows of the table; fnmatch patterns
    after: str | None = None  # the number is the first after this text in the line (default: after `line`)
    table_cell: str | None = None  # the table's cell, where it is not the sentence's
    within: tuple[str, str | tuple[str, ...] | None] | None = None  # the table lies between these two texts
    where: tuple[str, str | None] | None = None  # the sentence lies between these two texts (default: anywhere)
    column: str | None = None  # a text table's column holding the number, on the row `pair[0]`
    optional: bool = False  # a sentence only some machines print (a GPU's): absent is fine


WATERFALL = ("+ gemm", "+ grouped", "+ fused", "+ saved", "+ loop")
IN_PLACE = [("- a fresh output each call (a + b) takes", ("a + b (new output)", "torch.add(a, b, out=buf)")),
            ("- the same add written over its own input (out=a) takes", ("torch.add(a, b, out=a)", "a.add_(b)")),
            ("- writing the result into a separate buffer (out=buf) takes",
             ("torch.add(a, b, out=buf)", "torch.add(a, b, out=a)")),
            ("- a copy into that buffer (reads 1 array, writes 1) takes", ("buf.copy_(a)", "a.add_(b)"))]
THREE = (("Conv1d / loop: ", ("grouped Conv1d*", "SlowGroups (loop)")),
         ("GroupedLinear(auto) / loop: ", ("GroupedLinear(auto)", "SlowGroups (loop)")),
         ("GroupedLinear(auto) / Conv1d: ", ("GroupedLinear(auto)", "grouped Conv1d*")))
ONE_THREAD = "harness (* threads, as torch runs now)"

# Every notebook: its claims, or why it has none.
CLAIMS: dict[str, list[Claim] | str] = {
    "00_timing_honestly": [
        Claim("30b69821", "trap 1, wrong way:", ("syncs inside · wrong", "no sync · wrong")),
        Claim("30b69821", "trap 2, harness:", ("syncs inside · harness", "no sync · harness")),
        Claim("3fafc30e", "→ ", ("no synchronize", "harness")),
        Claim("053e0311", "→ ", ("first call", "harness")),
        Claim("ea7c196a", "→ ", ("randn inside", "harness")),
        Claim("a79183df", "→ ", ("one run", "harness"), within=("Timing a single run", "Averaging"),
              where=("Timing a single run", "Averaging")),
        Claim("a79183df", "→ ", ("mean of 20", "harness"), within=("Averaging", None), where=("Averaging", None)),
        Claim("93b19c08", "→ one thread ran", (ONE_THREAD, "Timer default"), optional=True),
        Claim("93b19c08", "→ the wrong way reports", ("Timer default", ONE_THREAD), optional=True),
        Claim("93b19c08", "threads take", ("all * threads", "Timer default"), after="threads take ", optional=True),
        Claim("bd867eb3", "→ ", ("same input", "rotate * copies*")),
        *(Claim("daee76f6", f"{name}  ", (name, "harness"), where=("wrong / harness, over", None))
          for name in ("first call", "no sync", "single run", "mean incl. cold start", "one CPU thread")),
    ],
    "01_broadcast_matmul": [
        Claim("0e873a97", "broadcast matmul vs loop:", ("broadcast matmul", "loop")),
        Claim("0e873a97", "broadcast matmul vs einsum:", ("broadcast matmul", "einsum")),
    ],
    "02_autograd_memory": [
        Claim("ed337cbf", "broadcast step vs einsum step:", ("broadcast matmul", "einsum"), table_cell="19ea60e9"),
        Claim("ed337cbf", "checkpointed vs posted step:", ("checkpointed", "broadcast matmul"), table_cell="19ea60e9"),
    ],
    "03_grouped_linear": [
        *(Claim("5c0f4a8c", f"{kind}, time over time:", pair, after=after, within=within)
          for kind, within in (("forward", ("forward:", "training step:")), ("training step", ("training step:", None)))
          for after, pair in THREE),
        Claim("9297926b", "Over 2·G tensors the step takes", ("Adam over 2·G tensors", "Adam over 2 stacked tensors")),
    ],
    "04_launch_overhead": [
        Claim("8eeac148", "posted benchmark:", ("posted Linear", "posted PseudoLinear")),
        Claim("8eeac148", "fixed benchmark:", ("fixed Linear", "fixed PseudoLinear")),
        Claim("1940ac7b", "Wrapping it in `with torch.no_grad():`", ("1-element add under no_grad()", "1-element add")),
        Claim("1940ac7b", "nn.Linear as a module, against F.linear", ("nn.Linear(1, 1) module call", "F.linear, 1×1*"),
              after="(both requiring grad): "),
        Claim("9c5541ce", "allocator: eager with new outputs", ("eager, new outputs", "eager, reused out= buffers"),
              after="reused buffers, ", within=("\nwith ", ("\nwith 1 thread:", "minor page faults"))),
        Claim("9c5541ce", "fusion alone (compiled over eager", ("eager, reused out= buffers", "compiled (one fused kernel)"),
              after="): ", within=("with 1 thread:", "minor page faults"), optional=True),
        Claim("649a5d98", "foreach against the for loop:", ("SGD step, foreach=False", "SGD step, foreach=True")),
    ],
    "05_cuda_graphs": [  # its one such cell runs on a GPU only; its recorded H200 table says why it differs
        *(Claim("3c3708e7", "measured here:", (f"Linear {h}", f"PseudoLinear {h}"), after=f"{h}: Linear takes ",
                optional=True) for h in ("eager", "graphed", "whole step captured")),
    ],
    "06_data_movement": [
        Claim("2917a0a0", "measured here: the posted loop takes", ("as posted", "kept on device"), optional=True),
        Claim("453cb2a7", "here, at", ("cat in a loop", "cat once"), after="cat once is "),
        Claim("453cb2a7", "here, at", ("preallocate + fill", "cat once"), after="pre-allocate + fill takes "),
        *(Claim("8bc31153", (line, "- not decided on this run"), pair) for line, pair in IN_PLACE),
        Claim("8bd7b012", ("here inference_mode", "not decided on this run"), ("with autograd", "inference_mode")),
        Claim("c736a2cc", ("here channels_last runs at", "no winner on this run", "here neither layout", "not decided"),
              ("contiguous NCHW*", "channels_last*")),
    ],
    "07_capstone": [
        *(Claim("5514405f", f"{stage}: ", (stage, ""), column="vs the stage before") for stage in WATERFALL),
        Claim("5514405f", "all fixes: ", ("+ loop", "original"), column="vs the original"),
        *(Claim("413faad6", f"{b} against {a}:", (a, b), optional=True)
          for a, b in (("original", "fixed, eager"), ("fixed, eager", "fixed, one CUDA graph"),
                       ("original", "fixed, one CUDA graph"))),
    ],
}
for _stem in CLAIMS.copy():  # the solutions print checker lines only: no table beside a sentence
    CLAIMS[f"solutions/{_stem}_solution"] = "the exercise's checker lines only: no table beside a sentence"


def _folder() -> Path:
    return Path(os.environ.get("ONE_NUMBER_NOTEBOOKS") or ROOT)


def outputs(path: Path) -> dict[str, str]:
    """cell id -> what its outputs show as text (streams, and each display's text/plain)."""
    out = {}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        text = []
        for o in cell.get("outputs", []):
            text.append(o.get("text", "") if o.get("output_type") == "stream" else
                        o.get("data", {}).get("text/plain", "") if "data" in o else "")
        out[cell.get("id")] = "".join(text)
    return out


def _slice(text: str, within) -> str:
    if not within:
        return text
    start, ends = within
    i = text.find(start)
    if i < 0:
        return text
    ends = (ends,) if isinstance(ends, str) else ends or ()
    cut = [j for j in (text.find(e, i + len(start)) for e in ends) if j >= 0]
    return text[i:min(cut)] if cut else text[i:]


def _decimals(number: str) -> int:
    return len(number.split(".")[1]) if "." in number else 0


def sentence_number(text: str, claim: Claim) -> tuple[str | None, str]:
    """(the number the sentence quotes, its line); (None, line) when it quotes none (undecided, a tie)."""
    wordings = (claim.line,) if isinstance(claim.line, str) else claim.line
    line = next((ln for ln in _slice(text, claim.where).splitlines()
                 if any(w in ln for w in wordings)), None)
    if line is None:
        return None, ""
    start = line.find(claim.after) + len(claim.after) if claim.after and claim.after in line else \
        max(line.find(w) + len(w) for w in wordings if w in line)
    rest = line[start:]
    m = NUMBER.search(rest)
    if not m or "not decided" in line[:start + m.start()]:
        return None, line
    return m.group(1), line


def _row(labels, pattern: str) -> str | None:
    found = [lb for lb in labels if fnmatch.fnmatchcase(lb, pattern)]
    return found[0] if len(found) == 1 else None


def table_number(text: str, claim: Claim) -> tuple[float, float, str] | None:
    """(the table's number, how far printing may have moved it, where it was read) or None."""
    num, den = claim.pair
    if claim.column:
        return _column(text, num, claim.column)
    ratios = claim_table.read(text)
    key = next(((a, b) for a, b in ratios if fnmatch.fnmatchcase(a, num) and fnmatch.fnmatchcase(b, den)), None)
    if key:
        return ratios[key], ratios[key] * 0.005, "its ratio column"
    base = re.compile(r"^(?P<label>.+?)\s{2,}\S+ \S+\s+±\s+\S+ \S+\s+(?P<r>[\d.]+)× vs (?P<base>.+?)(\s+⚠ noisy)?$")
    legacy = {(m["base"], m["label"].strip()): m["r"] for m in map(base.match, text.splitlines()) if m}
    key = next(((a, b) for a, b in legacy if fnmatch.fnmatchcase(a, num) and fnmatch.fnmatchcase(b, den)), None)
    if key:
        return float(legacy[key]), 0.5 * 10 ** -_decimals(legacy[key]), "its 'vs' column"
    times = {}
    for ln in text.splitlines():
        label, _, rest = ln.strip().partition("  ")
        m = TIME.match(rest.strip()) if rest.strip() else None
        if m and label:
            times.setdefault(label.rstrip(":"), float(m.group(1)) * SCALE[m.group(2)])
    a, b = _row(times, num), _row(times, den)
    if a and b and times[b] > 0:
        q = times[a] / times[b]
        return q, q * 0.01, "the quotient of its two times"
    return None


def _column(text: str, row: str, header: str) -> tuple[float, float, str] | None:
    lines = text.splitlines()
    head = next((i for i, ln in enumerate(lines) if header in ln), None)
    if head is None:
        return None
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", lines[head])]
    col = lines[head].index(header)
    end = next((s for s in starts if s > col), None)
    for ln in lines[head + 1:]:
        if ln.startswith(row + " "):
            cell = ln[col:end].strip()
            m = NUMBER.search(cell)
            return (float(m.group(1)), 0.5 * 10 ** -_decimals(m.group(1)), f"its '{header}' column") if m else None
    return None


def disagreements(folder: Path, listed: dict | None = None) -> list[str]:
    """Each claim whose sentence and table print different numbers, in words; [] when every one agrees."""
    out = []
    for stem, claims in (listed or CLAIMS).items():
        if isinstance(claims, str):
            continue
        path = folder / f"{stem}.ipynb"
        cells = outputs(path)
        for c in claims:
            said, line = sentence_number(cells.get(c.cell, ""), c)
            if not line:
                if not c.optional:
                    out.append(f"{stem} cell {c.cell}: no line with {c.line!r} (the claim list is stale)")
                continue
            if said is None:
                continue
            shown = table_number(_slice(cells.get(c.table_cell or c.cell, ""), c.within), c)
            if shown is None:
                out.append(f"{stem} cell {c.cell}: the sentence quotes {said}× ({line.strip()[:90]}) but no table "
                           f"beside it shows {c.pair[0]} against {c.pair[1] or 'its column'}")
                continue
            value, slack, where = shown
            if abs(float(said) - value) > slack + 0.5 * 10 ** -_decimals(said) + 1e-9:
                out.append(f"{stem} cell {c.cell}: the sentence quotes {said}× ({line.strip()[:90]}), {where} "
                           f"shows {value:.4g}×")
    return out


def test_every_notebook_is_listed_with_its_claims_or_why_it_has_none():
    on_disk = {str(p.relative_to(ROOT).with_suffix("")) for p in ROOT.rglob("*.ipynb")
               if ".ipynb_checkpoints" not in p.parts}
    assert on_disk == set(CLAIMS), "list each notebook in CLAIMS: " + str(on_disk ^ set(CLAIMS))
    assert all(claims for claims in CLAIMS.values())


def test_each_sentence_quotes_the_number_its_table_shows():
    wrong = disagreements(_folder())
    assert not wrong, "\n".join(wrong)


# --- the checker itself, on made-up outputs: it fails where a reader would see two numbers --------------------

TRAP1 = {"00_timing_honestly": [CLAIMS["00_timing_honestly"][0]]}
SAID = "trap 1, wrong way: 'no sync' looks 4.0× faster than 'syncs inside' (it timed its launches only)\n"


def _fake(tmp_path, text: str) -> Path:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(...)")
    cell.id = "30b69821"
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nb.cells = [cell]
    (tmp_path / "00_timing_honestly.ipynb").write_text(nbformat.writes(nb))
    return tmp_path


@pytest.mark.parametrize("table, agrees", [
    ("syncs inside · wrong   2.6 ms\nno sync · wrong   491 µs\n", False),  # the student's 5.3× beside "4.0×"
    ("syncs inside · wrong   2.6 ms\nno sync · wrong   650 µs\n", True),  # 2.6 ms / 650 µs is 4.0×
    ("syncs inside · wrong   2.6 ms  ±  1 µs   1.00× vs syncs inside · wrong\n"
     "no sync · wrong        491 µs  ±  1 µs   5.30× vs syncs inside · wrong\n", False),  # timing.table(baseline=)
    ("syncs inside · wrong   2.6 ms  ±  1 µs   1.00× vs syncs inside · wrong\n"
     "no sync · wrong        650 µs  ±  1 µs   4.02× vs syncs inside · wrong\n", True),
])
def test_the_check_fails_where_a_table_shows_another_number(tmp_path, table, agrees):
    assert (disagreements(_fake(tmp_path, table + SAID), TRAP1) == []) is agrees


def test_a_claim_table_and_its_sentence_agree_and_a_changed_sentence_does_not(tmp_path):
    from lessons_lib import noise, timing

    r = noise.Ratio([5.3] * 10, num="syncs inside · wrong", den="no sync · wrong")
    rows = [timing.Timing("syncs inside · wrong", 2.6e-3, 1e-5, [2.6e-3] * 3, 1, "m", "cpu"),
            timing.Timing("no sync · wrong", 4.9e-4, 1e-6, [4.9e-4] * 3, 1, "m", "cpu")]
    said = claim_table.say(r, "trap 1, wrong way: 'no sync' looks {x} faster than 'syncs inside'")
    table = claim_table.table(rows, [r])
    assert disagreements(_fake(tmp_path, f"{table}\n{said}\n"), TRAP1) == []
    assert disagreements(_fake(tmp_path, f"{table}\n{said.replace('5.3×', '4×')}\n"), TRAP1)
    assert "no line with" in disagreements(_fake(tmp_path, table), TRAP1)[0]  # a sentence gone: the list is stale
