"""The interval behind every verdict: where the center of the paired log-ratios lies, from their signed ranks.

Each paired round gives one log-ratio, log(time(a) / time(b)). When a and b run equally fast, a round is as
likely to favour either, by the same amounts: the log-ratios are symmetric about 0, whatever the machine's
noise looks like (heavy tails, outliers, drift that hits both sides of a round). That is the only
assumption. Under it the Wilcoxon signed-rank statistic, W+ = the number of positive pairwise means
(x_i + x_j) / 2, i ≤ j (the "Walsh averages"), has a known distribution whatever the noise: each of the
2ⁿ sign patterns is equally likely. So the interval [k-th smallest, k-th largest Walsh average], with k
from that distribution, misses the center with a probability of at most `error`: distribution-free, and
unmoved by a few wild rounds (a round's size counts only through its rank).

It also needs enough rounds: with n rounds the smallest chance is 2 / 2ⁿ (every round on one side), so
an error of 0.5% needs at least 9. Fewer give the whole line, (-inf, inf): nothing is decided.
"""
from __future__ import annotations

import functools
import math
import statistics

EXACT_UP_TO = 60  # rounds counted exactly (2ⁿ sign patterns by their W+); more use the normal approximation


@functools.lru_cache(maxsize=None)
def _tail_counts(n: int) -> tuple[int, ...]:
    """counts[w] = how many of the 2ⁿ sign patterns give W+ = w (subsets of {1..n} summing to w)."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for k in range(1, n + 1):
        for s in range(len(counts) - 1, k - 1, -1):
            counts[s] += counts[s - k]
    return tuple(counts)


@functools.lru_cache(maxsize=None)
def walsh_rank(n: int, error: float) -> int | None:
    """k such that [k-th smallest, k-th largest] of the n(n+1)/2 Walsh averages misses the center with
    probability ≤ `error` (two-sided, `error / 2` a side); None when no k can (too few rounds)."""
    m = n * (n + 1) // 2
    if n > EXACT_UP_TO:
        z = statistics.NormalDist().inv_cdf(1 - error / 2)
        return max(1, int(m / 2 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24)))
    counts, total, tail = _tail_counts(n), 2 ** n, 0
    for k in range(1, m + 2):  # P(W+ ≤ k - 1) = P(the k-th smallest Walsh average > 0) with no shift
        tail += counts[k - 1]
        if tail * 2 > error * total:  # P(W+ ≤ k - 1) on each side would pass error / 2
            return k - 1 or None
    return None


def interval(logs: list[float], error: float) -> tuple[float, float]:
    """(low, high) for the center of `logs` (log-ratios, one per paired round), missing it with probability
    ≤ `error`; (-inf, inf) when too few rounds to say that much."""
    n = len(logs)
    k = walsh_rank(n, error) if n else None
    if k is None:
        return -math.inf, math.inf
    walsh = sorted([(a + b) / 2 for i, a in enumerate(logs) for b in logs[i:]])
    return walsh[k - 1], walsh[-k]
