"""Lesson 02's variants side by side (evidence_variants.py): meta analysis at the full shape, checkpointing."""
import resource

from lessons_lib import memory
from lessons_lib import lesson02_autograd_memory as L

from .helpers import FIXES, SCALED, SEED


def test_meta_analysis_of_the_full_seed_shape_is_fast_and_allocates_nothing():
    L.memory_table(SCALED)  # torch's one-off meta set-up
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    x, W = L.thread_inputs(SEED)
    led = memory.ledger(L.broadcast_matmul, x, W)  # its time (bar 1 s) is a recorded target: L.targets
    assert led.total_bytes == 2**30
    peaks = L.predicted_peaks(SEED)
    L.memory_table(SEED)
    L.depth_table(SEED)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) * 1024 < 2**28  # 256 MiB
    assert peaks["broadcast matmul"].forward.predicted > 2**30
    assert all(peaks[f].forward.predicted < 64 * 2**20 for f in FIXES)
    assert all(p.forward.measured is None for p in peaks.values())  # nothing ran for real


def test_checkpointing_trades_what_is_held_for_a_recomputed_copy():
    x, W = L.thread_inputs(SEED, True, True)
    plain, ckpt = memory.peaks(L.stacked(L.broadcast_matmul, 4), x, W), memory.peaks(L.stacked(L.checkpointed, 4), x, W)
    copy = L.expanded_copy_bytes()
    assert plain.after_forward.predicted > 4 * copy  # four copies held until backward
    assert ckpt.after_forward.predicted < copy / 8  # only the layers' inputs
    assert 2 * copy <= ckpt.step.predicted < 3 * copy  # backward rebuilds one layer's copy and its gradient
    assert plain.step.predicted > 5 * copy

