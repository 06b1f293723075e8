"""Showing the library's own code in a notebook: one source of truth, rendered with highlighting."""
from __future__ import annotations

import inspect


def show_source(*objs):
    """The source of functions or classes, syntax-highlighted in a notebook."""
    from IPython.display import Code

    return Code("\n\n".join(inspect.getsource(o).rstrip() for o in objs), language="python")


def text_table(rows: list[tuple[str, ...]], numbers: bool = False) -> str:
    """Rows of strings as a fixed-width table: the header, a rule, the rest.

    numbers: right-align every column after the first (for figures). Deterministic text, so
    nbval can compare the tables that are facts about PyTorch.
    """
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if numbers and i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    lines.insert(1, "-" * max(len(line) for line in lines))
    return "\n".join(lines)
