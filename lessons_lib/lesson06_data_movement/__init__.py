"""Lesson 06: data movement and tensor hygiene, seed 001's advice tested claim by claim.

Forum seed 001 ("How can I speed up PyTorch vector operations?") is a list of confident advice
with three timing examples. Each claim gets an experiment here, evidence that does not depend
on the machine where it exists (sync detector, op traces, saved-tensor ledger), a timing where
the effect is a time, a verdict, and the corrected rule:

1. keep data on the GPU (transfers, pinned memory, non_blocking, hidden syncs);
2. replace Python loops with vector ops and broadcasting (the seed's per-element loop; expand vs repeat);
3. `torch.cat` in a loop reallocates: pre-allocate and fill (vs collect, then cat once);
4. in-place ops avoid copies;
5. `no_grad` saves time and memory (and `inference_mode`);
6. channel-first layouts help convolutions.
"""
from __future__ import annotations

from .variants import (  # noqa: F401
    SEED_EXAMPLE1, SEED_EXAMPLE2, SEED_EXAMPLE3, posted_transfer_loop, copy_only_loop, kept_on_device_loop,
    hidden_syncs_example, hidden_syncs_fixed, copy_pageable, copy_pinned, pin_then_copy, posted_elementwise,
    posted_broadcast, broadcast_view, broadcast_gather, cat_in_a_loop, preallocate_and_fill, cat_once,
    out_of_place, in_place, into_buffer, normalise_in_place, forward_with_grad, forward_no_grad,
    forward_inference_mode, GRAD_MODES,
)
from .evidence import _measure, _bytes, CLAIMS, TESTED_ELSEWHERE, summary_table  # noqa: F401
from .evidence_transfers import (  # noqa: F401
    transfer_syncs, sync_table, seed_example1_model, seed_example1_model_table, seed_example1_timings,
    seed_example1_verdict,
)
from .evidence_loops import (  # noqa: F401
    elementwise_reference, broadcast_error, ops_per_element, Extrapolation, extrapolate_elementwise,
    expand_vs_repeat,
)
from .evidence_cat import predicted_cat_bytes, cat_bytes_table, growth_exponent, cat_verdict, sweep_exponent  # noqa: F401
from .evidence_inplace import (  # noqa: F401
    inplace_traces, inplace_timings, inplace_cause, inplace_reading, version_counter_error,
    expanded_write_error, aliasing_demo,
)
from .evidence_grad import mlp, saved_bytes, grad_mode_timings, grad_modes_agree, grad_mode_verdict  # noqa: F401
from .evidence_layout import convnet, layout_inputs, layout_strides, layout_timings, layout_verdict, _no_grad_call  # noqa: F401
from .explore import (  # noqa: F401
    KEY, cat_inputs, cat_peak_bytes, CAT_LESSON, cat_explorer, explorer, _transfer_inputs, _transfer_validate,
    transfer_lesson, transfer_explorer, CAT_NS_CPU, CAT_NS_GPU, record, targets,
)
from .exercise import (  # noqa: F401
    exercise_starter, exercise_reference, EXERCISE_SHAPES, EXERCISE_GROWTH, EXERCISE_PIECE, _exercise_pieces,
    check_exercise, GPU_SPEEDUP_BAR, _gpu_speed_check,
)

__all__ = ["KEY", "CAT_LESSON", "transfer_lesson", "posted_transfer_loop", "copy_only_loop", "kept_on_device_loop",
           "transfer_syncs", "sync_table", "hidden_syncs_example", "hidden_syncs_fixed", "seed_example1_model",
           "seed_example1_model_table", "seed_example1_timings", "posted_elementwise", "posted_broadcast",
           "broadcast_view", "broadcast_gather", "broadcast_error", "ops_per_element", "extrapolate_elementwise",
           "expand_vs_repeat", "cat_in_a_loop", "preallocate_and_fill", "cat_once", "predicted_cat_bytes",
           "cat_bytes_table", "growth_exponent", "cat_explorer", "explorer", "transfer_explorer", "inplace_traces",
           "inplace_timings", "version_counter_error", "expanded_write_error", "normalise_in_place", "aliasing_demo",
           "saved_bytes", "grad_mode_timings", "grad_modes_agree", "layout_strides", "layout_timings",
           "summary_table", "CLAIMS", "record", "targets", "exercise_starter", "check_exercise",
           "seed_example1_verdict", "cat_verdict", "sweep_exponent", "inplace_cause", "inplace_reading",
           "grad_mode_verdict", "layout_verdict"]
