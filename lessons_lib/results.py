"""Recorded results: small JSON files, read by notebooks and widgets.

Every figure has a *kind*, kept in `meta.kind_of_figures` and shown wherever the figure is:

- `measured`: our harness on named hardware (`python -m lessons_lib.record` on that machine);
- `reported`: a figure from a forum thread or a cited public source, with the hardware as the
  source states it (hand-copied, the source named in `meta.source`);
- `model`: the roofline floor for a named GPU's datasheet peaks, from the lessons' traced work
  on `meta` (`python -m lessons_lib.record --model T4`). Not a measurement.

Layout of a file (lessons_lib/reference/<slug>.json):

    {"meta": {"name", "kind" ("cuda" | "cpu"), "kind_of_figures", "torch", "date", "source", ...},
     "lessons": {"01_broadcast_matmul": {"headline": RUN, "sweeps": {param: SWEEP}, ...}}}

RUN   = {"params", "dtype", "peaks", "variants": {name: ROW}}
SWEEP = {"param", "values", "base", "dtype", "variants": {name: {"median": [...], "iqr": [...]}}}
ROW (measured) = {"median", "iqr", "floor", ...}; (reported) = {"per_call", "total_s", "calls", "note"};
ROW (model) = {"floor", "regime", "flops", "bytes", "launches"} (in a model SWEEP: {"floor": [...]}).

`Recorded.lesson(key)` gives every row a "median" and "iqr" to plot, whatever its kind: the
measured median, a reported per-call time, or a model's floor (iqr 0), and a "figure" that says
which. Use `Recorded.figure_note()` or the row's "figure" to say so beside the plot.
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .device import DeviceInfo
from .display import count
from .roofline import Peaks

REFERENCE_DIR = Path(__file__).parent / "reference"
KINDS = ("measured", "reported", "model")
# What each kind's figure is, in a few words (for labels) and in a sentence (for notes).
KIND_WORDS = {"measured": "measured", "reported": "reported", "model": "model (datasheet roofline)"}
KIND_NOTES = {
    "measured": "measured: our harness's median on the named hardware",
    "reported": "reported: a figure copied from the forum thread or a cited source, hardware as the source states it",
    "model": "model: the roofline floor (FLOPs, bytes and ops over the GPU's datasheet peaks); not a measurement",
}
_FIGURE = {"measured": "median of measured calls", "reported": "as reported",
           "model": "roofline floor (model, not a measurement)"}


def run_to_dict(run, peaks: Peaks | None = None) -> dict:
    variants = {}
    for name, t in run.timings.items():
        w = run.work[name]
        row = {"median": t.median, "iqr": t.iqr, "samples": len(t.samples), "calls_per_sample": t.calls_per_sample,
               "method": t.method, "flops": w.flops, "bytes": w.bytes, "launches": w.launches}
        if peaks is not None:
            row["floor"] = peaks.floor(w)
            row["regime"] = peaks.regime(w)
        variants[name] = row
    out = {"params": run.params, "dtype": run.dtype, "variants": variants}
    if peaks is not None:
        out["peaks"] = peaks_to_dict(peaks)
    return out


def peaks_to_dict(peaks: Peaks) -> dict:
    return {"flops": peaks.flops, "bandwidth": peaks.bandwidth, "launch": peaks.launch, "source": peaks.source}


def sweep_to_dict(sweep) -> dict:
    meds, iqrs = sweep.medians(), sweep.iqrs()
    base = {k: v for k, v in sweep.runs[0].params.items() if k != sweep.param}
    return {"param": sweep.param, "values": sweep.values, "base": base, "dtype": sweep.runs[0].dtype,
            "variants": {n: {"median": meds[n], "iqr": iqrs[n]} for n in meds}}


def _figure_row(row: dict, kind: str) -> dict:
    """A copy of one variant's row with "median", "iqr" and "figure" filled in for plotting."""
    row = dict(row)
    if "median" in row:
        row.setdefault("figure", _FIGURE["measured"] if kind == "measured" else _FIGURE.get(kind, kind))
        return row
    if "per_call" in row:
        row["median"], row["figure"] = row["per_call"], row.get("figure", "per call, as reported")
    elif "floor" in row:
        row["median"], row["figure"] = row["floor"], _FIGURE["model"]
    else:
        return row
    value = row["median"]
    row.setdefault("iqr", [0.0] * len(value) if isinstance(value, list) else 0.0)
    return row


@dataclass
class Recorded:
    meta: dict
    lessons: dict
    path: Path | None = None

    @property
    def is_gpu(self) -> bool:
        return self.meta.get("kind") == "cuda"

    @property
    def kind(self) -> str:
        """"measured", "reported" or "model" (files from before kinds existed were measured)."""
        return self.meta.get("kind_of_figures") or self.meta.get("figures") or "measured"

    def _name(self) -> str:
        return self.meta["name"].replace("NVIDIA ", "")

    def label(self) -> str:
        """One line naming the hardware, the kind of figures and where they come from."""
        m, kind = self.meta, self.kind
        if kind == "measured":
            return f"{self._name()} · measured · torch {m['torch']} · {m['date']}"
        if kind == "reported":
            torch = f" · torch {m['torch']}" if m.get("torch_stated", True) else ""
            return f"{self._name()} · reported ({m.get('source_short') or m.get('short_source') or 'cited source'}){torch}"
        return f"{self._name()} · {KIND_WORDS.get(kind, kind)}"

    def short(self) -> str:
        """A short unique name for menus and legends; it carries the kind too."""
        m, kind = self.meta, self.kind
        if kind == "measured":
            return f"{self._name()} · measured {m['date']}"
        if kind == "reported":
            return f"{self._name()} · reported" + (f", torch {m['torch']}" if m.get("torch_stated", True) else "")
        return f"{self._name()} · model"

    def figure_note(self) -> str:
        """A sentence saying what this file's figures are."""
        return KIND_NOTES.get(self.kind, self.kind)

    def lesson(self, key: str) -> dict | None:
        """This lesson's section; every headline and sweep row has "median", "iqr" and "figure"."""
        data = self.lessons.get(key)
        if not isinstance(data, dict):
            return data
        data = copy.deepcopy(data)
        head = data.get("headline")
        if head:
            head["variants"] = {n: _figure_row(v, self.kind) for n, v in head.get("variants", {}).items()}
        for sw in data.get("sweeps", {}).values():
            sw["variants"] = {n: _figure_row(v, self.kind) for n, v in sw.get("variants", {}).items()}
        return data

    def headline_figures(self, key: str) -> dict[str, float]:
        """{variant: seconds} at this lesson's headline shape (median, reported or floor), in the lesson's
        declared order where it is known (`declare_order`): a JSON file keeps its keys sorted."""
        head = (self.lesson(key) or {}).get("headline") or {}
        rows = {n: v["median"] for n, v in head.get("variants", {}).items() if "median" in v}
        return {n: rows[n] for n in in_order(key, rows)}

    def conditions(self, key: str) -> str:
        """How this file's figures for a lesson were made, in words, for every figure that replays them:
        threads, load average, what ran beside it, quick or full (measured); nothing ran (model); as the
        source states (reported). A CPU recorded under load reads 4x slower than the same CPU idle."""
        if self.kind == "model":
            return "datasheet peaks and the traced work; nothing was run"
        if self.kind == "reported":
            return "conditions as the source gives them (load and threads not stated)"
        c = (self.meta.get("conditions") or {}).get(key)
        if not isinstance(c, dict):
            return "recording conditions (load, threads) not stored in this file"
        parts = []
        if c.get("threads"):
            parts.append(count(c["threads"], "thread"))
        load = c.get("load_average")
        if isinstance(load, (list, tuple)) and load:
            lo, hi = min(load), max(load)
            parts.append(f"load average {lo:.1f}" + (f"–{hi:.1f}" if f"{lo:.1f}" != f"{hi:.1f}" else ""))
        elif isinstance(load, (int, float)):
            parts.append(f"load average {load:.1f}")
        parts.append(f"beside {c['beside']}" if c.get("beside") else "nothing else running")
        parts.append("quick run (--quick: short timings)" if c.get("quick") else "full run")
        return "recorded with " + ", ".join(parts)


def measured_lessons(info: DeviceInfo, directory: Path | str = REFERENCE_DIR) -> dict:
    """The lessons already in this device's measured file ({} if there is none)."""
    path = Path(directory) / f"{info.slug()}.json"
    return json.loads(path.read_text())["lessons"] if path.exists() else {}


def _write_json(path: Path, data: dict) -> None:
    """Write whole or not at all (a temporary file, then a rename): `record` rewrites the file after each
    lesson, and a run stopped mid-write must keep the lessons written before."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def save(info: DeviceInfo, lessons: dict, directory: Path | str = REFERENCE_DIR,
         conditions: dict | None = None) -> Path:
    """Write (or update) this device's measured file; lessons not re-recorded are kept.

    conditions: {lesson key: how it was recorded (threads, load average, what ran beside it)}, kept in
    meta beside those of the lessons kept from before."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{info.slug()}.json"
    old = measured_lessons(info, directory)
    old_conditions = json.loads(path.read_text())["meta"].get("conditions", {}) if path.exists() else {}
    data = {"meta": {**info.as_dict(), "kind_of_figures": "measured", "recorded_by": "python -m lessons_lib.record",
                     "conditions": {**old_conditions, **(conditions or {})}},
            "lessons": {**old, **lessons}}
    _write_json(path, data)
    return path


def save_file(name: str, meta: dict, lessons: dict, directory: Path | str = REFERENCE_DIR) -> Path:
    """Write a reported or model file as given (meta must carry kind_of_figures)."""
    if meta.get("kind_of_figures") not in KINDS:
        raise ValueError(f"meta.kind_of_figures must be one of {KINDS}, got {meta.get('kind_of_figures')!r}.")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    _write_json(path, {"meta": meta, "lessons": lessons})
    return path


def load_all(directory: Path | str = REFERENCE_DIR) -> list[Recorded]:
    """Every recorded file: measured first, then reported, then model; GPUs before CPUs.
    A malformed file is skipped with a warning, not raised."""
    out = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            out.append(Recorded(data["meta"], data.get("lessons", {}), path))
        except (ValueError, KeyError, TypeError) as err:
            import warnings

            warnings.warn(f"Skipping recorded results {path.name}: {err}")
    order = {k: i for i, k in enumerate(KINDS)}
    return sorted(out, key=lambda r: (order.get(r.kind, len(KINDS)), not r.is_gpu, r.meta.get("name", ""),
                                      r.path.name if r.path else ""))


def for_lesson(key: str, kinds=None, gpu_only: bool = False, directory: Path | str = REFERENCE_DIR) -> list[Recorded]:
    """Files holding this lesson, optionally only some kinds ("measured", "reported", "model")."""
    if isinstance(kinds, bool):  # for_lesson(key, True): the old positional gpu_only
        kinds, gpu_only = None, kinds
    if isinstance(kinds, str):
        kinds = (kinds,)
    if kinds is not None:
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise ValueError(f"Unknown kind(s) {bad}: choose from {KINDS}.")
    return [r for r in load_all(directory)
            if r.lessons.get(key) and (r.is_gpu or not gpu_only) and (kinds is None or r.kind in kinds)]


def headline_figures(rec: Recorded, key: str) -> dict[str, float]:
    """{variant: seconds} of a file's headline (median, reported per call, or model floor)."""
    return rec.headline_figures(key)


class MachineRows(dict):
    """{machine: {variant: seconds}}, as `side_by_side` returns it, plus what `plots.machines` draws with it:
    `order`, the variants' order (the lesson's declared one), and `caption`, each file's recording
    conditions (`Recorded.conditions`)."""

    order: list[str] = []
    caption: str = ""


def side_by_side(key: str, mine: dict[str, float] | None = None, mine_label: str = "this machine",
                 directory: Path | str = REFERENCE_DIR, kinds=None,
                 order: list[str] | None = None) -> MachineRows:
    """{machine: {variant: seconds}} for the lesson's headline: the reader's run and every file.
    Each file's name carries its kind ("T4 · model", "GeForce GTX 1050 Ti · reported, torch 1.10.0").
    order: the variants' order (default: the lesson's declared one, `declare_order`, else `mine`'s)."""
    rows = MachineRows({mine_label: dict(mine)} if mine else {})
    notes = []
    for rec in for_lesson(key, kinds=kinds, directory=directory):
        figures = rec.headline_figures(key)
        if figures:
            rows[rec.short()] = figures
            notes.append(f"{rec.short()}: {rec.conditions(key)}.")
    seen = list(dict.fromkeys(v for r in rows.values() for v in r))
    rows.order = in_order(key, seen, order if order is not None else (list(mine) if mine else None))
    for name, r in rows.items():
        rows[name] = {v: r[v] for v in rows.order if v in r}
    rows.caption = " ".join(notes)
    return rows


# The variants' declared order, per lesson key: `Lesson` declares it when built (lesson.py). A JSON file keeps
# its keys sorted, so a recorded headline read back alone came out alphabetical ("+ fused, + gemm, …, original").
_DECLARED: dict[str, list[str]] = {}


def declare_order(key: str, names) -> None:
    """Remember a lesson's variants in their declared order (new names after the known ones)."""
    known = _DECLARED.setdefault(key, [])
    known.extend(n for n in names if n not in known)


def in_order(key: str, names, order: list[str] | None = None) -> list[str]:
    """`names` in `order`, else the lesson's declared order, else as given; names neither knows go last."""
    ref = list(order) if order else _DECLARED.get(key, [])
    names = list(names)
    return [n for n in ref if n in names] + [n for n in names if n not in ref]


def describe_recorded(key: str, directory: Path | str = REFERENCE_DIR) -> str:
    """One line per file holding this lesson (its kind named), then what each kind means."""
    recs = for_lesson(key, directory=directory)
    if not recs:
        return "No recorded results for this lesson yet: run `python -m lessons_lib.record` to make some."
    lines = [f"• {r.label()}" + ("" if r.is_gpu else " (CPU)") for r in recs]
    lines += [f"  {KIND_NOTES[k]}" for k in KINDS if any(r.kind == k for r in recs)]
    return "\n".join(lines)
