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


class HTMLTable:
    """A table that a notebook renders as HTML (it wraps cell by cell at any width, never into jumbled
    columns) and that prints as the fixed-width `text_table` elsewhere (a terminal, nbval's text/plain)."""

    def __init__(self, rows: list[tuple[str, ...]], numbers: bool = False, caption: str = ""):
        self.rows, self.numbers, self.caption = [tuple(str(c) for c in r) for r in rows], numbers, caption

    def __str__(self) -> str:
        return (self.caption + "\n" if self.caption else "") + text_table(self.rows, self.numbers)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        from html import escape

        def cell(tag, c, i):
            align = "right" if self.numbers and i else "left"
            return f'<{tag} style="text-align:{align}">{escape(c)}</{tag}>'

        head = "".join(cell("th", c, i) for i, c in enumerate(self.rows[0]))
        body = "".join("<tr>" + "".join(cell("td", c, i) for i, c in enumerate(r)) + "</tr>" for r in self.rows[1:])
        cap = f"<caption style='text-align:left'>{escape(self.caption)}</caption>" if self.caption else ""
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_table(rows: list[tuple[str, ...]], numbers: bool = False, caption: str = "") -> HTMLTable:
    """Rows of strings (the first is the header) as a table for a notebook: HTML in JupyterLab, the same
    fixed-width text as `text_table` when printed. Display it as a cell's last expression (or with
    `IPython.display.display`); `print` gives the text form."""
    if not rows or len({len(r) for r in rows}) != 1:
        raise ValueError("html_table needs a header row and rows of the same length.")
    return HTMLTable(rows, numbers, caption)
