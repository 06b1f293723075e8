"""diagnose's report: the kinds of pitfall (each with its lesson and section), a Finding, and the Report.

A Finding says what the pitfall is, where (the reader's line), the evidence in numbers, its cost on the named
GPU (a roofline model: labelled so, never a measurement), the lesson and section that explain it, and the fix.
The Report prints as text, shows as an HTML table in Jupyter (display.html_table). Its first line says what ran
for real (nothing, on meta copies; or copies of your objects, once) and the verdict; a step that did not run, or
did not run to the end, gets no verdict, and that line says why. Then the findings, the step in numbers, notes,
what was checked, and what the tool cannot see in one line (`report.cannot_see()` lists it whole).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..code_lines import Where
from ..display import count, html_table, text_table

# kind -> (lesson, section, the pitfall in one line). Sections are the notebooks' own headings.
KINDS = {
    "broadcast matmul": ("01", "§2 Look inside, §3 Fix",
                         "a matmul with broadcast batch dims on both sides expands an operand and copies it"),
    "contraction by broadcast": ("01", "§2 Look inside, §3 Fix (einsum)",
                                 "a contraction written as a broadcast multiply, then a sum: the whole product is "
                                 "written, read, and made again for backward"),
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
    "loss per time step": ("06", "§2 Replace Python loops with vector ops",
                           "a loss computed one time step at a time in a Python loop, then added up or stacked"),
    "cat in a loop": ("06", "§3 torch.cat in a loop reallocates",
                      "a tensor grown by torch.cat in a loop: every pass copies everything so far"),
    "allocation churn": ("06", "§3 pre-allocate (a buffer made once, reused)",
                         "the same tensor made again on every pass of a loop"),
    "graph built for nothing": ("06", "§5 no_grad decreases computation time and memory",
                                "the step records an autograd graph and saves tensors for a backward that never runs"),
    "graph kept alive": ("07", "§4 The fixes (the loop: losses kept detached); 02 §2 What autograd saved",
                         "tensors with their autograd graph outlive the step that made them"),
}


# What a report cannot see, in one line (each limit in full: Report.cannot_see()).
_BLIND_LINE = ("Python time around the ops, data loading, custom kernels and collectives; real values on meta; "
               "real GPU timings (costs are a model); growth across calls; the caching allocator")


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
    not_run: str = ""  # why the step did not run at all (nothing of it ran), or ""
    stopped: str = ""  # why it did not run to the end (the sandbox's budget, a limit of meta), or ""
    timed_calls: int = 0  # calls of the step the timing made (timed=True), each on copies

    @property
    def ran(self) -> bool:
        """The step ran to the end: only then is there a verdict."""
        return not self.not_run and not self.stopped and not self.error

    @property
    def clean(self) -> bool:
        """No pitfall found and the step ran to the end (not a proof: see `cannot_see()`)."""
        return not self.findings and self.ran

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys(f.kind for f in self.findings))

    @property
    def lessons(self) -> list[str]:
        return sorted({f.lesson for f in self.findings})

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def _how(self) -> str:
        """What ran for real, in words."""
        if self.ran_on == "meta":
            return "ran once, on meta copies of your objects: nothing ran for real"
        return f"ran once, for real, on copies of your objects on the {'CPU' if self.ran_on == 'cpu' else 'GPU'}"

    def head(self) -> str:
        """The first line (what ran for real, and the verdict or why there is none), and the step in numbers."""
        if self.not_run:
            return f"✗ the step did not run, so there is no verdict: {self.not_run}"
        n = len(self.findings)
        if not self.ran:
            lines = [f"✗ no verdict: the step did not run to the end ({self._how()})",
                     f"  why: {self.stopped or 'it raised ' + self.error}"]
            if n:
                lines.append(f"  before that: {count(n, 'pitfall')} found")
        else:
            lines = [(f"✗ {count(n, 'pitfall')} found" if n else "✓ no pitfall found") +
                     f" ({self._how()}; costs on {a_gpu(self.gpu)}: roofline model, datasheet peaks)"]
        return "\n".join(lines)

    def cannot_see(self) -> str:
        """Everything the tool cannot see, one line each."""
        return "\n".join(["what diagnose cannot see:"] + [f"  - {b}" for b in self.blind_spots])

    def tail(self) -> str:
        """The step in numbers, the notes, what was checked, and what the tool cannot see (one line)."""
        lines = [f"the step: {self.step['summary']}"] if self.step and not self.not_run else []
        lines += [f"note: {n}" for n in self.notes]
        if self.timing is not None:
            lines.append(f"measured (timed=True, on {self.ran_on}, on copies: {count(self.timed_calls, 'call')} of "
                         f"the step ran): {self.timing}")
        if self.checked:
            done = ", ".join(f"{what} {'✓' if n == 0 else f'✗{n}'}" if isinstance(n, int) else f"{what} ({n})"
                             for what, n in self.checked.items())
            lines.append(f"checked: {done}")
        if self.blind_spots:
            lines.append(f"what diagnose cannot see: {_BLIND_LINE} ({count(len(self.blind_spots), 'limit')}: "
                         "report.cannot_see() lists them)")
        return "\n".join(lines)

    def table(self) -> str:
        return "\n".join([self.head(), *(str(f) for f in self.findings), self.tail()]).rstrip()

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
        rest = "".join(f"<p>{escape(line)}</p>" for line in self.tail().splitlines()
                       if not line.startswith("what diagnose cannot see"))
        blind = "".join(f"<li>{escape(b)}</li>" for b in self.blind_spots)
        return table + rest + (f"<details><summary>what diagnose cannot see ({len(self.blind_spots)})</summary>"
                               f"<ul>{blind}</ul></details>" if blind else "")

    def __bool__(self) -> bool:
        return self.clean
