"""Lesson 06 (data movement and tensor hygiene, forum seed 001) and the transfers toolkit module."""
import math

import pytest
import torch

from lessons_lib import lesson06_data_movement as L
from lessons_lib import transfers
from lessons_lib.syncs import syncs

SIMULATED = getattr(torch.cuda, "_course_simulated", None)
REAL_GPU = torch.cuda.is_available() and not SIMULATED


def _boom(*args, **kwargs):
    raise AssertionError("allocated inputs for a shape that should have been refused first")


# --- 1 · transfers and syncs -------------------------------------------------------------------------


def test_the_posted_transfer_loop_syncs_once_per_pass_and_the_kept_one_never():
    r = L.transfer_syncs("cpu", num_iterations=5)
    assert len(r["as posted"].syncs) == 5  # result.cpu() in every pass
    assert {s.where for s in r["as posted"].syncs} == {"result = result.cpu()"}
    assert len(r["kept on device"].syncs) == 0 and len(r["copy only"].syncs) == 0
    assert "as posted" in L.sync_table(r) and " 1 " in L.sync_table(r).splitlines()[2]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a GPU or the simulated one)")
def test_on_a_gpu_the_posted_loop_copies_and_syncs_twice_per_pass():
    r = L.transfer_syncs("cuda", num_iterations=3, size=(8, 4))
    posted = r["as posted"]
    assert [t.direction for t in posted.transfers] == ["host → device", "device → host"] * 3
    assert len(posted.syncs) == 6  # a blocking .to(device) and a .cpu() per pass
    assert posted.transfer_bytes == 3 * (8 * 4 * 4 + 4)
    assert len(r["copy only"].syncs) == 0 and len(r["copy only"].transfers) == 3  # non_blocking: queued
    assert len(r["kept on device"]) == 0


def test_hidden_syncs_are_found_one_per_line_and_the_fix_has_none(capsys):
    x = torch.rand(6, 4)
    found = syncs(L.hidden_syncs_example, x)
    assert [s.where.split(" ")[0] for s in found.syncs] == ['print(f"loss', "if", "big", "rows", "stats", "total"]
    assert len(syncs(L.hidden_syncs_fixed, x).syncs) == 0


def test_the_fixed_fragment_keeps_the_same_values():
    x = torch.rand(6, 4) * 2
    big, _rows, stats, total = L.hidden_syncs_example(x.clone())
    big2, keep, mean2, total2, _loss = L.hidden_syncs_fixed(x.clone())
    assert torch.allclose(big2[keep], big)
    assert torch.allclose(mean2, torch.tensor(stats)) and math.isclose(total2.item(), total, rel_tol=1e-6)


def test_seed_example1_model_is_labelled_and_copy_dominated():
    rows = L.seed_example1_model()
    assert [r["gpu"] for r in rows] == ["T4", "L4", "A100", "H100"]
    # the copy of 40 MB over PCIe dwarfs the sum over HBM/GDDR on every named GPU
    assert all(r["posted"] / r["kept"] > 20 for r in rows)
    assert "Not a measurement" in L.seed_example1_model_table(rows)


# --- transfers module ------------------------------------------------------------------------------------


def test_link_model_reads_the_datasheet_per_direction():
    assert transfers.model("Tesla T4").pcie_gbs == 16
    assert transfers.model("NVIDIA H100 PCIe").gpu == "H100 PCIe"  # the longer name wins
    assert transfers.model("NVIDIA H100 80GB HBM3").nvlink_gbs == 450
    assert transfers.model("Quadro unknown") is None
    link = transfers.model("A100")
    assert link.pinned_gbs > link.pageable_gbs
    # 1 GB at 0.8 × 32 GB/s = 39 ms plus the assumed 10 µs
    assert link.seconds(10**9) == pytest.approx(1 / 25.6 + 1e-5)
    assert "Not a measurement" in transfers.model_table(2**20)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only explanations")
def test_transfers_explain_themselves_on_a_cpu():
    assert "No CUDA GPU" in transfers.problem()
    assert "Pinned memory needs an accelerator" in transfers.pin_problem()
    assert "changes nothing on a CPU" in transfers.non_blocking_note("cpu")
    with pytest.raises(ValueError, match="No CUDA GPU"):
        transfers.measure(2**20)


@pytest.mark.parametrize("kw, message", [({"direction": "sideways"}, "direction"), ({"nbytes": 2}, "nbytes"),
                                         ({"nbytes": 1.5}, "nbytes")])
def test_transfer_measurement_refuses_bad_input(kw, message):
    with pytest.raises(ValueError, match=message):
        transfers.measure(**{"nbytes": 2**20, **kw})


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only refusal")
def test_the_transfer_explorer_refuses_on_a_cpu_before_allocating(monkeypatch):
    monkeypatch.setattr(L, "_transfer_inputs", _boom)
    ex = L.transfer_explorer("cpu")
    with pytest.raises(ValueError, match="No CUDA GPU"):
        ex.run(megabytes=1)


# --- 2 · loops vs vector ops ---------------------------------------------------------------------------


def test_the_seeds_efficient_example_2_does_not_broadcast():
    a, b = torch.rand(50, 20), torch.rand(10)
    assert "must match the size" in L.broadcast_error(a, b)


@pytest.mark.parametrize("rows, cols", [(3, 20), (1, 10), (7, 30)])
def test_the_vector_fixes_compute_the_per_element_loop(rows, cols):
    a, b = torch.rand(rows, cols), torch.rand(10)
    ref = L.elementwise_reference(a, b)
    loop = L.posted_elementwise(a, b, torch.empty_like(a), rows * cols)
    for out in (loop, L.broadcast_view(a, b), L.broadcast_gather(a, b)):
        assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-6


def test_the_gather_fix_handles_any_column_count():
    a, b = torch.rand(4, 13), torch.rand(10)
    assert torch.allclose(L.broadcast_gather(a, b).double(), L.elementwise_reference(a, b))


def test_one_element_of_the_loop_is_seven_ops():
    assert L.ops_per_element() == ["select", "select", "select", "add", "select", "select", "copy_"]


def test_the_extrapolation_runs_only_the_elements_it_times(one_thread):
    ex = L.extrapolate_elementwise("cpu", elements=20, min_run_time=0.01)
    assert ex.elements_timed == 20 and ex.total_elements == 5000 * 2000 * 100
    assert ex.total_seconds == pytest.approx(ex.seconds_per_element * 1e9)
    assert "extrapolated (not run)" in str(ex)


@pytest.mark.parametrize("elements", [0, 5000, 2.5, True])
def test_the_extrapolation_refuses_to_run_too_much(elements):
    with pytest.raises(ValueError, match="elements"):
        L.extrapolate_elementwise("cpu", elements=elements)


def test_repeat_copies_where_expand_views():
    table = L.expand_vs_repeat(rows=4096, cols=1024)
    lines = {ln.split("  ")[0]: ln for ln in table.splitlines()[2:]}
    assert "16.0 MiB" in lines["a + v.expand(rows, cols)"] and "repeat" not in lines["a + v.expand(rows, cols)"]
    assert "repeat, add" in lines["a + v.repeat(rows, 1)"] and "32.0 MiB" in lines["a + v.repeat(rows, 1)"]


# --- 3 · cat in a loop -------------------------------------------------------------------------------


def test_every_cat_strategy_matches_float64_at_default_and_odd_shapes():
    rows = L.CAT_LESSON.check_correct(seed=0)
    assert len(rows) == 4 * 3 and all(r.ok for r in rows)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 256])
def test_cat_in_a_loop_copies_the_predicted_quadratic_bytes(n):
    traces = L.CAT_LESSON.traces({"pieces": n, "rows": 3, "cols": 5})
    predicted = L.predicted_cat_bytes(n, 3 * 5 * 4)
    assert {k: t.copied_bytes for k, t in traces.items()} == predicted


def test_cat_bytes_grow_as_n_squared_and_collecting_grows_linearly():
    _table, m = L.cat_bytes_table(ns=(64, 128, 256))
    assert L.growth_exponent(m["n"], m["cat in a loop"]) == pytest.approx(2, abs=0.02)
    assert L.growth_exponent(m["n"], m["cat once"]) == pytest.approx(1)
    assert L.growth_exponent(m["n"], m["preallocate + fill"]) == pytest.approx(1)


def test_at_256_pieces_cat_once_moves_at_most_2_over_n_of_the_bytes():
    work = L.CAT_LESSON.work(L.CAT_LESSON.defaults("cpu"))
    n = 256
    assert work["cat once"].bytes <= 2 / n * work["cat in a loop"].bytes  # issue bar: <= 2/n
    assert (work["cat in a loop"].launches, work["preallocate + fill"].launches, work["cat once"].launches) == \
        (n + 1, n + 1, 1)


# The CPU speed bar (cat once >= 10x faster at 256 pieces) is a recorded target (L.targets, `record`), not a
# unit test: a unit test must not depend on how busy the machine is.


def test_cat_verdict_says_only_what_its_rounds_decide(one_thread, monkeypatch):
    from lessons_lib import noise

    monkeypatch.setattr(L.CAT_LESSON, "defaults", lambda dev: {"pieces": 8, "rows": 2, "cols": 4})
    cmp, said = L.cat_verdict("cpu", max_time=0.5)
    assert set(cmp.names) == {"cat in a loop", "preallocate + fill", "cat once"}
    decided = [cmp.ratio(num, "cat once").decided for num in ("cat in a loop", "preallocate + fill")]
    assert said.count("not decided on this run") == decided.count(False)
    assert len(cmp.rounds["cat once"]) >= noise.MIN_ROUNDS


def test_the_sweep_exponent_is_decided_only_when_the_iqrs_allow_one_value():
    tight = L.sweep_exponent([64, 256], [1.0, 16.0], [0.01, 0.16])
    assert tight.decided and abs(tight.median - 2.0) < 1e-9 and "2.00" in tight.say("{v:.2f}")
    loose = L.sweep_exponent([64, 256], [1.0, 16.0], [1.5, 20.0])
    assert not loose.decided and "not decided on this run" in loose.say("{v:.2f}")


def test_cat_explorer_refuses_bad_and_huge_shapes_before_allocating(monkeypatch):
    monkeypatch.setattr(L.CAT_LESSON, "make_inputs", _boom)
    ex = L.cat_explorer("cpu")
    with pytest.raises(ValueError, match="pieces"):
        ex.run(pieces=0)
    with pytest.raises(ValueError):
        ex.run(pieces=4096, rows=65536, cols=65536)  # does not fit


@pytest.mark.parametrize("dtype", ["int8", "float64", "bf16"])
def test_cat_explorer_refuses_dtypes_it_does_not_offer(dtype, monkeypatch):
    monkeypatch.setattr(L.CAT_LESSON, "make_inputs", _boom)
    with pytest.raises(ValueError, match="dtype|float32"):
        L.cat_explorer("cpu").run(dtype=dtype, pieces=4)


def test_cat_explorer_runs_a_small_shape(one_thread):
    run, fig = L.cat_explorer("cpu").run(pieces=8, rows=2, cols=4)
    assert set(run.timings) == {"cat in a loop", "preallocate + fill", "cat once"}
    import matplotlib.pyplot as plt

    plt.close(fig)


# --- 4 · in place -------------------------------------------------------------------------------------


def test_in_place_saves_the_allocation_not_the_bytes():
    lines = L.inplace_traces(1 << 20).splitlines()[2:]
    alloc = {ln.split("  ")[0]: ln for ln in lines}
    assert "4.0 MiB" in alloc["a + b"] and "0 B" in alloc["a.add_(b)"] and "0 B" in alloc["torch.add(a, b, out=buf)"]
    assert all("12.0 MiB" in ln for ln in lines)  # the same bytes read and written by all three


def test_autograd_refuses_in_place_on_a_saved_output():
    msg = L.version_counter_error()
    assert "0 -> 1" in msg and "modified by an inplace operation" in msg


def test_in_place_on_an_expanded_view_is_refused():
    assert "more than one element" in L.expanded_write_error()


def test_in_place_normalise_overwrites_the_callers_data():
    assert "overwritten: True" in L.aliasing_demo()


def test_inplace_timings_plumbing(one_thread):
    t = L.inplace_timings("cpu", n=1 << 12, min_run_time=0.01)
    assert list(t) == ["a + b (new output)", "torch.add(a, b, out=buf)", "a.add_(b) (in place)"]


# --- 5 · no_grad / inference_mode ---------------------------------------------------------------------


def test_inplace_cause_pairs_the_right_calls_and_reads_only_decided_ratios(one_thread):
    cmp, said = L.inplace_cause("cpu", n=1 << 12, max_time=0.5)
    assert cmp.names == ["a + b (new output)", "a.add_(b)", "torch.add(a, b, out=a)", "torch.add(a, b, out=buf)",
                         "buf.copy_(a)"]
    assert len(said.splitlines()) == 5 and "paired rounds" in said.splitlines()[0]
    reading = L.inplace_reading(cmp)
    decided = cmp.ratio("torch.add(a, b, out=buf)", "torch.add(a, b, out=a)").decided and \
        cmp.ratio("buf.copy_(a)", "a.add_(b)").decided
    assert ("not decided" in reading) == (not decided)


def test_the_in_place_claim_no_longer_says_not_bandwidth():
    rule = dict((c[0], c[2]) for c in L.CLAIMS)["In-place ops avoid copies"]
    assert "not bandwidth" not in rule and "same bytes" in rule


def test_no_grad_and_inference_mode_save_nothing_for_backward():
    b, w, d = 256, 512, 3
    saved = L.saved_bytes(b, w, d)
    assert saved["no_grad"] == 0 and saved["inference_mode"] == 0
    assert saved["with autograd"] == d * b * w * 4  # each ReLU's output (also the next Linear's input)


def test_the_three_grad_modes_compute_the_same_output():
    assert L.grad_modes_agree() < 1e-5


# --- 6 · layout ---------------------------------------------------------------------------------------


def test_channels_last_is_the_same_shape_with_other_strides_and_the_same_values():
    text = L.layout_strides()
    assert "strides (192, 1, 24, 3)" in text and "output strides (512, 1, 64, 8)" in text and "✓" in text


def test_a_convolution_output_is_channels_last_when_its_input_or_its_weight_is():
    # ATen: cudnn_conv_suggest_memory_format (ConvUtils.h) on CUDA; the CPU backends follow the same rule
    rows = {line[:24].strip(): line for line in L.layout_strides().splitlines()[:4]}
    assert rows["contiguous (NCHW)"].endswith("(NCHW)")
    for name in ("channels_last (NHWC)", "input NHWC, weight NCHW", "input NCHW, weight NHWC"):
        assert rows[name].endswith("(channels_last)"), rows[name]


def test_grad_mode_and_layout_verdicts_go_through_the_noise_rule(one_thread):
    cmp, said = L.grad_mode_verdict("cpu", batch=2, width=8, depth=1, max_time=0.5)
    r = cmp.ratio("with autograd", "inference_mode")
    assert ("not decided on this run" in said) == (not r.decided)
    cmp, said = L.layout_verdict("cpu", batch=1, size=8, max_time=0.5)
    r = cmp.ratio("contiguous NCHW", "channels_last")
    assert ("not decided on this run" in said) == (not r.decided)


def test_seed_example1_is_not_timed_on_a_cpu():
    cmp, said = L.seed_example1_verdict("cpu")
    assert cmp is None and "model" in said


def test_layout_timings_plumbing(one_thread):
    t = L.layout_timings("cpu", batch=1, size=8, min_run_time=0.01)
    assert list(t) == ["contiguous NCHW", "channels_last"]


def test_a_claim_another_lesson_tests_points_there():
    table = str(L.summary_table({}))
    assert "torch.matmul" in table and "lesson 01" in table


def test_summary_table_has_every_claim_and_its_evidence_and_renders_as_html():
    table = L.summary_table({L.CLAIMS[0][0]: "59x in the model"})
    assert all(c[0] in str(table) for c in L.CLAIMS) and "59x in the model" in str(table)
    html = table._repr_html_()
    assert html.startswith("<table>") and html.count("<tr>") == len(L.CLAIMS) + 1


# --- exercise -------------------------------------------------------------------------------------------


def _solution(*pieces):
    return torch.cat([p / p.abs().amax().clamp_min(1e-6) for p in pieces])


def _preallocate_solution(*pieces):
    out = pieces[0].new_empty(sum(p.shape[0] for p in pieces), pieces[0].shape[1])
    start = 0
    for p in pieces:
        out[start:start + p.shape[0]] = p / p.abs().amax().clamp_min(1e-6)
        start += p.shape[0]
    return out


def _sync_once(*pieces):  # one sync for the whole batch: allowed (it does not grow with n)
    scales = torch.stack([p.abs().amax() for p in pieces]).clamp_min(1e-6)
    if not bool(torch.isfinite(scales).all()):
        raise ValueError("a piece holds inf or NaN")
    return torch.cat([p / s for p, s in zip(pieces, scales)])


def test_checker_fails_the_starter_on_syncs_and_bytes_not_correctness():
    v = L.check_exercise(L.exercise_starter)
    assert [ok for _n, ok, _d in v.checks[:3]] == [True, False, False]
    assert "scale = p.abs().max().item()" in v.checks[1][2]
    assert not v.passed


@pytest.mark.parametrize("fn", [_solution, _preallocate_solution, _sync_once])
def test_checker_passes_correct_rewrites(fn):
    v = L.check_exercise(fn)
    assert v.passed, str(v)


@pytest.mark.parametrize("fn, failing", [
    (lambda *p: torch.cat(p), "matches the float64"),  # forgot the scaling
    (lambda *p: torch.cat(p)[:1], "runs and returns"),
    (lambda *p: 1 / 0, "runs and returns"),
    (lambda *p: torch.cat([q / 0 for q in p]), "matches the float64"),  # inf
    (lambda *p: [q.div_(q.abs().max()) for q in p][0], "runs and returns"),  # writes into its inputs
    ("not a function", "is a function"),
])
def test_checker_turns_wrong_code_into_a_failed_line(fn, failing):
    v = L.check_exercise(fn)
    assert not v.passed
    assert any(not ok and name.startswith(failing) for name, ok, _d in v.checks), str(v)


# --- recorded results ---------------------------------------------------------------------------------


def test_record_quick_on_cpu_and_its_targets(one_thread):
    if torch.cuda.is_available():
        pytest.skip("CPU recording")
    section = L.record("cpu", quick=True)
    assert set(section) >= {"headline", "sweeps", "inplace", "elementwise"}
    assert section["elementwise"]["kind"].startswith("extrapolated")
    names = [t["name"] for t in L.targets("cpu", section)]
    assert names == ["06 cat once / cat in a loop, bytes at n = 256 (trace)",
                     "06 cat once speed-up over cat in a loop at n = 256"]
    assert L.targets("cpu", section)[0]["ok"] is True


def test_the_module_defines_no_lesson_that_the_model_cannot_trace():
    from lessons_lib import record

    assert [lesson.key for lesson in record.lessons_of(L)] == ["06_data_movement"]


# --- GPU claims (bars derived from the model, margins beside them) ---------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not REAL_GPU, reason="needs a real CUDA GPU")
def test_gpu_pinned_copies_beat_pageable_by_1_5x():
    """Model (transfers.py): pinned = 0.8 × PCIe per direction; pageable adds a host staging copy at ~10 GB/s
    (assumed), so pinned/pageable = 1 + pinned/10: 2.3× on a T4 (12.8 GB/s), 6.1× on an H100 (51 GB/s). The bar
    1.5× leaves a margin of 1.5× below the T4 model for a host whose staging copy overlaps the DMA."""
    pinned = transfers.measure(256 * 2**20, "h2d", pinned=True)
    pageable = transfers.measure(256 * 2**20, "h2d", pinned=False)
    assert pinned.gbs >= 1.5 * pageable.gbs, (str(pinned), str(pageable))


@pytest.mark.gpu
@pytest.mark.skipif(not REAL_GPU, reason="needs a real CUDA GPU")
def test_gpu_seed_example1_kept_on_device_is_2x_faster():
    """Model (seed_example1_model): a pass of the posted loop copies 40 MB pageable (≥ 0.6 ms even at the
    H100's full PCIe Gen5 64 GB/s) plus a read-back sync; the kept loop only sums 40 MB (≤ 0.13 ms on a
    T4 at 320 GB/s). Modelled ratio 59× (T4) to 404× (H100); bar 2× is far inside the smallest."""
    t = L.seed_example1_timings("cuda", num_iterations=10)
    assert t["as posted"].median >= 2 * t["kept on device"].median


@pytest.mark.gpu
@pytest.mark.skipif(not REAL_GPU, reason="needs a real CUDA GPU")
def test_gpu_cat_once_is_faster_than_cat_in_a_loop_at_256_pieces():
    """Roofline: 256 pieces of 256 × 1024 float32 (1 MiB each). The loop writes 256·257/2 MiB ≈ 34 GB and reads
    as much: ≥ 20 ms on an H100 at 3.35 TB/s (≥ 215 ms on a T4); cat once reads and writes 512 MiB: ≈ 0.16 ms
    on an H100. Modelled ratio ~128× on every GPU (both memory-bound); bar 10× leaves a 12× margin."""
    run = L.CAT_LESSON.run(L.CAT_LESSON.defaults("cuda"), "cuda", variants=["cat in a loop", "cat once"])
    assert run.timings["cat in a loop"].median >= 10 * run.timings["cat once"].median


@pytest.mark.skipif(not SIMULATED, reason="the CUDA branches, under the simulated GPU")
def test_cuda_branches_run_under_the_simulated_gpu(one_thread, monkeypatch):
    from lessons_lib import roofline

    # measuring peaks on the simulated GPU would run an 8192² matmul on the CPU: use the T4's datasheet
    monkeypatch.setattr(roofline, "measure_peaks", lambda dev, dtype=torch.float32: roofline.datasheet("T4"))
    assert transfers.problem("cuda") is None
    b = transfers.measure(2**20, "h2d", pinned=False, device="cuda", min_run_time=0.01)
    assert b.nbytes == 2**20 and b.gbs > 0
    section = L.record("cuda", quick=True)
    assert "transfers" in section and "seed_example1" in section
    names = [t["name"] for t in L.targets("cuda", section)]
    assert "06 cat once / cat in a loop, bytes at n = 256 (trace)" in names
    assert "06 seed example 1: as posted / kept on device" in names
    run, fig = L.transfer_explorer("cuda").run(megabytes=1)
    expected = {"pageable"} if transfers.pin_problem() else {"pageable", "pinned", "pin, then copy"}
    assert set(run.timings) == expected  # the simulated GPU cannot pin: the pageable copy alone
    import matplotlib.pyplot as plt

    plt.close(fig)
    cmp, said = L.seed_example1_verdict("cuda", size=(16, 16), num_iterations=2, max_time=0.5)
    assert cmp.names == ["as posted", "kept on device"] and ("posted loop" in said or "not decided" in said)
    cmp, said = L.layout_verdict("cuda", batch=1, size=8, max_time=0.5)
    assert ("not decided" in said) == (not cmp.ratio("contiguous NCHW", "channels_last").decided)
