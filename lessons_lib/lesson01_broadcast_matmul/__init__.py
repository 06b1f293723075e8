"""Lesson 01: a broadcast matmul that is slower than a Python loop (forum seed 000).

Twelve linear "modules" are applied to the same input. The batched version broadcasts
`x` against a (modules, 1, E, E) weight; `torch.matmul` then expands and copies *both*
operands to the full broadcast batch before one `bmm`. The rewrites (variants.py) run the same
maths as one GEMM (einsum, folded mm), one batched GEMM (stacked bmm) or twelve (loop),
and none of them copies a weight.

Which file holds what:

- variants.py  the thread's code and its rewrites (what the notebook shows), THREAD_SHAPE, make_inputs
- evidence.py  the bytes of the expanded weight copy
- explore.py   LESSON (the explorer's declaration), explorer(), the recorded results (record, targets)
- exercise.py  the exercise: starter, float64 reference, checker, the GPU speed bar
"""
from __future__ import annotations

from .variants import THREAD_SHAPE, broadcast_matmul, loop, einsum, stacked_bmm, folded_mm, make_inputs  # noqa: F401
from .evidence import thread_weight_copy_bytes  # noqa: F401
from .explore import peak_bytes, LESSON, explorer, SWEEPS_GPU, SWEEPS_CPU, record, targets  # noqa: F401
from .exercise import (  # noqa: F401
    exercise_starter, exercise_reference, EXERCISE_SHAPES, check_exercise, GPU_SPEEDUP_BAR, gpu_speed_check,
)
