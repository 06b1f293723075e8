"""Every lesson explorer replays every recorded file that holds its figures (issue 28 §2's "results from" menu).

A file holds an explorer's figures when it has a section under the explorer's key, or when the lesson's own
section holds a part named for the key's suffix: lesson 03's record keeps the training step as "headline_train"
inside the 03 section (the training explorer's key is 03_grouped_linear_train), and lesson 06's record keeps the
host-to-device copies as "transfers" (the transfer explorer's key is 06_data_movement_transfers). Both were listed
as "holding no figures for this explorer" before the explorers said where to look (`Explorer(sections=...)`).
"""
import importlib
import inspect
import pkgutil
import re

import matplotlib
import pytest

import lessons_lib
from lessons_lib import results

matplotlib.use("Agg")

PACKAGES = sorted(i.name for i in pkgutil.iter_modules(lessons_lib.__path__)
                  if i.ispkg and re.fullmatch(r"lesson\d\d_\w+", i.name))


def _explorers():
    """(name, factory) for every explorer a lesson package offers, its training twin included."""
    out = []
    for pkg in PACKAGES:
        try:
            module = importlib.import_module(f"lessons_lib.{pkg}.explore")
        except ImportError:
            continue
        for name, fn in vars(module).items():
            if name.endswith("explorer") and inspect.isfunction(fn) and fn.__module__ == module.__name__:
                out.append((f"{pkg}.{name}", lambda fn=fn: fn("cpu")))
                if "training" in inspect.signature(fn).parameters:
                    out.append((f"{pkg}.{name}(training=True)", lambda fn=fn: fn("cpu", training=True)))
    return out


EXPLORERS = _explorers()


def _holds(rec: results.Recorded, key: str) -> bool:
    """The file has the explorer's section, or a part of its lesson's section named for the key's suffix."""
    if rec.lessons.get(key):
        return True
    parent = next((k for k in rec.lessons if key.startswith(k + "_") and isinstance(rec.lessons[k], dict)), None)
    if parent is None:
        return False
    suffix = key[len(parent) + 1:]
    return any(suffix in part for part in rec.lessons[parent])


def test_every_explorer_is_found():
    names = {n.split("(")[0] for n, _ in EXPLORERS}
    assert {"lesson03_grouped_linear.explorer", "lesson06_data_movement.transfer_explorer",
            "lesson06_data_movement.cat_explorer"} <= names
    assert "lesson03_grouped_linear.explorer(training=True)" in {n for n, _ in EXPLORERS}


@pytest.mark.parametrize("name,make", EXPLORERS, ids=[n for n, _ in EXPLORERS])
def test_explorer_replays_every_file_holding_its_figures(name, make):
    import matplotlib.pyplot as plt

    ex = make()
    listed = ex.records()
    holding = [r for r in results.load_all() if _holds(r, ex.lesson.key)]
    for rec in holding:
        assert rec in listed, f"{name}: {rec.short()} holds its figures but is not in 'results from'"
        assert rec not in ex.missing_records()
        figs = ex.replay(rec)
        assert figs, f"{name}: {rec.short()} replays no figure"
        for fig in figs:
            plt.close(fig)
    for rec in listed:  # and nothing listed is empty
        figs = ex.replay(rec)
        assert figs, f"{name}: {rec.short()} is listed but replays no figure"
        for fig in figs:
            plt.close(fig)


def test_transfer_explorer_replays_the_h200_copies_as_its_variants():
    from lessons_lib.lesson06_data_movement import explore

    h200 = next(r for r in results.load_all() if "H200" in r.short() and r.kind == "measured")
    key, section = explore.transfer_sections(h200)
    copies = h200.lessons["06_data_movement"]["transfers"]
    head = section["headline"]
    assert key == "06_data_movement" and head["params"] == {"megabytes": 4}
    assert head["variants"]["pinned"]["median"] == copies["host → device, pinned"]["median"]
    assert head["variants"]["pageable"]["median"] == copies["host → device, pageable"]["median"]
    assert set(head["variants"]) == set(explore.RECORDED_AS)
    assert {v.name for v in explore.transfer_lesson().variants} <= set(explore.RECORDED_AS)


def test_training_sweep_replays_in_the_training_explorer_only():
    """Lesson 03's record sweeps the training step: the forward explorer no longer draws it as its own."""
    from lessons_lib.lesson03_grouped_linear import explore

    cpu = [r for r in results.load_all() if r.kind == "measured" and (r.lessons.get(explore.KEY) or {}).get(
        "headline_train")]
    assert cpu
    for rec in cpu:
        assert "sweeps" not in explore.forward_sections(rec)[1]
        key, train = explore.training_sections(rec)
        assert key == explore.KEY and train["headline"] == rec.lessons[explore.KEY]["headline_train"]
        recorded = rec.lessons[explore.KEY]["sweeps"]["group_size"]["variants"]
        assert {n: v["median"] for n, v in train["sweeps"]["group_size"]["variants"].items()} == {
            n: v["median"] for n, v in recorded.items()}
