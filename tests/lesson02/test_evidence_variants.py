"""Lesson 02's variants side by side (evidence_variants.py): meta analysis at the full shape, checkpointing."""
import resource

from lessons_lib import memory
from lessons_lib.lesson02_autograd_memory import evidence, evidence_variants, variants

from .helpers import FIXES, SCALED, SEED


def test_meta_analysis_of_the_full_seed_shape_is_fast_and_allocates_nothing():
    evidence_variants.memory_table(SCALED)  # torch's one-off meta set-up
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    x, W = evidence.thread_inputs(SEED)
    led = memory.ledger(variants.broadcast_matmul, x, W)  # its time (bar 1 s) is a recorded target: explore.targets
    assert led.total_bytes == 2**30
    peaks = evidence_variants.predicted_peaks(SEED)
    evidence_variants.memory_table(SEED)
    evidence_variants.depth_table(SEED)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) * 1024 < 2**28  # 256 MiB
    assert peaks["broadcast matmul"].forward.predicted > 2**30
    assert all(peaks[f].forward.predicted < 64 * 2**20 for f in FIXES)
    assert all(p.forward.measured is None for p in peaks.values())  # nothing ran for real


def test_checkpointing_trades_what_is_held_for_a_recomputed_copy():
    x, W = evidence.thread_inputs(SEED, True, True)
    plain = memory.peaks(evidence_variants.stacked(variants.broadcast_matmul, 4), x, W)
    ckpt = memory.peaks(evidence_variants.stacked(variants.checkpointed, 4), x, W)
    copy = evidence.expanded_copy_bytes()
    assert plain.after_forward.predicted > 4 * copy  # four copies held until backward
    assert ckpt.after_forward.predicted < copy / 8  # only the layers' inputs
    assert 2 * copy <= ckpt.step.predicted < 3 * copy  # backward rebuilds one layer's copy and its gradient
    assert plain.step.predicted > 5 * copy

