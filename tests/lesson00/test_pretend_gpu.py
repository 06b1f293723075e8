"""Lesson 00 on the pretend GPU: seed 000's three traps, exact on a manual clock."""
import pytest

from lessons_lib.launch_queue import SimulatedGPU
from lessons_lib.lesson00_timing import pretend_gpu, variants
from lessons_lib.lesson00_timing.pretend_gpu import (ORDER_CALLS, ORDER_KERNEL, ORDER_LAUNCHES, ORDER_QUEUE,
                                                  SIM_KERNEL, SIM_LAUNCH, SIM_SYNC)


# --- seed 000's sync inside one variant, on the pretend GPU ------------------------------------


def test_the_wrong_way_times_the_launches_of_the_variant_without_sync():
    # Trap 1 on a manual clock: exact, whatever the load. 20 calls without a sync cost the host
    # 20 launches; with a sync inside, 20 × (launch + kernel + sync).
    from lessons_lib.launch_queue import ManualClock

    clock = ManualClock()
    gpu = SimulatedGPU(launch_cost=SIM_LAUNCH, sync_cost=SIM_SYNC, clock=clock)
    syncs_inside, no_sync = variants.thread000_variants(gpu, SIM_KERNEL)
    for fn, per_call in ((no_sync, SIM_LAUNCH), (syncs_inside, SIM_LAUNCH + SIM_KERNEL + SIM_SYNC)):
        gpu.synchronize()
        t0 = clock.now()
        for _ in range(20):
            fn()
        assert clock.now() - t0 == pytest.approx(20 * per_call)


def test_the_wall_clock_demo_never_reports_less_than_the_rules_allow():
    # Lower bounds only (noise adds time, never removes it); the rankings are recorded targets.
    r = pretend_gpu.sim_estimates(max_time=2.0).timings
    assert r["no sync · wrong"].median >= SIM_LAUNCH
    assert r["syncs inside · wrong"].median >= SIM_LAUNCH + SIM_KERNEL + SIM_SYNC
    assert r["no sync · harness"].median >= 0.95 * SIM_KERNEL
    assert r["syncs inside · harness"].median >= SIM_LAUNCH + SIM_KERNEL + SIM_SYNC
    assert all(t.method.startswith("WRONG") == k.endswith("wrong") for k, t in r.items())


def test_trap_three_bills_the_queued_work_to_the_variant_timed_next():
    from lessons_lib.launch_queue import ManualClock

    true = ORDER_CALLS * ORDER_LAUNCHES * ORDER_KERNEL
    queued = ORDER_QUEUE * ORDER_KERNEL
    r = pretend_gpu.demo_order("no sync", clock=ManualClock())
    assert r.totals["no sync"] == pytest.approx(true - queued)
    assert r.totals["syncs inside"] == pytest.approx(true + queued)
    assert r.totals["syncs inside"] / r.totals["no sync"] == pytest.approx(pretend_gpu.order_model_ratio())
    fair = pretend_gpu.demo_order("no sync", final_sync=True, clock=ManualClock())  # the harness's sync: no billing
    assert fair.totals == pytest.approx({"no sync": true, "syncs inside": true})
    with pytest.raises(ValueError, match="first"):
        pretend_gpu.demo_order("loop")


def test_the_thread_s_two_totals_are_one_cost_and_a_queue_of_about_1024_launches():
    rows = pretend_gpu.thread000_queue()
    assert len(rows) == 2  # K. Frank's torch 1.10 run and his nightly run
    assert pretend_gpu.thread000_launches_per_call() == 4  # two copies, the bmm, the bias add
    for q in rows:
        for reported, predicted in zip(q.reported, q.predicted):
            assert predicted == pytest.approx(reported, rel=0.01), q.lines()
        assert 1000 <= q.queued_calls * q.launches_per_call <= 1050


def test_sim_verdicts_say_a_ratio_or_not_decided():
    from lessons_lib import noise

    decided = {"wrong": noise.Estimate([5.0, 5.1, 5.2]), "harness": noise.Ratio([1.3] * 9 + [1.31]),
               "order": noise.Estimate([2.0, 2.0, 2.1])}
    lines = pretend_gpu.sim_verdicts(decided)
    assert "5.1× faster" in lines[0] and "takes 1.3× the time" in lines[1] and "reports 2× the total" in lines[2]
    noisy = {k: noise.Estimate([1.0, 3.0, 9.0]) for k in ("wrong", "order")}
    noisy["harness"] = noise.Ratio([1.0, 3.0, 9.0])
    assert all("not decided on this run" in line for line in pretend_gpu.sim_verdicts(noisy))


def test_the_model_leaves_the_device_idle_only_with_a_sync_inside():
    lines = pretend_gpu.sync_timeline(calls=4)
    assert (len(lines["syncs inside"].gaps), len(lines["no sync"].gaps)) == (3, 0)


def test_the_traps_table_prints_the_ratios_its_sentences_quote():
    # One measurement for the table and the sentences (issue 33: a table's 5.3× beside a sentence's 4.0×).
    from lessons_lib import claim_table

    run = pretend_gpu.sim_estimates(max_time=2.0)
    shown = claim_table.read(run.table())
    for key, line in zip(("wrong", "harness"), pretend_gpu.sim_verdicts(run.ratios)):
        r = run.ratios[key]
        assert shown[(r.num, r.den)] == float(claim_table.ratio_text(r.median)[:-1])
        assert r.decided is False or claim_table.ratio_text(r.median) in line, line
