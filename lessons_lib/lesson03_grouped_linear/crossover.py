"""Lesson 03's crossover map: the grid of shapes, which variant wins where, the paired re-check, the heatmap."""
from __future__ import annotations

import dataclasses
import math
import time

import torch

from .. import noise, results
from .. import device as _device
from .. import grouped_linear as GL
from ..display import html_table, text_table
from .lessons import AUTO, FORUM, KEY, LESSON, TRAIN_LESSON, with_variants


# --- measure: the crossover map ---------------------------------------------------------------------------

GRID_CPU = {"groups": [4, 16, 64], "group_size": [8, 32, 128]}
GRID_GPU = {"groups": [8, 32, 100, 256], "group_size": [16, 32, 64, 100, 128]}
GRID_VARIANTS = ["loop (SlowGroups)", "grouped Conv1d", "bmm, rows first", "matmul, channels first", "einsum", "vmap"]


@dataclasses.dataclass
class Grid:
    """Median seconds of each variant at each (groups, group_size)."""

    groups: list[int]
    sizes: list[int]
    base: dict
    training: bool
    medians: dict[str, list[list[float]]]  # variant -> [groups index][size index]
    device: str
    noisy: list[list[list[str]]] = dataclasses.field(default_factory=list)  # variants flagged noisy, per point

    def contenders(self) -> list[str]:
        """The variants that can win a point: not GroupedLinear(auto), which runs one of the others (its
        "win" is noise), nor the forum baddbmm it is checked against (a bmm with another weight layout)."""
        return [n for n in self.medians if n not in (AUTO, FORUM)]

    def winners(self) -> list[list[str]]:
        names = self.contenders()
        return [[min(names, key=lambda n: self.medians[n][i][j]) for j in range(len(self.sizes))]
                for i in range(len(self.groups))]

    def ratio(self, slow: str, fast: str | None = None) -> list[list[float]]:
        """slow's time over the fastest contender's (or `fast`'s) at each point."""
        out = []
        for i in range(len(self.groups)):
            row = []
            for j in range(len(self.sizes)):
                best = self.medians[fast][i][j] if fast else min(self.medians[n][i][j] for n in self.contenders())
                row.append(self.medians[slow][i][j] / best)
            out.append(row)
        return out

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def crossover_grid(device=None, groups=None, sizes=None, base: dict | None = None, training: bool = False,
                   variants=None, max_time: float = 0.25, min_run_time: float = 0.03, progress=None) -> Grid:
    """Time the variants over a (groups × group size) grid; every shape is checked before the first runs."""
    dev = _device.pick(device)
    grid = GRID_GPU if dev.type == "cuda" else GRID_CPU
    groups, sizes = list(groups or grid["groups"]), list(sizes or grid["group_size"])
    lesson = with_variants(TRAIN_LESSON if training else LESSON, auto=True, forum=True)
    names = lesson.variant_names(variants or GRID_VARIANTS)
    base = {**lesson.defaults(dev), **(base or {})}
    for G in groups:
        for K in sizes:
            lesson.check({**base, "groups": G, "group_size": K}, dev, torch.float32)
    med = {n: [[math.nan] * len(sizes) for _ in groups] for n in names}
    noisy = [[[] for _ in sizes] for _ in groups]
    for i, G in enumerate(groups):
        for j, K in enumerate(sizes):
            run = lesson.run({**base, "groups": G, "group_size": K}, dev, variants=names, min_run_time=min_run_time,
                             max_time=max_time)
            for n in names:
                med[n][i][j] = run.timings[n].median
                if run.timings[n].noisy:
                    noisy[i][j].append(n)
            if progress:
                progress(i * len(sizes) + j + 1, len(groups) * len(sizes))
    return Grid(groups, sizes, {k: v for k, v in base.items() if k not in ("groups", "group_size")}, training, med,
                dev.type, noisy)


def paired_check(grid: Grid, rounds: int = noise.ROUNDS, max_rounds: int = noise.MAX_ROUNDS, min_run_time: float = 0.05,
                 max_time: float = 20.0) -> dict:
    """GroupedLinear(auto) against the grid's fastest contender (of its two fastest, the one the rounds find
    faster) and the forum baddbmm at each point, in
    the noise rule's paired rounds (`noise.compare_lesson`: order alternating each round, the median of
    the per-round ratios, decided by the rule's interval at its looks). A shared machine drifts between one
    variant's measurement and the next; a round sees the same drift on every side, so the ratio keeps
    what the grid's single pass loses in noise. Each round keeps each side's fastest sample
    (`Timing.least`, as the tuner ranks): these are ways to do the same work, and noise only adds time.
    Uses the tuning cache the grid filled."""
    dev = torch.device(grid.device)
    lesson = with_variants(TRAIN_LESSON if grid.training else LESSON, auto=True, forum=True)
    def blank(v):
        return [[v] * len(grid.sizes) for _ in grid.groups]

    out = {"ratios": blank(math.nan), "forum": blank(math.nan), "decided": blank(False), "against": blank(""),
           "chose": blank(""), "rounds": rounds}
    for i, G in enumerate(grid.groups):
        for j, K in enumerate(grid.sizes):
            # The grid's two fastest contenders at this point, both paired with auto: a single pass on a busy
            # machine can swap them, and the bar is against whichever the paired rounds find faster.
            top = sorted(grid.contenders(), key=lambda n: grid.medians[n][i][j])[:2]
            names = [AUTO, *top, FORUM]
            cmp = noise.compare_lesson(lesson, {**grid.base, "groups": G, "group_size": K}, dev, variants=names,
                                       rounds=rounds, max_rounds=max_rounds, min_run_time=min_run_time,
                                       max_time=max_time, pairs=[*((AUTO, n) for n in top), (AUTO, FORUM)],
                                       statistic="least", block=GL.TUNE_BLOCK_S)
            other = min(top, key=cmp.median)
            vs_best, vs_forum = cmp.ratio(AUTO, other), cmp.ratio(AUTO, FORUM)
            out["ratios"][i][j], out["forum"][i][j] = vs_best.median, vs_forum.median
            out["decided"][i][j] = vs_best.decided and vs_forum.decided
            out["against"][i][j] = other
            picked = GL.cached_strategies(grid.device, G, K, grid.training)
            out["chose"][i][j] = picked[0] if len(picked) == 1 else "?"
    return out


# auto against the thread's and its replies' variants along group sizes (the GPU claim test; lesson 03's record).
FORUM_VARIANTS = ("loop (SlowGroups)", "grouped Conv1d", "matmul, channels first", "vmap")
CLAIM_SIZES = (32, 100, 128)  # the GPU claim's group sizes at 100 groups: a small one, the thread's, a power of 2
FAR = 2.0  # a forum variant that a first pass decides this much slower than another cannot be the fastest one


def auto_against_forum(device, sizes, base: dict | None = None, forum=FORUM_VARIANTS, *, training: bool = True,
                       min_run_time: float = 1e-3, first_max_time: float = 0.5, rounds: int = noise.ROUNDS,
                       max_rounds: int = noise.MAX_ROUNDS, max_time: float = 3.0) -> list[dict]:
    """At each group size, GroupedLinear(auto) against the fastest of the `forum` variants, decided by the noise
    rule's paired rounds (`noise.compare_lesson`: alternating order, the median of the per-round ratios).

    Per size: one pass of auto and every forum variant (`Lesson.run`, each measurement within `first_max_time`;
    auto is tuned there, outside the rounds); a forum variant that pass decides at least FAR× slower than another
    (`noise.from_timings`, both spreads counted) cannot be the fastest and stays out of the rounds (the thread's
    loop and grouped Conv1d at 100 groups: about 12× and 13× on the H200). The rounds time auto and the rest, in
    `max_time` seconds: each measurement gets its share of what is left (noise.compare_lesson), and where the
    minimum of noise.MIN_ROUNDS rounds cannot fit, the ratio says so, not decided. `min_run_time` keeps a
    sample short: on a GPU a single call (or ~1 ms of calls); at 20 ms (the timing default) blocks grew to
    20-200 ms and a round of the five variants took over 10 s on the H200, before rounds had a limit. Returns one dict per size: group_size, best (the fastest forum variant in the
    rounds), ratio (auto / best, a noise.Ratio), far ({variant: its first-pass time over the leader's}),
    tuning_s, rounds, seconds."""
    dev = _device.pick(device)
    lesson = with_variants(TRAIN_LESSON if training else LESSON, auto=True)
    base = {**lesson.defaults(dev), **(base or {})}
    shapes = [lesson.check({**base, "group_size": k}, dev, torch.float32) for k in sizes]  # all, before any runs
    out = []
    for k, p in zip(sizes, shapes):
        t0 = time.perf_counter()
        first = lesson.run(p, dev, variants=[AUTO, *forum], min_run_time=min_run_time, max_time=first_max_time)
        tm = first.timings
        lead = min(forum, key=lambda n: tm[n].median)
        far = {}
        for n in forum:
            r = noise.from_timings(tm[n], tm[lead])
            if n != lead and r.decided and r.median >= FAR:
                far[n] = r.median
        kept = [n for n in forum if n not in far]
        cmp = noise.compare_lesson(lesson, p, dev, variants=[AUTO, *kept], rounds=rounds, max_rounds=max_rounds,
                                   min_run_time=min_run_time, max_time=max_time, pairs=[(AUTO, n) for n in kept])
        best = min(kept, key=cmp.median)
        out.append({"group_size": k, "best": best, "ratio": cmp.ratio(AUTO, best), "far": far,
                    "tuning_s": getattr(first, "prepare_seconds", {}).get(AUTO, 0.0),
                    "rounds": len(cmp.rounds[AUTO]), "seconds": time.perf_counter() - t0})
    return out


def grid_table(grid: Grid, recorded: bool = False, html: bool = False):
    """The winner at each point (auto excluded: it runs one of the others), the loop's and the Conv1d's
    time over the winner's, and auto's (the tuning is not in it) where the grid has auto. recorded: the grid
    comes from a recorded file (its noisy points were not decided when it was recorded: no rerun helps).
    html: an HTML table for a notebook, its note as the caption (the text table wrapped every row at 1280 px
    with JupyterLab's file browser open); it prints as the text."""
    wins, loop_r, conv_r = grid.winners(), grid.ratio("loop (SlowGroups)"), grid.ratio("grouped Conv1d")
    auto_r = grid.ratio(AUTO) if AUTO in grid.medians else None
    rows = [("groups", "group size", "fastest", "loop / fastest", "Conv1d / fastest",
             *(("auto / fastest",) if auto_r else ()), "noisy timings")]
    flagged = 0
    for i, G in enumerate(grid.groups):
        for j, K in enumerate(grid.sizes):
            noisy = grid.noisy[i][j] if grid.noisy else []
            flagged += bool(noisy)
            rows.append((str(G), str(K), _winner_words(grid, i, j, recorded), f"{loop_r[i][j]:.2f}×", f"{conv_r[i][j]:.2f}×",
                         *((f"{auto_r[i][j]:.2f}×",) if auto_r else ()), f"⚠ {len(noisy)}" if noisy else ""))
    undecided = sum(_cell(grid, i, j)[0] == UNDECIDED for i in range(len(grid.groups)) for j in range(len(grid.sizes)))
    note = ""
    if flagged:
        points = f"{flagged} {'point has' if flagged == 1 else 'points have'}"
        verdict = (f"{undecided} of them {'was' if undecided == 1 else 'were'} not decided when recorded (the "
                   "recording machine was busy; the explorer's Sweep measures this machine)" if recorded else
                   f"where the winner or the runner-up is among them ({undecided}), the winner is not decided on "
                   "this run; rerun on a quieter machine")
        note = (f"\n⚠ {points} noisy timings (spread over a quarter of the median: a busy machine): {verdict}.")
    if html:
        return html_table(rows, caption=note.strip())
    return text_table(rows) + note


UNDECIDED = "not decided"
# A recorded grid's undecided point, in the noise rule's words for a recorded figure (its reader cannot rerun the
# recording; a grid keeps which timings were noisy, not their spreads, so the words stop before the spread)
UNDECIDED_RECORDED = noise.NOT_DECIDED_RECORDED.partition(" (")[0]


def _cell(grid: Grid, i: int, j: int) -> tuple[str, str, str]:
    """One point as the noise rule allows from one pass: (kind, best, runner-up), kind "winner", "tie" (within
    noise.TIE) or UNDECIDED (the winner or the runner-up was timed noisy)."""
    order = sorted(grid.contenders(), key=lambda n: grid.medians[n][i][j])
    if len(order) == 1:
        return "winner", order[0], ""
    best, second = order[0], order[1]
    noisy = grid.noisy[i][j] if grid.noisy else []
    if best in noisy or second in noisy:
        return UNDECIDED, best, second
    if grid.medians[second][i][j] <= (1 + noise.TIE) * grid.medians[best][i][j]:
        return "tie", best, second
    return "winner", best, second


def _winner_words(grid: Grid, i: int, j: int, recorded: bool = False) -> str:
    """The winner at one point in words: "a", "a ≈ b" (a tie), or "not decided (a?)" ("not decided when recorded
    (a?)" for a recorded grid)."""
    kind, best, second = _cell(grid, i, j)
    undecided = UNDECIDED_RECORDED if recorded else UNDECIDED
    return {"winner": best, "tie": f"{best} ≈ {second}", UNDECIDED: f"{undecided} ({best}?)"}[kind]


def heatmap(grid: Grid, title: str = "", caption: str = ""):
    """The crossover map: each (groups, group size) coloured by its fastest contender, washed out and hatched
    where the noise rule does not decide it (the table's "not decided": the winner or the runner-up timed noisy;
    `plots.winner_map(decided=...)`), and annotated with the loop's time over the fastest's (and "tie" where the
    runner-up is within 5%: the cell takes the faster one's colour; the table names both). caption: a line under
    the figure (a recorded grid's conditions, `recorded_conditions`)."""
    from .. import plots

    names = list(grid.medians)
    order = [v.name for v in with_variants(LESSON, auto=True, forum=True).variants]
    order += [n for n in names if n not in order]
    cells = [[_cell(grid, i, j) for j in range(len(grid.sizes))] for i in range(len(grid.groups))]
    loop_r = grid.ratio("loop (SlowGroups)") if "loop (SlowGroups)" in names else None
    notes = [[(f"loop {loop_r[i][j]:.1f}×" if loop_r else "") + ("\ntie (5%)" if kind == "tie" else "")
              for j, (kind, _best, _second) in enumerate(row)] for i, row in enumerate(cells)]
    fig = plots.winner_map(grid.groups, grid.sizes, [[best for _kind, best, _ in row] for row in cells], order, notes,
                           xlabel="group size (features per group)", ylabel="groups",
                           decided=[[kind != UNDECIDED for kind, _b, _s in row] for row in cells],
                           title=title or f"fastest variant ({'training step' if grid.training else 'forward'}, "
                                          f"{grid.device})")
    if caption:
        plots.caption_below(fig, caption)
    return fig


def recorded_grids(kind: str = "training") -> list[tuple[str, Grid]]:
    """Crossover grids from recorded results (label with the kind of figures, Grid)."""
    out = []
    for rec in results.for_lesson(KEY):
        data = (rec.lessons.get(KEY) or {}).get("grids", {}).get(kind)
        if data:
            out.append((rec.label(), Grid(**data)))
    return out


def latest_grid(kind: str = "forward") -> tuple[str, Grid] | None:
    """The measured grid on file whose timings were steadiest (fewest points with a noisy timing), then
    the newest: a map recorded on a machine too busy to decide anything teaches nothing."""
    grids = [(rec, Grid(**data)) for rec in results.for_lesson(KEY, kinds="measured")
             if (data := (rec.lessons.get(KEY) or {}).get("grids", {}).get(kind))]
    if not grids:
        return None
    def noisy_share(g: Grid) -> float:
        points = len(g.groups) * len(g.sizes)
        return sum(bool(v) for row in (g.noisy or []) for v in row) / max(points, 1)

    rec, grid = min(grids, key=lambda rg: (noisy_share(rg[1]), -_date_key(rg[0].meta.get("date", ""))))
    return rec.label(), grid


def recorded_conditions(label: str) -> str:
    """How the recorded file labelled `label` was made (threads, load, what ran beside it, quick or full), in
    words, for the heading of its figures (`results.Recorded.conditions`)."""
    for rec in results.for_lesson(KEY):
        if rec.label() == label:
            return rec.conditions(KEY)
    return ""


def _date_key(date: str) -> int:
    digits = "".join(ch for ch in date if ch.isdigit())
    return int(digits) if digits else 0
