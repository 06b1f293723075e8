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
                        catalogue's functions: with exercise.py's starter, what the notebook shows with `show_source`
- lessons.py            keys, the thread's widths, inputs, memory, PARAMS, LESSON, the model files' graph variant
- evidence.py           the launch model: a step's kernels, this host's dispatch, ModelStep, timelines, curves,
                        the summary and the cap on a graph's gain
- evidence_reported.py  the thread's tables (reported) beside the model: tables, figure, fit, rise, widths above the cap
- catalogue.py          capture safety: Entry, CATALOGUE (expected verdicts and sources), check_entry, catalogue_table
- on_gpu.py             capture by hand, a failed capture's aftermath, the GPU lesson, eager vs graphed timed
                        (replay and input copies apart), the replay checked, seed 003's make_graphed_callables
                        experiment, the reduce-overhead note
- explore.py            the explorer, `record` and `targets` (read by `python -m lessons_lib.record`)
- exercise.py           the exercise: starter, float64 reference, inputs, checker

Below: the names the notebook and its solution use (the tests import the rest from the files above).
`explorer` is also used by tests/test_widgets.py and workshop/explorer_times.py; `_xy`, the catalogue's
example inputs, by the notebook.
"""
from __future__ import annotations

from .variants import log_item, positives_mask, scale_by_float, zero_negatives  # noqa: F401
from .lessons import LESSON  # noqa: F401
from .evidence import (  # noqa: F401
    graphs_speedup_figure, host_dispatch, kernels_at_least, model_step, model_summary, step_kernels, timeline_figure,
)
from .evidence_reported import (  # noqa: F401
    closest_preset, fit_to_reported, graph_gain_table, model_vs_reported_figure, model_vs_reported_table,
    reported_table, widths_above_cap,
)
from .catalogue import _xy, catalogue_table  # noqa: F401
from .on_gpu import (  # noqa: F401
    check_graphed, compare_on_gpu, failed_capture_demo, graphed_callables_ratio, kept_reference_demo,
    reduce_overhead_note,
)
from .explore import explorer, KERNEL_BOUND, OVERHEAD_BOUND  # noqa: F401
from .exercise import check_exercise, exercise_inputs, exercise_starter, HISTORY  # noqa: F401
