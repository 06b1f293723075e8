"""Lesson 02: a gigabyte that autograd keeps for a small matmul (forum seed 004).

A grouped linear layer: x (batch, groups·dim) is cut into `groups` slices of `dim` features
and slice g is multiplied by its own dim × dim weight W[g]. The thread wrote it as
`x.view(B, G, 1, D) @ W`. `matmul` has no derivative of its own for dense tensors, so
autograd records what it decomposes into: W is expanded to (B, G, D, D), copied, and fed to
one `bmm`, and that bmm keeps the copy (B·G·D·D floats, 1 GiB at the thread's shape) for
backward. The fixes run the same maths as one bmm over the G groups, which keeps only x and W.

Every variant maps x (B, G·D) and W (G, D, D) to out (B, G, D), out[b, g] = x[b, g] @ W[g].

Which file holds what:

- variants.py           the thread's code and its fixes (what the notebook shows), THREAD_SHAPE, inputs, one
                        training step
- evidence.py           the thread's posted figures reproduced on meta, the expanded copy's bytes, a step's memory,
                        what autograd keeps depending on requires_grad
- evidence_variants.py  the variants' memory side by side, predicted peaks, stacked layers and checkpointing
- evidence_compile.py   torch.compile of the posted version: what it saves, its peaks and its time
- explore.py            LESSON (the explorer's declaration), explorer(), the recorded results (record, targets,
                        recorded_reproductions)
- exercise.py           the exercise: starter, float64 reference, checker

Below: the names the notebook and its solution use (the tests import the rest from the files above).
`explorer` is also used by tests/test_widgets.py and workshop/explorer_times.py.
"""
from __future__ import annotations

from .evidence import (  # noqa: F401
    expanded_copy_bytes, measure_reproduction, reproduce_table, requires_grad_table, step_memory, thread_inputs,
)
from .evidence_compile import compile_check  # noqa: F401
from .evidence_variants import depth_table, memory_table, predicted_peaks  # noqa: F401
from .exercise import check_exercise, exercise_starter  # noqa: F401
from .explore import LESSON, explorer, recorded_reproductions  # noqa: F401
from .variants import (  # noqa: F401
    THREAD_SHAPE, GroupedMatmul, bmm_3d, broadcast_matmul, checkpointed, einsum, make_inputs, strategy_1, strategy_2,
    thread_einsum,
)
