"""Lesson 00 on your own function: `compare` runs every wrong timer next to the harness."""
from __future__ import annotations

from dataclasses import dataclass

from .. import claim_table, noise, timing
from ..display import count
from ..timing import Timing


# --- try it on your own function ---------------------------------------------------------


@dataclass
class Compared:
    """Every wrong timer next to the harness on one function, with each ratio decided by the noise rule."""

    timings: list[Timing]  # the first call, then the wrong timers and the harness over the rounds
    ratios: dict[str, noise.Ratio]  # wrong timer label -> wrong / harness, one value per round
    rounds: int

    def verdicts(self) -> list[str]:
        out = []
        for label, r in self.ratios.items():
            out.append(f"{label:22s} " + claim_table.say(r, "reports {x} the harness median",
                                                         tie="agrees with the harness ({x})"))
        return out

    def __str__(self) -> str:
        how = "median of the paired rounds' ratios; the first call: ratio of the medians"
        return (claim_table.table(self.timings, list(self.ratios.values()), how=how)
                + f"\n\nwrong / harness, over {count(self.rounds, 'alternating round')} "
                "(the first call: one cold sample, it cannot be repeated):\n" + "\n".join(self.verdicts()))

    def __repr__(self) -> str:
        return str(self)


def compare(fn, *args, min_run_time: float = 0.05, rounds: int = noise.ROUNDS, max_time: float = 8.0,
            device=None) -> Compared:
    """Every wrong timer and the harness on `fn(*args)`. Use it on your own function.

    The first call is timed once (it is only cold if nothing ran `fn` before in this process). The
    other wrong timers and the harness then run in alternating rounds, and each wrong / harness
    ratio is decided by the noise rule: said when the rounds agree, "not decided" when they do not.
    device: where `fn` runs; pass it when `fn` is a closure with no tensor arguments (it is otherwise
    read from `args`, and a GPU closure would be timed and labelled as "cpu")."""
    if not callable(fn):
        raise ValueError("compare(fn, *args) needs a function first, e.g. compare(torch.mm, a, b).")
    dev = timing.resolve_device(device, args)
    first = timing.wrong_first_call(fn, *args, device=dev)
    timers = {
        "no sync": lambda limit: timing.wrong_no_sync(fn, *args, repeats=20, device=dev),
        "single run": lambda limit: timing.wrong_single_run(fn, *args, device=dev),
        "mean incl. cold start": lambda limit: timing.wrong_mean_with_cold_start(fn, *args, device=dev),
        "one CPU thread": lambda limit: timing.wrong_one_thread(fn, *args, min_run_time=min_run_time, max_time=limit,
                                                                device=dev),
        "harness": lambda limit: timing.measure(fn, *args, label="harness", min_run_time=min_run_time, max_time=limit,
                                                device=dev),
    }
    names = list(timers)

    def one_round(order, _first, limit):  # the noise rule's rounds, looks and time limit (noise.compare's own)
        return {n: timers[n](limit) for n in order}

    cmp = noise._paired(one_round, names, rounds, noise.MAX_ROUNDS, max_time, [(n, "harness") for n in names[:-1]])
    ratios = {n: cmp.ratio(n, "harness") for n in names[:-1]}
    over = cmp.over_rounds()  # the rounds the ratios read, not the last one
    ratios = {"first call": noise.from_timings(first, over["harness"]), **ratios}
    done = len(cmp.rounds["harness"])
    return Compared([first, *(over[n] for n in names)], ratios, done)
