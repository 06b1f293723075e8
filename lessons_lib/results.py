"""Recorded results: one small JSON file per device, read by notebooks and widgets.

Layout of a file (lessons_lib/reference/<device-slug>.json):

    {"meta": {device name, SMs, memory, torch, CUDA, driver, date, ...},
     "lessons": {"01_broadcast_matmul": {"headline": RUN, "sweeps": {param: SWEEP}, ...}}}

RUN   = {"params", "dtype", "peaks", "variants": {name: {"median", "iqr", "floor", ...}}}
SWEEP = {"param", "values", "base", "dtype", "variants": {name: {"median": [...], "iqr": [...]}}}

`python -m lessons_lib.record` regenerates the file for whatever device it runs on.
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


@dataclass
class Recorded:
    meta: dict
    lessons: dict
    path: Path | None = None

    @property
    def is_gpu(self) -> bool:
        return self.meta.get("kind") == "cuda"

    def label(self) -> str:
        m = self.meta
        return f"{m['name']} · torch {m['torch']} · {m['date']}"

    def short(self) -> str:
        name = self.meta["name"].replace("NVIDIA ", "")
        return f"{name} (recorded {self.meta['date']})"

    def lesson(self, key: str) -> dict | None:
        return self.lessons.get(key)


def save(info: DeviceInfo, lessons: dict, directory: Path | str = REFERENCE_DIR) -> Path:
    """Write (or update) this device's file; lessons not re-recorded are kept."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{info.slug()}.json"
    old = json.loads(path.read_text())["lessons"] if path.exists() else {}
    data = {"meta": {**info.as_dict(), "recorded_by": "python -m lessons_lib.record"}, "lessons": {**old, **lessons}}
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


def for_lesson(key: str, gpu_only: bool = False, directory: Path | str = REFERENCE_DIR) -> list[Recorded]:
    return [r for r in load_all(directory) if r.lesson(key) and (r.is_gpu or not gpu_only)]


def side_by_side(key: str, mine: dict[str, float] | None = None, mine_label: str = "this machine",
                 directory: Path | str = REFERENCE_DIR) -> dict[str, dict[str, float]]:
    """{machine: {variant: median}} for the lesson's headline: the reader's run and every file."""
    rows = {mine_label: mine} if mine else {}
    for rec in for_lesson(key, directory=directory):
        head = rec.lesson(key).get("headline")
        if head:
            rows[rec.short()] = {n: v["median"] for n, v in head["variants"].items()}
    return rows


def describe_recorded(key: str, directory: Path | str = REFERENCE_DIR) -> str:
    """One line per recorded file holding this lesson, or a note that none exists yet."""
    recs = for_lesson(key, directory=directory)
    if not recs:
        return "No recorded results for this lesson yet: run `python -m lessons_lib.record` to make some."
    return "\n".join(f"• {r.label()}" + ("" if r.is_gpu else " (CPU)") for r in recs)
