"""The explorer's status line: each outcome in one line of HTML (done, stopped, refused, a bug), the harness's
noise flag beside the winner it may seem to contradict, and an estimate's phases in words. Split from
explorer_ui.py, which re-exports these names."""
from __future__ import annotations

import html
import traceback

from .timing import fmt_time


def _noise_line(timings, run=None) -> str:
    """The harness's own noise flag, one line: the first noisy note, and how many were noisy. Beside a winner
    that paired rounds decided, it says so: the rounds' ratio cancels a drift that slows both, so noisy
    timings and a decided winner do not contradict each other (lesson 07 showed "1.10× ahead" beside
    "6 of 6 measurements noisy" and said nothing of it)."""
    noisy = [t for t in timings if t.noisy]
    if not noisy:
        return ""
    more = f" ({len(noisy)} of {len(timings)} measurements noisy)" if len(timings) > 1 else ""
    why = ""
    if run is not None and run.paired and run.winner and "not decided" not in run.winner:
        why = ("; the winner above was decided from paired rounds, whose per-round ratio cancels a drift that "
               "slows both")
    return _line(f"⚠ {noisy[0].label}: {noisy[0].noise_note()}{more}{why}", "#b60")


def _parts(parts: dict) -> str:
    """" (measuring 9.7 s, deciding the winner 3.1 s if the first pass does not)" from `Explorer.estimate_parts`."""
    shown = [f"{k} {fmt_time(v)}" + (" if the first pass does not" if k.startswith("deciding") else "")
             for k, v in parts.items() if v > 0]
    return f" ({', '.join(shown)})" if len(shown) > 1 else ""


def _line(text: str, color: str) -> str:
    return f"<span style='color:{color}'>{html.escape(text, quote=False)}</span>"


def _first_line(err) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _details(err, frames: int = 4) -> str:
    """The last few frames, folded: enough to report the bug, not a 60-line wall."""
    tb = traceback.format_exception(type(err), err, err.__traceback__)
    short = "".join(tb[-frames - 1:]).rstrip()
    return (f"<details><summary>details</summary><pre style='font-size:85%;white-space:pre-wrap'>"
            f"{html.escape(short)}</pre></details>")
