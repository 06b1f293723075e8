"""Lesson 04: kernel launch overhead, fusion and the three regimes (forum seed 003, PseudoLinear).

A `PseudoLinear` layer computes `x * w + b`: N times fewer FLOPs than `nn.Linear` at width N,
yet in the thread it is no faster at width 160. Every op costs a fixed overhead (dispatch, and
on a GPU a kernel launch) before it does any work, and an elementwise op is limited by the
bytes it moves, not by its FLOPs. Which bound wins depends on the shape: overhead at small
shapes, memory for elementwise ops at large ones, compute for big GEMMs.

So that every variant computes the *same* function, `Linear` here multiplies by the diagonal
matrix `W = diag(w)`: it gives PseudoLinear's output exactly and pays a full GEMM for it, which
is the thread's comparison. Shapes: x (batch, width), W (layers, width, width), w and b
(layers, width).

Which file holds what:

- variants.py    the thread's code and its fixes, fn(x, W, w, b): what the notebook shows with `show_source`
                 (Linear, PseudoLinear, addcmul, mul + add_, Linear in TF32; the posted and fixed benchmark;
                 eager into reused buffers; in place on a saved tensor)
- lessons.py     the thread's shape, inputs, the training step, memory, LESSON, FORWARD_FIXES, TRAIN_LESSON,
                 the compiled and TF32 variants, helpers the other files share
- reproduce.py   the thread's benchmark reproduced (its three mistakes) and its reported figures
- evidence.py    look inside: per-op overhead, the three regimes, FLOPs and bytes, which GEMM ran, GPU kernels,
                 launch latency, Linear's achieved rate
- fixes.py       fewer ops by hand, foreach SGD, every fix checked against float64
- sweeps.py      what the width and batch sweeps say (ratios against the roofline, Linear's exponent)
- compiled.py    torch.compile: recorded graphs, one cold compile against eager, a compiled training step
- fusion.py      fusion's gain taken apart: bytes bound, allocator (page faults), threads; the recorded account
- gpu_models.py  this machine beside the GPU models at one shape; the asymptote at large width
- explore.py     the explorer, `record` and `targets` (read by `python -m lessons_lib.record`)
- exercise.py    the exercise: starter, float64 reference, checker
"""
from __future__ import annotations

from .variants import (  # noqa: F401
    addcmul, fixed_model, fixed_step, inplace_on_a_saved_tensor, linear, linear_tf32, mul_add_inplace, posted_model,
    posted_step, PostedPseudoLinear, pseudo_linear, pseudo_linear_reused,
)
from .lessons import (  # noqa: F401
    _bytes, _device_first_line, _fused_work, _measure, _module_ops, _prepare_compiled, _shape, compiled_work,
    EAGER_VARIANTS, FORWARD_FIXES, has_tf32, LESSON, LESSON_KEY, make_inputs, make_train_inputs, MUL_ADD_INPLACE,
    ODD_SHAPES, PARAMS, peak_bytes, THREAD_SHAPE, TRAIN_LESSON, train_peak_bytes, train_step, with_compiled,
    with_tf32,
)
from .reproduce import (  # noqa: F401
    _NO_REPORT, mistakes_table, reported_figure, reported_table, reproduce, REPRODUCE_PAIRS, reproduce_summary,
    reproduce_table, thread_report, thread_runs_table, ThreadReport,
)
from .evidence import (  # noqa: F401
    achieved_rate, gemm_evidence, gpu_kernels, gpu_launch_latency, overhead_cases, overhead_summary,
    overhead_timings, peaks, rate_summary, regime_table, regime_terms, regimes, work_comparison,
)
from .fixes import (  # noqa: F401
    by_hand_table, check_fixes, foreach_check, optimizer_ops, optimizer_summary, optimizer_timings,
)
from .sweeps import (  # noqa: F401
    batch_summary, linear_exponent, sweep_summary,
)
from .compiled import (  # noqa: F401
    _train_call, compile_and_compare, compiled_training_check, CompiledRun, fused_graphs,
)
from .fusion import (  # noqa: F401
    _minor_faults, faults_per_call, fusion_bytes, fusion_causes, FusionCauses, recorded_fusion,
)
from .gpu_models import (  # noqa: F401
    asymptote_table, ASYMPTOTE_WIDTHS, legend_outside, machines_at, machines_figure,
)
from .explore import (  # noqa: F401
    _ratio_dict, BATCHES_CPU, BATCHES_GPU, explorer, FUSION_MARGIN, MEMORY_BOUND, record, REGIME_SHAPES, targets,
    WIDTHS_CPU, WIDTHS_GPU,
)
from .exercise import (  # noqa: F401
    _exercise_inputs, _run_reader, check_exercise, EXERCISE_META_SHAPE, exercise_reference, EXERCISE_SHAPES,
    exercise_starter, EXERCISE_TIME_LIMIT_S,
)

__all__ = ["LESSON", "TRAIN_LESSON", "FORWARD_FIXES", "LESSON_KEY", "THREAD_SHAPE", "ThreadReport", "thread_report",
           "linear", "pseudo_linear", "addcmul", "mul_add_inplace", "make_inputs", "make_train_inputs", "train_step",
           "explorer", "compiled_work", "with_compiled", "posted_model", "posted_step", "fixed_model", "fixed_step",
           "mistakes_table", "reproduce", "thread_runs_table", "overhead_timings", "overhead_cases", "peaks",
           "regime_terms",
           "regime_table", "regimes", "gemm_evidence", "work_comparison", "gpu_kernels", "achieved_rate",
           "by_hand_table", "inplace_on_a_saved_tensor", "optimizer_ops", "optimizer_timings", "foreach_check",
           "check_fixes",
           "reported_figure", "reported_table", "gpu_launch_latency", "reproduce_summary", "overhead_summary",
           "sweep_summary", "linear_exponent", "rate_summary", "fused_graphs", "compile_and_compare", "CompiledRun",
           "compiled_training_check", "batch_summary", "record", "targets", "exercise_starter", "check_exercise",
           "REPRODUCE_PAIRS", "reproduce_table", "linear_tf32", "with_tf32", "has_tf32", "pseudo_linear_reused",
           "fusion_bytes", "faults_per_call", "FusionCauses", "fusion_causes", "machines_at", "asymptote_table",
           "machines_figure", "legend_outside", "recorded_fusion", "optimizer_summary",
           "FUSION_MARGIN"]
