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

- variants.py      the thread's code and its fixes, fn(x, W, w, b): what the notebook shows with `show_source`
                   (Linear, PseudoLinear, addcmul, mul + add_, Linear in TF32; the posted and fixed benchmark;
                   eager into reused buffers; in place on a saved tensor)
- lessons.py       the thread's shape, inputs, the training step, memory, LESSON, FORWARD_FIXES, TRAIN_LESSON,
                   the compiled and TF32 variants, helpers the other files share
- reproduction.py  the thread's benchmark reproduced (its three mistakes) and its reported figures
- evidence.py      look inside: per-op overhead, the three regimes, FLOPs and bytes, which GEMM ran, GPU kernels,
                   launch latency, Linear's achieved rate
- fixes.py         fewer ops by hand, foreach SGD, every fix checked against float64
- sweeps.py        what the width and batch sweeps say (ratios against the roofline, Linear's exponent)
- compiled.py      torch.compile: recorded graphs, one cold compile against eager, a compiled training step
- fusion.py        fusion's gain taken apart: bytes bound, allocator (page faults), threads; the recorded account
- gpu_models.py    this machine beside the GPU models at one shape; the asymptote at large width
- explore.py       the explorer, `record` and `targets` (read by `python -m lessons_lib.record`)
- exercise.py      the exercise: starter, float64 reference, checker

Below: the names the notebook and its solution use (the tests import the rest from the files above).
`explorer` is also used by tests/test_widgets.py and workshop/explorer_times.py; `fixed_model` by
lessons_lib/lesson05_cuda_graphs/on_gpu.py.
"""
from __future__ import annotations

from .variants import (  # noqa: F401
    addcmul, fixed_model, inplace_on_a_saved_tensor, mul_add_inplace, posted_model, posted_step, PostedPseudoLinear,
    pseudo_linear_reused,
)
from .lessons import FORWARD_FIXES, LESSON, THREAD_SHAPE  # noqa: F401
from .reproduction import (  # noqa: F401
    mistakes_table, reported_figure, reported_table, reproduce, reproduce_summary, reproduce_table,
    thread_runs_table,
)
from .evidence import (  # noqa: F401
    gemm_evidence, gpu_kernels, gpu_launch_latency, overhead_summary, overhead_timings, peaks, rate_summary,
    regime_table, work_comparison,
)
from .fixes import (  # noqa: F401
    by_hand_table, check_fixes, optimizer_ops, optimizer_summary, optimizer_table, optimizer_timings,
)
from .sweeps import batch_summary, sweep_summary  # noqa: F401
from .compiled import compile_and_compare, compiled_training_check, fused_graphs  # noqa: F401
from .fusion import fusion_causes, recorded_fusion  # noqa: F401
from .gpu_models import asymptote_table, legend_outside, machines_figure  # noqa: F401
from .explore import BATCHES_GPU, explorer, MEMORY_BOUND, REGIME_SHAPES, WIDTHS_GPU  # noqa: F401
from .exercise import check_exercise, exercise_starter  # noqa: F401
