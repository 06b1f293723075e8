"""Lesson 07, the capstone: profile and fix a small model that has the pitfalls of lessons 01-06 in it.

A small transformer-style classifier trains for real on a synthetic task. The pitfalls are in it unnamed: per-head
broadcast matmuls (01), a loop of small expert Linears (03), hand-written norm and GELU chains (04), the attention
matrix kept for backward (02), and a training loop that stacks its batch sample by sample, makes and moves a mask
every step, syncs with the host, grows a cat and (on a CPU) loops the optimizer over parameters (06, 04). The
notebook hunts them with torch.profiler and the course's tools, fixes them one at a time (each checked against the
original in float64), measures a waterfall, and ships the fixed step as one CUDA graph.

Which file holds what:

- model.py     the pitfalls and their fixes as pairs of functions; Block(fixes), Model, copy_weights, the data,
               the optimizers, the original and fixed training loops; SHAPE (the default shape by device)
- evidence.py  the hunt, step 1: the profiler's tables (both columns) and Chrome trace, the memory snapshot (GPU),
               the summary for rooms without internet
- tools.py     the hunt, step 2: the course's tools (op trace, ledger, the sync detector's CUDA view, regimes), the
               chains counted, the broadcast's parts timed; the hunt's end: lessons_lib.diagnose on both loops
- fixes.py     the cumulative stages, the float64 check of each, the waterfall (steady-state time and peak memory)
- gpu.py       the fixed step as shipped (one CUDA graph), graph_check with two optimizers, and the roofline model
               of a step as CUDA runs it (T4, A100, H100)
- explore.py   LESSON (a variant per stage), explorer(), record and targets
- exercise.py  the starter (with qkv_starter, the fix the reader writes) and the checker: one verdict line per
               pitfall, read from lessons_lib.diagnose
- own_model.py the last exercise: diagnose on nn.MultiheadAttention (a model the course did not write), its checker

Below: the names the notebook and its solution use (the tests import the rest from the files above).
"""
from __future__ import annotations

from .evidence import (  # noqa: F401
    data, fit_threads, memory_snapshot, pair, profile_train, saved_largest, summary_table,
)
from .exercise import check_exercise, exercise_starter  # noqa: F401
from .explore import KEY, explorer, recorded_shapes  # noqa: F401
from .fixes import ODD, agreement_report, check_stages, waterfall  # noqa: F401
from .gpu import (  # noqa: F401
    gpu_model, gpu_model_figure, graph_reports, graph_words, graphed_agreement, shipped_comparison,
)
from .model import (  # noqa: F401
    Model, attention_kept, attention_sdpa, batches, experts_grouped, experts_loop, fixed_optimizer, fixed_train,
    gelu_chain, heads_out_broadcast, heads_out_one_gemm, norm_by_hand, optimizer, qkv_broadcast, qkv_one_gemm, shape,
    slow_train,
)
from .own_model import attention_inputs, check_attention_step, diagnosis_lines  # noqa: F401
from .tools import (  # noqa: F401
    broadcast_costs, broadcast_table, chain_counts, diagnosed, diagnosis_table, findings, findings_table, index_syncs,
    sync_story,
)
