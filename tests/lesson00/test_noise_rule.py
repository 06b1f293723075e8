"""Lesson 00 §4.1 (noise_rule.py): the noise rule's interval and the cost of peeking, from a seeded simulation."""
import math

import matplotlib.pyplot as plt

from lessons_lib import noise
from lessons_lib.lesson00_timing import noise_rule as R


def test_peeking_until_decided_names_more_false_winners_than_the_rules_fixed_looks():
    p = R.peeking_experiment(trials=300, seed=1)
    assert p.rounds == list(range(1, noise.MAX_ROUNDS + 1)) and p.trials == 300
    assert p.peeking == sorted(p.peeking)  # peeking only ever adds false winners
    assert p.peeking[-1] > 2 * p.one_look[-1] > 0  # every extra look is another chance for noise to "win"
    assert p.rule[-1] <= noise.ALPHA + 0.01 and p.rule[: noise.LOOKS[0] - 1] == [0.0] * (noise.LOOKS[0] - 1)
    assert str(p) == str(R.peeking_experiment(trials=300, seed=1))  # seeded: the same on every machine
    assert "the noise rule: looks at 10 and 15, 99.5% each" in str(p)


def test_peek_until_decided_stops_at_the_first_round_whose_interval_clears_one():
    logs = [0.5] * 6 + [-3.0] * 9
    assert R.peek_until_decided(logs) == 6  # six rounds all one way: the first a 95% interval can clear 0 at
    assert R.peek_until_decided(logs[:5]) is None  # five cannot: every sign pattern has a chance of 1 in 32
    assert R.peek_until_decided([0.5, -0.5] * 7) is None


def test_the_example_shows_the_rounds_and_the_interval_the_rule_can_give():
    ex = R.example_comparison()
    rounds, high, low = ex["each round's ratio"], ex["interval (99.5%): high"], ex["interval (99.5%): low"]
    assert len(rounds) == noise.MAX_ROUNDS and all(v > 0 for v in rounds)
    assert all(math.isnan(v) for v in low[:8]) and not math.isnan(low[8])  # no interval from fewer than 9 rounds
    assert all(lo <= hi for lo, hi in zip(low[8:], high[8:]))
    fig = R.plot_noise_rule(R.peeking_experiment(trials=50), ex)
    try:
        left, right = fig.axes[:2]
        assert "(×" in left.get_ylabel() and "(%)" in right.get_ylabel() and "rounds" in right.get_xlabel()
    finally:
        plt.close(fig)
