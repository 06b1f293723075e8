"""Exercise checkers' shared verdict: a list of named checks, printed as ✓ / ✗ lines.

A lesson's checker runs the reader's code and records each property it tests. Checks that
depend on the machine (timing ratios) are added only on a GPU; the rest (correctness,
op traces, saved bytes, kernel counts) hold everywhere, so a verdict reads the same on
every machine.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Verdict:
    title: str
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((name, bool(ok), detail))
        return bool(ok)

    def skip(self, name: str, why: str) -> None:
        self.checks.append((name, None, why))

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
