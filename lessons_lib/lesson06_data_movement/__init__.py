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

Which file holds what:

- variants.py            the seed's code and its fixes (what the notebook shows with `show_source`)
- evidence.py            the claims, our verdicts and the summary table; the timing helper the experiments share
- evidence_transfers.py  claim 1: host syncs and copies of seed example 1, its model per named GPU, its timings
- evidence_loops.py      claim 2: seed example 2's per-element loop, its extrapolation, expand vs repeat
- evidence_cat.py        claim 3: the bytes each way of joining pieces copies, predicted and traced; the verdict
- evidence_inplace.py    claim 4: what in place saves, its cause measured, and how in place goes wrong
- evidence_grad.py       claim 5: no_grad and inference_mode, saved bytes and timings
- evidence_layout.py     claim 6: channels_last vs NCHW, strides and timings
- explore.py             the explorers (cat strategies; host-to-device copies) and the recorded results
- exercise.py            the exercise: starter, float64 reference, checker

Below: the names the notebook and its solution use (the tests import the rest from the files above).
`cat_explorer` is also used by tests/test_widgets.py and workshop/explorer_times.py.
"""
from __future__ import annotations

from .evidence import CLAIMS, summary_table  # noqa: F401
from .evidence_cat import CAT_PAIRS, cat_bytes_table, cat_verdict, growth_exponent, sweep_exponent  # noqa: F401
from .evidence_grad import GRAD_PAIRS, grad_mode_verdict, grad_modes_agree, saved_bytes  # noqa: F401
from .evidence_inplace import (  # noqa: F401
    INPLACE_PAIRS, aliasing_demo, expanded_write_error, inplace_cause, inplace_reading, inplace_traces, version_counter_error,
)
from .evidence_layout import LAYOUT_PAIRS, layout_strides, layout_verdict  # noqa: F401
from .evidence_loops import (  # noqa: F401
    broadcast_error, elementwise_reference, expand_vs_repeat, extrapolate_elementwise, ops_per_element,
)
from .evidence_transfers import (  # noqa: F401
    EX1_PAIRS, seed_example1_model, seed_example1_model_table, seed_example1_verdict, sync_table, transfer_syncs,
)
from .exercise import check_exercise, exercise_starter  # noqa: F401
from .explore import CAT_LESSON, cat_explorer, transfer_explorer  # noqa: F401
from .variants import (  # noqa: F401
    broadcast_gather, broadcast_view, cat_in_a_loop, cat_once, hidden_syncs_example, hidden_syncs_fixed,
    kept_on_device_loop, normalise_in_place, posted_elementwise, posted_transfer_loop, preallocate_and_fill,
)
