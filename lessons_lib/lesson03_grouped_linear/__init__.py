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
"""
from __future__ import annotations

from .variants import (  # noqa: F401
    _BASE, block_diagonal, bmm_rows, einsum, forum_baddbmm, grouped_conv1d, grouped_linear_auto, grouped_mm,
    matmul_channels, MultichannelLinear, slow_groups, SlowGroups, vmap_functional,
)
from .lessons import (  # noqa: F401
    _LaidOut, _prepare_auto, _prepare_compiled, _prepare_gemm_layout, AUTO, FORUM, KEY, LESSON, make_inputs,
    make_train_inputs, ODD_SHAPES, PARAMS, peak_bytes, THREAD_REPORTED, THREAD_REPORTED_NOTE, THREAD_SHAPE,
    TRAIN_LESSON, train_peak_bytes, train_step, validate, VARIANTS, with_variants,
)
from .evidence import (  # noqa: F401
    _amp_dtype, _fwd, _train, check_all, CHECK_SHAPE, grouped_mm_report, GROUPED_MM_SHAPES, grouped_mm_trace,
    precision_model, reported_table, reproduce, reproduce_summary, stack_module_state_pitfall, thread_models,
)
from .inside import (  # noqa: F401
    _device_op, compile_loop, conv_backend, copies_table, gemm_shapes, look_inside, loop_graphs, loop_rows,
    OPT_LOOP, OPT_STACKED, optimizer_ops, optimizer_summary, optimizer_timings,
)
from .crossover import (  # noqa: F401
    _date_key, _winner_words, crossover_grid, Grid, GRID_CPU, GRID_GPU, grid_table, GRID_VARIANTS, heatmap,
    latest_grid, paired_check, recorded_grids,
)
from .explore import (  # noqa: F401
    BAR, explorer, record, targets,
)
from .exercise import (  # noqa: F401
    _exercise_inputs, _exercise_reference, _gpu_speed_check, check_exercise, exercise_loop, EXERCISE_META,
    EXERCISE_SHAPES, exercise_starter,
)

__all__ = ["KEY", "LESSON", "TRAIN_LESSON", "THREAD_SHAPE", "THREAD_REPORTED", "SlowGroups", "MultichannelLinear",
           "slow_groups", "grouped_conv1d", "bmm_rows", "matmul_channels", "einsum", "vmap_functional",
           "block_diagonal", "grouped_mm", "grouped_linear_auto", "forum_baddbmm", "make_inputs", "make_train_inputs", "train_step",
           "with_variants", "explorer", "thread_models", "reproduce", "reproduce_summary", "reported_table", "precision_model",
           "look_inside", "copies_table", "gemm_shapes", "conv_backend", "optimizer_ops", "optimizer_timings",
           "optimizer_summary", "AUTO", "FORUM", "BAR",
           "loop_graphs", "loop_rows", "compile_loop", "check_all", "CHECK_SHAPE", "grouped_mm_report", "grouped_mm_trace",
           "stack_module_state_pitfall", "Grid", "crossover_grid", "grid_table", "heatmap", "recorded_grids", "latest_grid", "record",
           "targets", "exercise_starter", "exercise_loop", "check_exercise"]
