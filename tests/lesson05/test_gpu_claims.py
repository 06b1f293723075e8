"""Lesson 05 (CUDA graphs, seed 003): GPU claims (marked gpu, skipped without CUDA). Bars: predictions of the launch
model (evidence.gpu_model: this host's cost of a tiny CUDA op measured before the run, the launch_queue constants,
this GPU's datasheet) and of the bytes, each printed with the measurement and the model's error (tests/claims.py);
counts for correctness. The table of every claim: .ci/gpu-runs/CLAIMS.md."""
import math

import pytest

from lessons_lib.lesson05_cuda_graphs import evidence, exercise, explore, on_gpu
from lessons_lib.lesson05_cuda_graphs.lessons import MODEL_LAYERS

from .. import claims
from .helpers import _solution


# --- gpu claim tests: bars derived from the model ----------------------------------------------------------
def _graph_speedup(params):
    run = on_gpu.gpu_lesson("cuda").run(params, "cuda", variants=["eager", "CUDA graph"], min_run_time=0.5)
    return run.timings["eager"].median / run.timings["CUDA graph"].median


@pytest.mark.gpu
def test_gpu_graphs_at_least_2x_faster_in_the_overhead_bound_regime():
    predicted = evidence.gpu_model(explore.OVERHEAD_BOUND).speedup  # the host's per-op cost measured first
    measured = _graph_speedup(explore.OVERHEAD_BOUND)
    claims.report("lesson 05, eager over a CUDA graph in the overhead-bound regime", "prediction",
                  f"{measured:.2f}× against the launch model's {predicted:.2f}×: "
                  f"{claims.ratio_words(measured, predicted)}; bar >= {max(2.0, 0.6 * predicted):.2f}× "
                  "(H200 record: 8.6×)")
    # Bar: the 2×, which the model must itself support (predicted ≥ 2 with this host's measured
    # per-op cost), and the measurement may fall short of the model by at most 40% (the model leaves out
    # autograd's per-node cost, which makes eager slower, and the static-input copies, which make the
    # replay slower).
    assert predicted >= 2, f"model predicts only {predicted:.2f}× on this machine"
    assert measured >= max(2.0, 0.6 * predicted), f"measured {measured:.2f}×, model {predicted:.2f}×"


@pytest.mark.gpu
def test_gpu_graphs_change_a_kernel_bound_step_by_less_than_10_percent():
    # Kernel-bound (memory-bound elementwise kernels of up to 768 MiB, 5.5 GiB a step): the host is far ahead,
    # so the model puts a graph's gain within 2%. The replay is timed alone (inputs already in the static buffers),
    # in paired rounds; its ratio's inter-quartile range must lie within 10% of the model (clock and memory
    # bandwidth drift between rounds; the graph's own gaps between kernels, which the model takes from its presets).
    # Before: the timed graph also copied x and g (256 MiB each) in, and measured 0.88 on the H200. The second H200 run
    # (2026-11-26, passed): replay 1.006, with the copies 0.876 against the bytes' 0.846.
    model = evidence.gpu_model(explore.KERNEL_BOUND).speedup
    assert abs(model - 1) < 0.02
    parts = on_gpu.graph_parts(explore.KERNEL_BOUND, "cuda")
    claims.report("lesson 05, a graph's replay against eager at a kernel-bound shape", "prediction",
                  f"replay {parts.replay.median:.3f} (IQR {parts.replay.low:.3f}-{parts.replay.high:.3f}) against the "
                  f"launch model's {model:.3f}; with the copies {parts.with_copies.median:.3f} against the bytes' "
                  f"{parts.copies_model:.3f}: {claims.ratio_words(parts.with_copies.median, parts.copies_model)}; "
                  "bars: within 10% of each (H200: 1.006 and 0.876 against 0.846)")
    assert model / 1.1 <= parts.replay.low and parts.replay.high <= model * 1.1, str(parts)
    # The copies into the static inputs are memory-bound kernels too: eager ÷ (replay + copies) is the step's
    # bytes over the step's and the copies' (0.85), within 10%.
    assert parts.copies_model / 1.1 <= parts.with_copies.median <= parts.copies_model * 1.1, str(parts)


@pytest.mark.gpu
def test_gpu_make_graphed_callables_leaves_the_same_eager_work_for_both_kinds_at_width_512():
    # Linear ÷ PseudoLinear (PseudoLinear's speed-up): the thread 0.44 eager → 1.74 graphed; the H200 1.35 → 0.86 in the
    # first run, 1.26 → 1.02 in the second (2026-11-26, band 0.54-1.50 there: passed).
    # make_graphed_callables graphs the module's forward and backward; one gradient accumulation per parameter
    # and for x stays eager (Graphed.backward returns their gradients to AccumulateGrad nodes), with the engine,
    # for both kinds alike. So the graphed ratio lies between 1 (that remainder dominates) and the whole-step
    # model's ratio (the graphs' device time dominates), LEFTOVER_MARGIN either side: no rise is promised.
    r = on_gpu.graphed_callables_ratio(512, device="cuda")
    assert r["left_eager"] == {"Linear": 2 * MODEL_LAYERS + 1, "PseudoLinear": 2 * MODEL_LAYERS + 1}
    low, high, whole = on_gpu.graphed_band(r["params"], "cuda")
    graphed = r["ratio"]["graphed"]
    claims.report("lesson 05, Linear over PseudoLinear with make_graphed_callables at width 512", "prediction",
                  f"{graphed:.2f} in the band {low:.2f}-{high:.2f} (1 to the whole-step model's {whole:.2f}, with the "
                  "leftover margin; H200: 1.02 in 0.54-1.50)")
    assert low <= graphed <= high, f"{r['sentence']}; band {low:.2f}-{high:.2f} (whole-step model {whole:.2f})"
    assert math.isfinite(r["ratio"]["whole step captured"])


@pytest.mark.gpu
def test_gpu_replay_matches_eager_to_float32_tolerance():
    text = on_gpu.check_graphed(device="cuda")
    claims.report("lesson 05, replays against eager in float32", "count", text.replace("\n", "; "))
    assert "✗" not in text and text.count("✓") == 2


@pytest.mark.gpu
def test_gpu_exercise_solution_captures_and_replays():
    v = exercise.check_exercise(_solution)
    assert v.passed, str(v)
