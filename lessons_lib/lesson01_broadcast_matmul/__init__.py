"""Lesson 01: a broadcast matmul that is slower than a Python loop (forum seed 000).

Twelve linear "modules" are applied to the same input. The batched version broadcasts
`x` against a (modules, 1, E, E) weight; `torch.matmul` then expands and copies *both*
operands to the full broadcast batch before one `bmm`. The rewrites (variants.py) run the same
maths as one GEMM (einsum, folded mm), one batched GEMM (stacked bmm) or twelve (loop),
and none of them copies a weight.

Which file holds what:

- variants.py  the thread's code and its rewrites (what the notebook shows), THREAD_SHAPE, make_inputs
- evidence.py  the bytes of the expanded weight copy, and what the floors say at one input (one_input_floors)
- explore.py   LESSON (the explorer's declaration), explorer(), the recorded results (record, targets)
- exercise.py  the exercise: starter, float64 reference, checker, the GPU speed bar

Below: the names the notebook and its solution use (the tests import the rest from the files above).
`explorer` is also used by tests/test_widgets.py, tests/test_browser.py and workshop/explorer_times.py.
"""
from __future__ import annotations

from .evidence import one_input_floors  # noqa: F401
from .exercise import check_exercise, exercise_starter  # noqa: F401
from .explore import LESSON, explorer  # noqa: F401
from .variants import THREAD_SHAPE, make_inputs  # noqa: F401
