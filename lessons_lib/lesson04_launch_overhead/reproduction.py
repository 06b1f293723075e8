"""The thread's benchmark reproduced (its three mistakes, posted vs fixed, paired rounds) and the
thread's own reported figures, read from lessons_lib/reference."""
from __future__ import annotations

import dataclasses

import torch

from .. import claim_table, noise, results, timing
from .. import device as _device
from ..display import text_table
from .variants import fixed_model, fixed_step, posted_model, posted_step
from .lessons import LESSON, LESSON_KEY, _module_ops, train_peak_bytes


def mistakes_table(width: int = 160, batch: int = 256, layers: int = 4) -> str:
    """Ops that launch work in one training iteration, posted vs fixed (traced on meta: nothing runs)."""
    rows = [("benchmark", "model", "ops", "random", "relu + its backward", "add", "mul")]
    for label, build, step in (("posted", posted_model, "posted"), ("fixed", fixed_model, "fixed")):
        for kind in ("Linear", "PseudoLinear"):
            model = build(kind, width, layers, "meta")
            if step == "posted":
                ops = _module_ops(posted_step, model, batch, width)
            else:
                x = torch.empty(batch, width, device="meta")
                ops = _module_ops(fixed_step, model, x, torch.empty(batch, width, device="meta"))
            rows.append((label, kind, str(len(ops)), str(sum(o in ("randn", "normal_", "rand", "uniform_") for o in ops)),
                         str(sum(o.startswith("relu") or o.startswith("threshold") for o in ops)),
                         str(ops.count("add")), str(ops.count("mul"))))
    return text_table(rows, numbers=True)


REPRODUCE_PAIRS = [("posted Linear", "posted PseudoLinear"), ("fixed Linear", "fixed PseudoLinear")]


def reproduce(device=None, width: int | None = None, batch: int | None = None, layers: int = 4,
              min_run_time: float = 0.02, max_time: float = 6.0) -> noise.Comparison:
    """The posted benchmark and the fixed one, both timed with the course harness (training steps),
    in paired alternating rounds (the noise rule): `.timings` holds the last round's, and the ratios
    Linear / PseudoLinear are medians of per-round ratios."""
    dev = timing.timing_device(device)
    p = LESSON.check({"width": LESSON.param("width").default(dev) if width is None else width,  # 0 is refused,
                      "batch": LESSON.param("batch").default(dev) if batch is None else batch,  # not the default
                      "layers": layers}, dev, torch.float32)
    _device.check_fits(train_peak_bytes(p, torch.float32), dev, "the benchmark")
    W, B, L = p["width"], p["batch"], p["layers"]
    torch.manual_seed(0)
    with _device.oom_guard(dev, "the benchmark"):
        fns = {}
        for kind in ("Linear", "PseudoLinear"):
            fns[f"posted {kind}"] = (lambda m: lambda: posted_step(m, B, W))(posted_model(kind, W, L, dev))
        x, g = torch.randn(B, W, device=dev), torch.randn(B, W, device=dev)
        for kind in ("Linear", "PseudoLinear"):
            fns[f"fixed {kind}"] = (lambda m: lambda: fixed_step(m, x, g))(fixed_model(kind, W, L, dev))
        return noise.compare(fns, pairs=REPRODUCE_PAIRS, min_run_time=min_run_time, max_time=max_time, device=dev)


# --- what the thread reported: read from the recorded file, never copied into code -------------------


@dataclasses.dataclass
class ThreadReport:
    """The thread's own figures, from lessons_lib/reference (kind "reported"; the GPUs are not named)."""

    label: str  # the recorded file's label: hardware as the thread gives it, kind and source
    runs: list[dict]  # the poster's tqdm totals: {"width", "iterations", "linear_s", "pseudo_linear_s"}
    runs_note: str
    tables: dict[str, dict[int, float]]  # {table: {width: PseudoLinear speed-up over Linear}}
    tables_note: str


def thread_report() -> ThreadReport | None:
    """The seed thread's figures from the recorded reported file, or None if it is missing."""
    for rec in results.for_lesson(LESSON_KEY, kinds="reported"):
        data = rec.lessons[LESSON_KEY]
        posted, speedups = data.get("posted_runs") or {}, data.get("speedups") or {}
        tables = {name: dict(zip(t["values"], t["speedup"])) for name, t in (speedups.get("tables") or {}).items()}
        # the file keeps its tables by name (sorted); shown in the thread's order: the longest table (the
        # first reply's), then the other GPU, then that GPU with CUDA graphs
        tables = dict(sorted(tables.items(), key=lambda kv: ("graph" in kv[0].lower(), -len(kv[1]))))
        if posted or tables:
            return ThreadReport(rec.label(), list(posted.get("runs", [])), posted.get("note", ""), tables,
                                speedups.get("note", ""))
    return None


_NO_REPORT = "The thread's reported figures are not in lessons_lib/reference here (reported-seed003-*.json)."


def thread_runs_table() -> str:
    """The poster's totals as reported: Linear and PseudoLinear seconds, and their ratio."""
    rep = thread_report()
    if rep is None or not rep.runs:
        return _NO_REPORT
    rows = [("width", "iterations", "Linear (s)", "PseudoLinear (s)", "speed-up")]
    for r in rep.runs:
        rows.append((str(r["width"]), str(r["iterations"]), f"{r['linear_s']:.1f}", f"{r['pseudo_linear_s']:.1f}",
                     f"{r['linear_s'] / r['pseudo_linear_s']:.2f}×"))
    return f"{rep.label}\n" + text_table(rows, numbers=True) + f"\n({rep.runs_note})"


def reproduce_table(cmp: noise.Comparison) -> str:
    """Each benchmark over the paired rounds (median and IQR of its rounds' medians), with the two ratios
    Linear / PseudoLinear that `reproduce_summary` quotes (`claim_table`: one number for both)."""
    return (claim_table.of(cmp, REPRODUCE_PAIRS)
            + f"\n({len(cmp.rounds[cmp.names[0]])} paired rounds, alternating order)")


def reproduce_summary(cmp: noise.Comparison) -> str:
    """What the reproduction shows on this machine, each sentence decided by the noise rule."""
    posted, fixed = (cmp.ratio(a, b) for a, b in REPRODUCE_PAIRS)
    lines = [f"{name} benchmark: ".ljust(18) + claim_table.say(r, "PseudoLinear is {x} as fast as Linear "
                                                              "(interval {low:.2f}–{high:.2f}×)")
             for name, r in (("posted", posted), ("fixed", fixed))]
    # fixed ratio over posted ratio, round by round: > 1 when removing the mistakes widened the gap
    change = noise.Ratio([f / p for f, p in zip(fixed.values, posted.values)])
    if not (posted.decided and fixed.decided and change.decided):
        lines.append("Whether removing the mistakes changed the ratio: "
                     + (change if not change.decided else posted if not posted.decided else fixed).not_decided())
    elif change.low > 1.1:
        lines.append("Removing the mistakes widened the gap: the random input and the ReLUs cost both arms the "
                     "same, and `+ x` cost PseudoLinear an extra pass over memory.")
    elif change.high < 1 / 1.1:
        lines.append("Removing the mistakes narrowed the gap here.")
    elif change.low >= 1 / 1.1 and change.high <= 1.1:
        lines.append("Removing the mistakes changed the ratio by less than 10% here.")
    else:
        lines.append("Whether removing the mistakes changed the ratio: " + change.not_decided())
    return "\n".join(lines)


def reported_figure():
    """The thread's reported speed-ups against width (reported figures, GPUs not named)."""
    from matplotlib.ticker import FuncFormatter

    from ..plots import subplots

    rep = thread_report()
    fig, ax = subplots(figsize=(7, 3.4), layout="constrained")
    for label, table in (rep.tables if rep else {}).items():
        ax.plot(list(table), list(table.values()), marker="o", ms=3, label=label)
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_yscale("log")
    ax.set_xlabel("width (features)")
    ax.set_ylabel("PseudoLinear speed-up over Linear (×, log)")
    ax.set_title(f"{rep.label if rep else _NO_REPORT}\nreported in the thread, not measured by this course",
                 fontsize=9)
    if rep:
        ax.legend(fontsize=7)
    return fig


def reported_table() -> str:
    """The thread's speed-up tables side by side, under the file's label (reported, GPUs not named)."""
    rep = thread_report()
    if rep is None or not rep.tables:
        return _NO_REPORT
    widths = sorted({w for t in rep.tables.values() for w in t})
    rows = [("width", *rep.tables)]
    rows += [(str(w), *(f"{t[w]:.2f}×" if w in t else "-" for t in rep.tables.values())) for w in widths]
    return f"{rep.label}\n" + text_table(rows, numbers=True) + f"\n({rep.tables_note})"
