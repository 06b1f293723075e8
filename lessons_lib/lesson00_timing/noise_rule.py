"""Lesson 00 §4.1: the noise rule's interval, and why stopping when a comparison looks decided misleads.

Device-independent: every time here is drawn from a known distribution (`noise_sim.Draws`: the true time ×
e^(σ·z)), seeded, so every machine prints the same numbers and the truth is known. The comparisons are the
course's own (`noise.compare`, with `timing.measure` replaced by the draws); the interval is the rule's
(`noise_interval`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import noise, noise_interval, noise_sim, plots
from ..display import text_table

SIGMA = 0.3  # each simulated timing is off by e^(0.3·z): a busy laptop's round-to-round noise
TRIALS = 2000
NAIVE_ERROR = 0.05  # the usual 95% interval
EXAMPLE_TRUTH = 2.0  # the example comparison: a takes 2× b's time


def peek_until_decided(logs: list[float], error: float = NAIVE_ERROR) -> int | None:
    """The mistake: look after every round, and stop at the first whose interval (95%) clears 1 (0 in log
    space). Returns that round, or None if no round did. The noise rule looks only at `noise.LOOKS`."""
    for n in range(2, len(logs) + 1):
        low, high = noise_interval.interval(logs[:n], error)
        if low > 0 or high < 0:
            return n
    return None


@dataclass
class Peeking:
    """Over `trials` simulated comparisons of two identical variants: the share called "faster" by round n."""

    rounds: list[int]
    peeking: list[float]  # stopped at a false winner by round n, looking after every round
    one_look: list[float]  # a single 95% look at round n named one
    rule: list[float]  # the noise rule named one by round n (its looks: 10 and 15)
    trials: int

    def __str__(self) -> str:
        rows = [("two identical variants, 15 paired rounds", "called one faster")]
        rows.append(("look after every round, stop when a 95% interval clears 1", f"{self.peeking[-1]:.1%}"))
        rows.append(("look once, at 15 rounds, with a 95% interval", f"{self.one_look[-1]:.1%}"))
        rows.append((f"the noise rule: looks at {' and '.join(map(str, noise.LOOKS))}, {noise.LEVEL} each",
                     f"{self.rule[-1]:.1%}"))
        return f"{self.trials:,} simulated comparisons (σ = {SIGMA}), seeded:\n" + text_table(rows, numbers=True)


def peeking_experiment(trials: int = TRIALS, seed: int = 0) -> Peeking:
    """`trials` comparisons of two identical variants by the course's `noise.compare` (all 15 rounds kept),
    judged three ways on the same rounds: peeking after every round, one 95% look, and the rule's looks."""
    draws = noise_sim.Draws({"a": 1e-3, "b": 1e-3}, SIGMA, seed=seed)
    n_max = noise.MAX_ROUNDS
    first_peek, looks_at, rule_at = [], [[] for _ in range(n_max + 1)], []
    with draws.installed():
        for _ in range(trials):
            cmp = noise.compare({"a": None, "b": None}, settled=lambda c: False)  # every round, to the last look
            values = cmp.ratio("a", "b").values
            logs = [math.log(v) for v in values]
            first_peek.append(peek_until_decided(logs))
            for n in range(2, n_max + 1):
                low, high = noise_interval.interval(logs[:n], NAIVE_ERROR)
                looks_at[n].append(low > 0 or high < 0)
            rule_at.append(next((n for n in noise.LOOKS if noise.Ratio(values[:n], num="a", den="b").faster), None))
    rounds = list(range(1, n_max + 1))
    share = lambda hits: sum(hits) / trials  # noqa: E731
    return Peeking(rounds, [share(p is not None and p <= n for p in first_peek) for n in rounds],
                   [share(looks_at[n]) if n > 1 else 0.0 for n in rounds],
                   [share(r is not None and r <= n for r in rule_at) for n in rounds], trials)


def example_comparison(seed: int = 0) -> dict[str, list[float]]:
    """One simulated comparison (a truly EXAMPLE_TRUTH× slower than b, every round kept): each round's ratio,
    and the rule's interval for their center after each round (none before it can say anything)."""
    draws = noise_sim.Draws({"a": EXAMPLE_TRUTH * 1e-3, "b": 1e-3}, SIGMA, seed=seed)
    with draws.installed():
        values = noise.compare({"a": None, "b": None}, settled=lambda c: False).ratio("a", "b").values
    lows, highs = [], []
    for n in range(1, len(values) + 1):
        low, high = noise.Ratio(values[:n]).interval
        lows.append(low if low > 0 else math.nan)
        highs.append(high if high < math.inf else math.nan)
    return {"each round's ratio": values, f"interval ({noise.LEVEL}): high": highs,
            f"interval ({noise.LEVEL}): low": lows, "1: no difference": [1.0] * len(values)}


def plot_noise_rule(peek: Peeking, example: dict[str, list[float]]):
    """Two panels: the example's rounds and interval; the share of identical pairs called faster, by round."""
    fig, (left, right) = plots.panels(2, size=(4.8, 3.3))
    rounds = list(range(1, len(next(iter(example.values()))) + 1))
    plots.lines(rounds, example, "paired rounds so far", "time(a) / time(b) (×, log scale)",
                f"simulated: a truly {EXAMPLE_TRUTH:g}× slower, σ = {SIGMA}", ax=left, logy=False, legend=False)
    plots._log_y(left)  # a ratio and its inverse equally far from 1 (the rule's log-ratios), plain numbers
    left.legend(fontsize=7, loc="best")
    pct = {"peek after every round (95%)": [100 * v for v in peek.peeking],
           "one look at that round (95%)": [100 * v for v in peek.one_look],
           "the noise rule (looks at 10, 15)": [100 * v for v in peek.rule]}
    plots.lines(peek.rounds, pct, "paired rounds so far", "identical pairs called faster (%)",
                f"simulated: {peek.trials:,} comparisons of identical variants", ax=right, logy=False, legend=False)
    right.legend(fontsize=7, loc="upper left")
    return fig
