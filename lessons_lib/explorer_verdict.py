"""The explorer's conclusions through the noise rule: who is fastest after a Run, and a sweep's crossover.

A mixin for `widgets.Explorer`. One truth per run: the sentence and the table and bars beside it come from
the same measurement. The winner is said only from paired rounds of the contenders (`noise.compare_lesson`:
the noise rule's interval and looks, so a winner is named where there is none at most 1% of the time), and
the run's timings for them become those rounds' medians. The first pass, one timing a side, only picks the
contenders.
"""
from __future__ import annotations

import statistics

from . import noise
from .device import COURSE_DEVICES
from .lesson_parts import check_dtype
from .explorer_replay import crossover_of
from .timing import Timing, fmt_time

DECIDE_MAX_TIME = 4.0  # seconds of paired rounds to decide the winner (at least `noise.MIN_ROUNDS` of them)
DECIDE_ROUNDS, DECIDE_MAX_ROUNDS = noise.ROUNDS, noise.MAX_ROUNDS  # the noise rule's looks
CONTENDER = 1.5  # the estimate counts variants predicted within this factor of the fastest as contenders


class Deciding:
    """decide / winner_line and decided_crossover (`widgets.Explorer` inherits them; needs lesson, phases)."""

    def _comparable(self, names) -> list[str]:
        """The variants a winner is chosen among: not those that run another (GroupedLinear(auto) runs one of
        the others)."""
        return [n for n in names if not self.lesson.variant(n).runs_another]

    def decide(self, run, stop=None) -> str:
        """Which variant was fastest (of those that do not run another: `Variant.runs_another`), and by how
        much over the runner-up, said only when the noise rule decides it. The contenders (the first pass's two
        fastest, and every variant not decidedly slower than its fastest by their own spreads) are re-measured
        in paired, alternating rounds (a few seconds at most), and their timings in the run become the rounds'
        medians (`Run.paired`, marked in its table): the sentence and the numbers beside it are one
        measurement (lesson 03 said "tie" beside a first pass's 8.49 and 5.07 ms), and a single timing a
        side never names a winner. A variant left out whose single timing is faster than the rounds'
        runner-up joins a second set of rounds; if one still is, the machine's speed changed between the
        passes, and the sentence says "not decided". Stopped before the rounds: not decided, and said so.
        Sets and returns `Run.winner`."""
        names = sorted(self._comparable(run.timings), key=lambda n: run.timings[n].median)
        if len(names) < 2:
            run.winner = ""
            return ""
        a, b = names[0], names[1]
        if stop is not None and stop():
            run.winner = f"fastest: {a} against {b}: not decided (stopped before the paired rounds that decide it)"
            return run.winner
        if run.device not in COURSE_DEVICES:  # not a device the course times on: the first pass is all there is
            run.winner = "fastest: " + _say(noise.from_timings(run.timings[b], run.timings[a]), a, b, "")
            return run.winner
        contenders = [a, b] + [n for n in names[2:] if not _slower(run.timings[n], run.timings[a])]
        first = dict(run.timings)
        for attempt in range(2):
            self.phases.note(f"{', '.join(contenders)} in paired rounds (up to {fmt_time(DECIDE_MAX_TIME)}): "
                             "a winner rests on the noise rule's rounds")
            cmp = noise.compare_lesson(self.lesson, run.params, run.device, check_dtype(run.dtype),
                                       variants=contenders, rounds=DECIDE_ROUNDS, max_rounds=DECIDE_MAX_ROUNDS,
                                       max_time=DECIDE_MAX_TIME, min_run_time=0.01)
            for n in contenders:
                run.timings[n] = _paired_timing(cmp, n, first[n])
            a, b = cmp.ranked()[:2]
            faster = [n for n in names if n not in contenders and first[n].median < cmp.median(b)]
            if not faster or attempt:
                break
            contenders += faster
        run.paired = list(contenders)
        rounds = f" ({len(cmp.rounds[a])} paired rounds, * in the table)"
        if faster:
            run.winner = (f"fastest: not decided on this run: the machine's speed changed between the passes "
                          f"({', '.join(faster)}, timed once, beat the paired rounds' {b}){rounds}")
        else:
            run.winner = "fastest: " + _say(cmp.ratio(b, a), a, b, rounds)
        return run.winner

    def winner_line(self, run) -> str:
        """The winner sentence, decided now (`decide`: it may re-measure the top two)."""
        return self.decide(run)

    def decided_crossover(self, sw) -> int | None:
        """The lesson's crossover in a sweep, kept only where the two points either side of it are
        decided by the noise rule (their spreads do not overlap the swap); None otherwise."""
        cross = crossover_of(self.lesson, sw.values, sw.medians())
        if cross is None:
            return None
        i = sw.values.index(cross)
        a, b = self.lesson.compare or (self.lesson.baseline, None)
        for run in (sw.runs[i - 1], sw.runs[i]):
            other = b or min((n for n in run.timings if n != a), key=lambda n: run.timings[n].median)
            if a not in run.timings or other not in run.timings:
                return None
            r = noise.from_timings(run.timings[a], run.timings[other])
            if not r.decided or r.tie:
                return None
        return cross

    def _decide_estimate(self, cal, params) -> float:
        """At most: paired rounds of the contenders, as `decide` runs them (here: the variants predicted
        within CONTENDER× of the fastest, at least two): up to the last look, and never past DECIDE_MAX_TIME
        and the round under way when it runs out (a round that would not fit is not started: `noise._paired`).
        Ten full rounds (the first look) overstated it where a round is slow: lesson 07's explorer at its
        default shape beside two busy loops was estimated 34 s to decide, refused at the 30 s budget, and
        decided (or said it could not) in 1.8 s."""
        names = self._comparable(v.name for v in self.lesson.variants)
        if len(names) < 2:
            return 0.0
        alone = {n: self.lesson.predict(cal, params, variants=[n], min_run_time=0.01) for n in names}
        best = min(alone.values())
        top = sorted(names, key=alone.get)
        top = top[:2] + [n for n in top[2:] if alone[n] <= CONTENDER * best]
        one = self.lesson.predict(cal, params, variants=top, min_run_time=0.01)
        return min(DECIDE_MAX_ROUNDS * one, DECIDE_MAX_TIME + one)


def _say(ratio, a: str, b: str, rounds: str) -> str:
    """The winner in words through the noise rule: a ahead of b, a tie, or not decided (naming the pair)."""
    if not ratio.decided:
        return f"{a} against {b}: {ratio.not_decided()}{rounds}"
    said = ratio.say(f"{a}, {{r:.2f}}× ahead of {b}{rounds}", tie=f"{a} and {b} tie (within {noise.TIE:.0%}){rounds}")
    return said if a in said else f"{a} against {b}: {said}{rounds}"  # the rule's own sentence ("no winner ...")


def _slower(t: Timing, lead: Timing) -> bool:
    """`t` decidedly slower than `lead` from their own spreads (`noise.from_timings`)."""
    r = noise.from_timings(t, lead)
    return r.decided and r.low > 1 + noise.TIE


def _paired_timing(cmp, name: str, first: Timing) -> Timing:
    """A variant's timing from paired rounds: the median of its per-round medians, their IQR as its spread."""
    per = list(cmp.rounds[name])
    med = statistics.median(per)
    iqr = 0.0
    if len(per) > 1:
        q1, _q2, q3 = statistics.quantiles(per, n=4, method="inclusive")
        iqr = q3 - q1
    return Timing(name, med, iqr, per, first.calls_per_sample,
                  f"median of {len(per)} paired rounds (re-measured to decide the winner)", first.device)
