"""Recorded results: one small JSON file per device, read by notebooks and widgets.

Layout of a file (lessons_lib/reference/<device-slug>.json):

    {"meta": {device name, SMs, memory, torch, CUDA, driver, date, ...},
     "lessons": {"01_broadcast_matmul": {"headline": RUN, "sweeps": {param: SWEEP}, ...}}}

RUN   = {"params", "dtype", "peaks", "variants": {name: {"median", "iqr", "floor", ...}}}
SWEEP = {"param", "values", "base", "dtype", "variants": {name: {"median": [...], "iqr": [...]}}}

`python -m lessons_lib.record` regenerates the file for whatever device it runs on.

Every file says what kind of figures it holds (`meta.figures`), and every place that shows a
number shows that kind:
  measured   our harness, on the named hardware (`python -m lessons_lib.record`)
  reported   figures copied from a forum thread or another cited source, hardware as the source gives it
  model      roofline floors for a named GPU's datasheet peaks (`python -m lessons_lib.record --model T4`):
             a lower bound computed from the traced work, never a measurement
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .device import DeviceInfo
from .roofline import Peaks

REFERENCE_DIR = Path(__file__).parent / "reference"


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
        out["peaks"] = {"flops": peaks.flops, "bandwidth": peaks.bandwidth, "launch": peaks.launch, "source": peaks.source}
    return out


def sweep_to_dict(sweep) -> dict:
    meds, iqrs = sweep.medians(), sweep.iqrs()
    base = {k: v for k, v in sweep.runs[0].params.items() if k != sweep.param}
    return {"param": sweep.param, "values": sweep.values, "base": base, "dtype": sweep.runs[0].dtype,
            "variants": {n: {"median": meds[n], "iqr": iqrs[n]} for n in meds}}


KINDS = ("measured", "reported", "model")


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
        """measured, reported or model (files from before kinds existed were all measured)."""
        return self.meta.get("figures", "measured")

    def label(self) -> str:
        """A full line: hardware, the kind of figures, and where they come from."""
        m = self.meta
        if self.kind == "reported":
            return f"{m['name']} · reported by {m['source']} · torch {m.get('torch', '?')} · not our measurement"
        if self.kind == "model":
            return f"{m['name']} · model: roofline floor from {m['source']} · a lower bound, not a measurement"
        return f"{m['name']} · measured with the course harness · torch {m['torch']} · {m['date']}"

    def short(self) -> str:
        name = self.meta["name"].replace("NVIDIA ", "")
        if self.kind == "reported":
            return f"{name} (reported, {self.meta.get('short_source', 'forum thread')})"
        if self.kind == "model":
            return f"{name} (model, datasheet roofline)"
        return f"{name} (measured {self.meta['date']})"

    def lesson(self, key: str) -> dict | None:
        return self.lessons.get(key)


def save(info: DeviceInfo, lessons: dict, directory: Path | str = REFERENCE_DIR) -> Path:
    """Write (or update) this device's file; lessons not re-recorded are kept."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{info.slug()}.json"
    old = json.loads(path.read_text())["lessons"] if path.exists() else {}
    data = {"meta": {**info.as_dict(), "figures": "measured", "recorded_by": "python -m lessons_lib.record"},
            "lessons": {**old, **lessons}}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def load_all(directory: Path | str = REFERENCE_DIR) -> list[Recorded]:
    """Every recorded file, GPUs first. A malformed file is skipped with a warning, not raised."""
    out = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            out.append(Recorded(data["meta"], data.get("lessons", {}), path))
        except (ValueError, KeyError) as err:
            import warnings

            warnings.warn(f"Skipping recorded results {path.name}: {err}")
    return sorted(out, key=lambda r: (not r.is_gpu, r.meta.get("name", "")))


def for_lesson(key: str, gpu_only: bool = False, directory: Path | str = REFERENCE_DIR,
               kinds: tuple[str, ...] | None = None) -> list[Recorded]:
    """Files that hold this lesson: measured first, then reported, then model; GPUs before CPUs."""
    recs = [r for r in load_all(directory) if r.lesson(key) and (r.is_gpu or not gpu_only)
            and (kinds is None or r.kind in kinds)]
    return sorted(recs, key=lambda r: (KINDS.index(r.kind) if r.kind in KINDS else 9, not r.is_gpu))


def headline_figures(rec: Recorded, key: str) -> dict[str, float]:
    """{variant: seconds per call} of a file's headline: medians, or for a model file its floors."""
    head = (rec.lesson(key) or {}).get("headline") or {}
    figure = "floor" if rec.kind == "model" else "median"
    return {n: v[figure] for n, v in head.get("variants", {}).items() if figure in v}


def side_by_side(key: str, mine: dict[str, float] | None = None, mine_label: str = "this machine",
                 directory: Path | str = REFERENCE_DIR) -> dict[str, dict[str, float]]:
    """{machine: {variant: median}} for the lesson's headline: the reader's run and every file."""
    rows = {mine_label: mine} if mine else {}
    for rec in for_lesson(key, directory=directory):
        figures = headline_figures(rec, key)
        if figures:
            rows[rec.short()] = figures
    return rows


def describe_recorded(key: str, directory: Path | str = REFERENCE_DIR) -> str:
    """One line per recorded file holding this lesson, or a note that none exists yet."""
    recs = for_lesson(key, directory=directory)
    if not recs:
        return "No recorded results for this lesson yet: run `python -m lessons_lib.record` to make some."
    return "\n".join(f"• {r.label()}" + ("" if r.is_gpu or r.kind != "measured" else " (CPU)") for r in recs)
