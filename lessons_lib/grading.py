"""Exercise checkers' shared verdict: a list of named checks, printed as ✓ / ✗ lines.

A lesson's checker runs the reader's code and records each property it tests. Checks that
depend on the machine (timing ratios) are added only on a GPU; the rest (correctness,
op traces, saved bytes, kernel counts) hold everywhere, so a verdict reads the same on
every machine.
"""
from __future__ import annotations

from dataclasses import dataclass, field

GPU_TAG = "[GPU]"


@dataclass
class Verdict:
    title: str
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((name, bool(ok), detail))
        return bool(ok)

    def skip(self, name: str, why: str) -> None:
        self.checks.append((name, None, why))

    def on_gpu(self, name: str, ok: bool | None, detail: str = "") -> None:
        """A machine-dependent check: `ok=None` skips it (no GPU). Its line starts with "[GPU]"
        so that nbval's sanitizer can blank it when a notebook runs on a GPU."""
        name = f"{GPU_TAG} {name}"
        if ok is None:
            self.skip(name, detail or "no CUDA GPU here; the other checks do not depend on the machine")
        else:
            self.check(name, ok, detail)

    @property
    def passed(self) -> bool:
        return all(ok is not False for _n, ok, _d in self.checks) and any(ok for _n, ok, _d in self.checks)

    def __str__(self) -> str:
        lines = [f"{self.title}:"]
        for name, ok, detail in self.checks:
            mark = {True: "✓", False: "✗", None: "–"}[ok]
            lines.append(f"  {mark} {name}" + (f" ({detail})" if detail else ""))
        lines.append("Passed. Well done!" if self.passed else "Not yet: fix the ✗ lines and run the checker again.")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def __bool__(self) -> bool:
        return self.passed
