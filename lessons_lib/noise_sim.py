"""The noise rule against a known truth: timings drawn from a chosen distribution instead of measured.

A rule that says "faster" must be wrong rarely, and a test cannot show that on a real machine, whose truth
is unknown. Here each measurement is a draw: the true time × e^(σ·z), log-normal noise of σ per
measurement, with optional heavy tails. Seeded (`random.Random`), so a test or a notebook gets the same
numbers on every machine.

The seam is `timing.measure`: `noise.compare` (and so `grading.speed_check`) looks it up at each call, once
per variant per round, and `Draws.measure` takes its place (a test's `monkeypatch.setattr(timing, "measure",
draws.measure)`, or `with draws.installed():`). Nothing else changes: the rounds, their order, the looks and
the sentences are the rule's own. The clock is not touched: a draw takes no time, so a budget never binds.
"""
from __future__ import annotations

import contextlib
import math
import random

from . import timing

TAILS = ("log-normal", "student-t", "outliers")
OUTLIER_RATE = 0.05  # "outliers": one measurement in 20 is also slowed 3-10× (another program took the core)
T_DOF = 3  # "student-t": z from Student's t with 3 degrees of freedom (finite variance, heavy tails)


class Draws:
    """A stand-in for `timing.measure`: each call returns a Timing whose one sample is `truth[label]` ×
    e^(σ·z), z drawn afresh (`TAILS`: normal; Student-t; normal, plus a 3-10× slow-down one time in 20)."""

    def __init__(self, truth: dict[str, float], sigma: float, tails: str = "log-normal", seed: int = 0):
        if tails not in TAILS:
            raise ValueError(f"tails={tails!r}: use one of {', '.join(TAILS)}.")
        if sigma < 0 or not all(t > 0 for t in truth.values()):
            raise ValueError("Draws needs sigma ≥ 0 and a positive true time per label.")
        self.truth, self.sigma, self.tails = dict(truth), sigma, tails
        self.rng = random.Random(seed)
        self.calls = 0
        self.method = f"simulated: log-normal σ={sigma:g} ({tails})"

    def log_noise(self) -> float:
        rng = self.rng
        if self.tails == "student-t":
            z = rng.gauss(0.0, 1.0) / math.sqrt(sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(T_DOF)) / T_DOF)
        else:
            z = rng.gauss(0.0, 1.0)
        slow = math.log(rng.uniform(3.0, 10.0)) if self.tails == "outliers" and rng.random() < OUTLIER_RATE else 0.0
        return self.sigma * z + slow

    def draw(self, label: str) -> float:
        self.calls += 1
        return self.truth[label] * math.exp(self.log_noise())

    def measure(self, fn, *args, label: str | None = None, device=None, **_kw) -> timing.Timing:
        """`timing.measure`'s signature; the label (compare passes each variant's name) picks the truth."""
        t = self.draw(label)
        return timing.Timing(label, t, 0.0, [t], 1, self.method, str(device or "cpu"))

    @contextlib.contextmanager
    def installed(self):
        """`timing.measure` replaced by `measure` inside the block (restored after, whatever happens)."""
        real = timing.measure
        timing.measure = self.measure
        try:
            yield self
        finally:
            timing.measure = real
