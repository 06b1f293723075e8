"""Lesson 03: many small Linear layers in parallel, the $1000 question (forum seed 002).

A model applies G independent small `nn.Linear` layers side by side. The thread's `SlowGroups`
loops over a ModuleList (after a transpose and a chunk, before a cat); a grouped `Conv1d` with
kernel_size=1 computes the same and was "especially slow when the group size is around 100",
and slower still in training; a reply's batched-matmul module was faster (1924 ms against
1263 ms on their GPU) and `vmap` helped a little. This module reproduces that comparison,
looks inside each variant (ops, GEMMs, layout copies, FLOPs, bytes, the convolution backend),
checks every strategy against float64, maps which one wins where, and grades an exercise.
The answer itself ships as `lessons_lib.grouped_linear.GroupedLinear`.

Layout, as in the thread: x (batch, channels, length), channels = groups · group_size;
weight (groups, group_size_out, group_size_in), bias (groups, group_size_out). In and out
widths are equal here, as in the thread's toy example.

Which file holds what:

- variants.py   the thread's code (its two typos fixed) and every fix, fn(x, weight, bias): what `show_source` renders
- lessons.py    KEY, the thread's shape and figures, inputs, the training step, memory, LESSON and TRAIN_LESSON,
                with_variants (GroupedLinear(auto) and the forum's baddbmm beside the variants)
- evidence.py   reproduce the thread (and its precision model), TF32 labels; the correctness of every strategy
                (and TF32's effect on the Conv1d's); grouped_mm
- step_model.py the GPU step model (the claim's bar): each step predicted from microbenchmarks measured apart from
                it (a GEMM of each shape, a copy), on the GPU at hand or from the H200's efficiencies
- inside.py     look inside: copies, GEMM shapes, the conv backend, the optimizer's ops, the loop's graphs, compile
- crossover.py  the crossover map: the grid, the paired re-check, the table and heatmap, the recorded grids
- explore.py    the explorer, `record` and `targets` (read by `python -m lessons_lib.record`)
- exercise.py   the exercise: starter, reference, checker

Below: the names the notebook and its solution use (the tests import the rest from the files above).
`explorer` is also used by tests/test_widgets.py and workshop/explorer_times.py.
"""
from __future__ import annotations

from .variants import MultichannelLinear, SlowGroups, vmap_functional  # noqa: F401
from .lessons import KEY, LESSON, ODD_SHAPES, TRAIN_LESSON, with_variants  # noqa: F401
from .evidence import (  # noqa: F401
    CHECK_SHAPE, check_all, conv_tf32_check, grouped_mm_report, grouped_mm_trace, precision_model, reported_table,
    reproduce, reproduce_summary, reproduce_table, stack_module_state_pitfall, step_model_table, tf32_note,
)
from .inside import (  # noqa: F401
    compile_loop, conv_backend, copies_table, gemm_shapes, look_inside, loop_graphs, optimizer_ops,
    optimizer_summary, optimizer_timings,
)
from .crossover import (  # noqa: F401
    GRID_VARIANTS, crossover_grid, grid_table, heatmap, latest_grid, recorded_conditions, recorded_grids,
)
from .explore import explorer  # noqa: F401
from .exercise import check_exercise, exercise_starter  # noqa: F401
