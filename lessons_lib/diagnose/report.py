"""diagnose's report: the kinds of pitfall (each with its lesson and section), a Finding, and the Report.

A Finding says what the pitfall is, where (the reader's line), the evidence in numbers, its cost on the named
GPU (a roofline model: labelled so, never a measurement), the lesson and section that explain it, and the fix.
The Report prints as text, shows as an HTML table in Jupyter (display.html_table), and always says what was
checked and what the tool cannot see.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..code_lines import Where
from ..display import count, html_table, text_table

# kind -> (lesson, section, the pitfall in one line). Sections are the notebooks' own headings.
KINDS = {
    "broadcast matmul": ("01", "§2 Look inside, §3 Fix",
                         "a matmul with broadcast batch dims on both sides expands an operand and copies it"),
    "expanded copy kept for backward": ("02", "§2 Look inside (What autograd saved), §3 Fix",
                                        "a batched matmul keeps its expanded copy of an operand for backward"),
    "attention matrix kept for backward": ("02", "§2 Look inside (What autograd saved); 07 §4 The fixes",
                                           "attention written by hand keeps its (…, T, T) probabilities for backward"),
    "GEMMs in a Python loop": ("03", "§2 Look inside, §4 The answer, as a module",
                               "many small GEMMs of one shape, independent of each other, issued one by one"),
    "elementwise chain": ("04", "§3 Fix: fewer, fatter ops ((a) fusion with torch.compile)",
                          "a chain of elementwise ops, each a kernel that reads and writes the whole tensor"),
    "launch-bound step": ("04", "§2 Look inside (the three regimes); 05 §3 The model against the thread",
                          "the step's floor on this GPU is its kernel launches, not its maths or its bytes"),
    "for-loop optimizer": ("04", "§3 Fix ((b) Fewer ops by hand: foreach)",
                           "the optimizer updates the parameters one at a time, a few ops each"),
    "capture hazard": ("05", "§4 What capture refuses or freezes",
                       "CUDA-graph capture of this step would refuse this, or freeze it into every replay"),
    "host sync": ("06", "§1 Keep data on the GPU (hidden syncs)",
                  "the host waits for the GPU here: the queue drains and the GPU idles until the host catches up"),
    "pageable transfer": ("06", "§1 Keep data on the GPU (transfers)",
                          "a host-to-GPU copy from pageable memory, every step"),
    "row-by-row gather": ("06", "§2 Replace Python loops with vector ops",
                          "a batch assembled one row at a time in Python, then stacked"),
    "cat in a loop": ("06", "§3 torch.cat in a loop reallocates",
                      "a tensor grown by torch.cat in a loop: every pass copies everything so far"),
    "allocation churn": ("06", "§3 pre-allocate (a buffer made once, reused)",
                         "the same tensor made again on every pass of a loop"),
    "graph built for nothing": ("06", "§5 no_grad decreases computation time and memory",
                                "the step records an autograd graph and saves tensors for a backward that never runs"),
    "graph kept alive": ("07", "§4 The fixes (the loop: losses kept detached); 02 §2 What autograd saved",
                         "tensors with their autograd graph outlive the step that made them"),
}


def a_gpu(name: str) -> str:
    """"a T4", "an A100", "an H100": the article as the name is spoken."""
    return ("an " if name[:1].upper() in "AEFHILMNORSX" else "a ") + name


@dataclass(frozen=True)
class Finding:
    kind: str  # a key of KINDS
    where: Where  # the reader's line (file, line number, source text)
    evidence: str  # what was seen, in numbers
    cost: str  # its cost on the named GPU: "model: ..." (a roofline lower bound), or its memory
    fix: str  # one line or a short snippet
    numbers: dict = field(default_factory=dict)  # the evidence as numbers (bytes, counts per step...)
    seconds: float | None = None  # the modelled cost per step on the GPU, where it is a time

    @property
    def lesson(self) -> str:
        return KINDS[self.kind][0]

    @property
    def section(self) -> str:
        return KINDS[self.kind][1]

    @property
    def pitfall(self) -> str:
        return KINDS[self.kind][2]

    @property
    def line(self) -> int:
        return self.where.line

    def __str__(self) -> str:
        return "\n".join([f"✗ {self.kind} (lesson {self.lesson}, {self.section})",
                          f"    at {self.where.place}: {self.where.text}",
                          f"    what:     {self.pitfall}",
                          f"    evidence: {self.evidence}",
                          f"    cost:     {self.cost}",
                          f"    fix:      {self.fix}"])


@dataclass
class Report:
    """What `diagnose` found in one run of a step, and what it checked and cannot see."""

    findings: list[Finding] = field(default_factory=list)
    step: dict = field(default_factory=dict)  # the step in numbers: launches, FLOPs, bytes, saved, syncs, regime
    checked: dict = field(default_factory=dict)  # what was checked (with its lesson) -> how many findings
    blind_spots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how it ran: on meta or not, and why; what it changed
    gpu: str = "T4"
    ran_on: str = "meta"
    error: str = ""  # what the step raised, if it did not run to the end
    graph_report: object = None  # graph_check's GraphReport, when capture hazards were asked for
    timing: object = None  # a timing.Timing, when asked for (timed=True) and the step ran on a real device

    @property
    def clean(self) -> bool:
        """No pitfall found and the step ran to the end (not a proof: see `blind_spots`)."""
        return not self.findings and not self.error

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys(f.kind for f in self.findings))

    @property
    def lessons(self) -> list[str]:
        return sorted({f.lesson for f in self.findings})

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def head(self) -> str:
        n = len(self.findings)
        verdict = (f"✗ {count(n, 'pitfall')} found" if n else "✓ no pitfall found") + \
            f" (ran once on {self.ran_on}; costs on {a_gpu(self.gpu)}: roofline model, datasheet peaks)"
        lines = [verdict]
        if self.error:
            lines.append(f"  the step stopped early: {self.error}; pitfalls after that line are not seen")
        lines += [f"  note: {n}" for n in self.notes]
        s = self.step
        if s:
            lines.append(f"  the step: {s['summary']}")
        return "\n".join(lines)

    def tail(self) -> str:
        done = ", ".join(f"{what} {'✓' if n == 0 else f'✗{n}'}" if isinstance(n, int) else f"{what} ({n})"
                         for what, n in self.checked.items())
        return "\n".join([f"checked: {done}", "what diagnose cannot see:"] + [f"  - {b}" for b in self.blind_spots])

    def table(self) -> str:
        body = [str(f) for f in self.findings]
        if self.timing is not None:
            body.append(f"measured (timed=True, on {self.ran_on}): {self.timing}")
        return "\n".join([self.head(), *body, self.tail()])

    def __str__(self) -> str:
        return self.table()

    __repr__ = __str__

    def rows(self) -> list[tuple[str, ...]]:
        out = [("#", "pitfall", "lesson", "your line", "evidence", f"cost on {a_gpu(self.gpu)} (model)", "fix")]
        for i, f in enumerate(self.findings, 1):
            out.append((str(i), f.kind, f"{f.lesson} {f.section}", f"{f.where.place}: {f.where.text}",
                        f.evidence, f.cost, f.fix))
        return out

    def text_rows(self) -> str:
        """The findings as one fixed-width table (wide)."""
        return text_table(self.rows())

    def _repr_html_(self) -> str:
        from html import escape

        table = html_table(self.rows(), caption=self.head().replace("\n", " · "))._repr_html_() \
            if self.findings else f"<p>{escape(self.head())}</p>"
        tail = "".join(f"<li>{escape(b)}</li>" for b in self.blind_spots)
        done = escape(self.tail().splitlines()[0])
        return f"{table}<p>{done}</p><details><summary>what diagnose cannot see</summary><ul>{tail}</ul></details>"

    def __bool__(self) -> bool:
        return self.clean
