"""What an explorer's action is doing now, and how long each part of it took.

A Run is several phases: this machine's peaks for a new dtype (measured once), the estimate (calls timed
at small shapes), preparing (tuning, compiling), measuring each variant, deciding the winner (paired
rounds) and drawing. One status line that said "working…" for 82 s told the reader nothing (lesson 03's
first float16 Run on a busy CPU), so the explorer names the phase running (`Phases.start`, `note`) and,
when done, how long each took beside what was estimated (`summary`).
"""
from __future__ import annotations

import time
from typing import Callable

from .timing import fmt_time

SHOWN_FROM = 0.05  # seconds: shorter phases are left out of the summary


class Phases:
    """A stopwatch per phase. listener(phase, detail) hears each start and note (the explorer's status)."""

    def __init__(self, listener: Callable[[str, str], None] | None = None):
        self.listener = listener
        self.seconds: dict[str, float] = {}
        self.estimated: dict[str, float] = {}  # phase -> seconds the estimate gave it
        self.current: str | None = None
        self.detail = ""
        self.started = time.perf_counter()
        self._t0 = self.started

    def start(self, phase: str, detail: str = "") -> None:
        """End the phase running (if any) and start `phase`; `detail` says what it does, for the status."""
        self.end()
        self.current, self.detail, self._t0 = phase, detail, time.perf_counter()
        self._tell()

    def note(self, detail: str) -> None:
        """What the running phase is doing now ("measuring + gemm, 3 of 6")."""
        self.detail = detail
        self._tell()

    def end(self) -> None:
        if self.current is not None:
            self.seconds[self.current] = self.seconds.get(self.current, 0.0) + time.perf_counter() - self._t0
            self.current = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def in_phase(self) -> float:
        """Seconds the running phase has run so far."""
        return time.perf_counter() - self._t0 if self.current is not None else 0.0

    def _tell(self) -> None:
        if self.listener is not None and self.current is not None:
            self.listener(self.current, self.detail)

    def summary(self) -> str:
        """"this machine's peaks 3.1 s, estimating 1.2 s, measuring 19.1 s (estimated 9.7 s), deciding the winner
        2.9 s (estimated 3.6 s), drawing 0.4 s": each phase over SHOWN_FROM, or that the estimate counted."""
        self.end()
        parts = []
        for phase, s in self.seconds.items():
            if s < SHOWN_FROM and phase not in self.estimated:
                continue
            est = self.estimated.get(phase)
            parts.append(f"{phase} {fmt_time(s)}" + (f" (estimated {fmt_time(est)})" if est is not None else ""))
        return ", ".join(parts)
