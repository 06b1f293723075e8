"""Lesson 05: CUDA graphs, when launches and not maths set the speed (forum seed 003).

In seed 003 a reply wraps the small-layer model in `torch.cuda.make_graphed_callables`, and
PseudoLinear's speed-up over Linear at width 512 goes from 0.44× to 1.74× on their GPU. Lesson
04 measured why: every eager op pays a fixed host cost (dispatch, a kernel launch). When the
kernels are shorter than that cost, the GPU waits for the CPU; a graph replays every kernel of a
step with one launch, so the host cost is paid once.

Two layers, both real:
- on any machine: the launch model (launch_queue: the host's dispatch measured here, kernels'
  device time from their trace and a named GPU's datasheet), and `graphs.graph_check`, which
  finds what capture would refuse or freeze, with a catalogue of safe and unsafe functions;
- on a GPU: capture and replay by hand, `make_graphed_callables`, `torch.compile(mode=
  "reduce-overhead")`, each timed with the course harness, capture cost and memory separate.

Shapes: x (batch, width); w and b (layers, width); g, the upstream gradient, like x.

Which file holds what:

- variants.py           the seed's model (pseudo_linear, the eager and Linear training steps) and the
                        catalogue's functions: what the notebook shows with `show_source`
- lessons.py            keys, the thread's widths, inputs, memory, PARAMS, LESSON, the model files' graph variant
- evidence.py           the launch model: a step's kernels, this host's dispatch, ModelStep, timelines, curves,
                        the summary and the cap on a graph's gain
- evidence_reported.py  the thread's tables (reported) beside the model: tables, figure, fit, rise, widths above the cap
- catalogue.py          capture safety: Entry, CATALOGUE (expected verdicts and sources), check_entry, catalogue_table
- on_gpu.py             capture by hand, the GPU lesson, eager vs graphed timed, the replay checked,
                        seed 003's make_graphed_callables experiment, the reduce-overhead note
- explore.py            the explorer, `record` and `targets` (read by `python -m lessons_lib.record`)
- exercise.py           the exercise: starter, float64 reference, inputs, checker
"""
from __future__ import annotations

from .variants import (  # noqa: F401
    adam_step, branch_on_value, class_counts, constant_from_python, constant_tensor, decay_in_place, device_sync,
    distinct, dropout, eager_step, every_other_step, gather_rows, grads, leaky, linear_step, log_item, LOSSES, mlp,
    noise_from_host, noise_on_device, noise_scale_from_random, one_hot_fixed, _optimizer_step, positives_mask,
    positives_nonzero, print_loss, pseudo_linear, scale_by_float, selected, sgd_step, sgd_tensor_lr, _STEP, to_host,
    top3, zero_negatives, zero_negatives_by_index,
)
from .lessons import (  # noqa: F401
    graphed_work, KEY, LESSON, make_inputs, MODEL_BATCH, MODEL_LAYERS, ODD_SHAPES, PARAMS, peak_bytes,
    REPORTED_WIDTHS, SEED_KEY, _shape,
)
from .evidence import (  # noqa: F401
    _DISPATCH, dispatch_estimate, gpu_model, graph_gain_cap, graphs_speedup_figure, host_dispatch, kernels_at_least,
    model_step, model_summary, ModelStep, MULTI_KERNEL_OPS, _preset_for, _regime, speedup_curve, step_kernels,
    timeline_figure,
)
from .evidence_reported import (  # noqa: F401
    closest_preset, fit_to_reported, graph_gain, graph_gain_table, _graphed_pair, model_vs_reported,
    model_vs_reported_figure, model_vs_reported_table, reported_table, reported_tables, widths_above_cap,
)
from .catalogue import (  # noqa: F401
    CATALOGUE, catalogue_table, check_entry, Entry, _NOTES, _sgd_inputs, _with_lr, _xy,
)
from .on_gpu import (  # noqa: F401
    check_graphed, compare_on_gpu, _cpu_note, gpu_lesson, GpuComparison, graphed_callables_ratio,
    kept_reference_demo, _prepare_graph, _prepare_reduce_overhead, reduce_overhead_note, seed_model,
    seed_model_bytes,
)
from .explore import (  # noqa: F401
    COMPUTE_BOUND, explorer, _model_metrics, OVERHEAD_BOUND, record, targets,
)
from .exercise import (  # noqa: F401
    _analyse, check_exercise, exercise_inputs, exercise_reference, EXERCISE_SHAPES, exercise_starter, GPU_CHECK,
    _gpu_replay_check, HISTORY,
)

__all__ = ["LESSON", "KEY", "pseudo_linear", "eager_step", "linear_step", "make_inputs", "step_kernels",
           "host_dispatch", "ModelStep", "model_step", "timeline_figure", "speedup_curve", "reported_tables", "reported_table",
           "model_vs_reported", "model_vs_reported_table", "graph_gain", "graph_gain_table", "graph_gain_cap", "model_vs_reported_figure", "graphs_speedup_figure",
           "model_summary", "gpu_model", "fit_to_reported", "Entry", "CATALOGUE", "check_entry", "catalogue_table", "kept_reference_demo",
           "gpu_lesson", "explorer", "compare_on_gpu", "GpuComparison", "check_graphed", "seed_model", "seed_model_bytes",
           "graphed_callables_ratio", "reduce_overhead_note", "exercise_starter", "exercise_inputs",
           "check_exercise", "record", "targets", "OVERHEAD_BOUND", "COMPUTE_BOUND", "dispatch_estimate",
           "widths_above_cap", "closest_preset", "kernels_at_least", "MULTI_KERNEL_OPS"]
