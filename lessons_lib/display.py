"""Showing things in a notebook: the library's own code (one source of truth, highlighted), tables, and
counts and numbers in words ("1 thread", "68 host syncs", never "1 threads" or "68.0 host syncs")."""
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


def number(x: float, digits: int = 3) -> str:
    """A number as a reader writes it: a whole number without ".0" (68, not 68.0), else `digits` significant
    figures (0.25, 1.5, 3.14), thousands separated (12,800)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.{digits}g}" if abs(x) >= 1 else f"{x:.{digits}g}"


def plural(noun: str) -> str:
    """English plural of a noun or a noun phrase's last word: sync -> syncs, copy -> copies, batch ->
    batches, saved tensor -> saved tensors (only the last word changes)."""
    head, _, last = noun.rpartition(" ")
    if last.endswith(("s", "x", "z", "ch", "sh")):
        last += "es"
    elif last.endswith("y") and last[-2:-1] not in ("a", "e", "i", "o", "u"):
        last = last[:-1] + "ies"
    else:
        last += "s"
    return f"{head} {last}" if head else last


def count(n: float, noun: str, plural_form: str | None = None) -> str:
    """"1 thread", "2 threads", "68 host syncs" (from 68.0), "1.5 host syncs", "0 saved tensors": the number
    (`number`) and the noun, singular only for exactly one. plural_form: for an irregular noun."""
    many = plural_form or plural(noun)
    return f"{number(n)} {noun if n == 1 else many}"
