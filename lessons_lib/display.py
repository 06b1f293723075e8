"""Showing the library's own code in a notebook: one source of truth, rendered with highlighting."""
from __future__ import annotations

import inspect


def show_source(*objs):
    """The source of functions or classes, syntax-highlighted in a notebook."""
    from IPython.display import Code

    return Code("\n\n".join(inspect.getsource(o).rstrip() for o in objs), language="python")
