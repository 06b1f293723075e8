"""The launch model: its arithmetic on hand-computed cases, the wall-clock pretend GPU, host syncs."""
import time

import pytest
import torch

from lessons_lib import launch_queue
from lessons_lib.launch_queue import ManualClock, Op, SimulatedGPU, schedule
from lessons_lib.syncs import host_syncs


def test_the_host_runs_ahead_and_the_device_works_through_the_queue():
    # cpu 1 s, gpu 2 s each: launches at 1, 2, 3; device busy 1-3, 3-5, 5-7
    t = schedule([Op("a", 1, 2), Op("b", 1, 2), Op("c", 1, 2)])
    assert [(s.gpu_start, s.gpu_end) for s in t.slots] == [(1, 3), (3, 5), (5, 7)]


def test_a_host_bound_stream_leaves_gaps_on_the_device():
    # cpu 2 s, gpu 1 s each: device busy 2-3 and 4-5, idle 3-4
    t = schedule([Op("a", 2, 1), Op("b", 2, 1)])
    assert t.gaps == [(3, 4)]


def test_a_sync_makes_the_host_wait_and_pay_its_cost():
    t = schedule([Op("a", 1, 2, sync=True), Op("b", 1, 1)], sync_cost=0.5)
    assert (t.slots[1].cpu_start, t.total) == (3.5, 5.5)


def test_a_full_queue_blocks_the_launch():
    # depth 1: the second launch waits for the first op to finish at 0.1 + 5
    t = schedule([Op("a", 0.1, 5), Op("b", 0.1, 5)], queue_depth=1)
    assert t.slots[1].cpu_start == pytest.approx(5.1)


def test_utilization_is_busy_time_over_total():
    t = schedule([Op("a", 2, 1), Op("b", 2, 1)])
    assert t.gpu_utilization == pytest.approx(2 / 5)


def test_bad_times_are_refused():
    with pytest.raises(ValueError):
        schedule([Op("a", -1, 1)])


def test_simulated_gpu_launch_returns_at_once_and_synchronize_waits():
    # On a manual clock time passes only when the pretend GPU makes the host wait: exact numbers,
    # however busy the machine is.
    clock = ManualClock()
    gpu = SimulatedGPU(clock=clock)
    for _ in range(3):
        gpu.launch(0.02)
    assert clock.now() == 0.0  # the launches only queued work
    assert gpu.pending == 3
    gpu.synchronize()
    assert clock.now() == pytest.approx(0.06)
    assert gpu.pending == 0


def test_simulated_gpu_blocks_when_its_queue_is_full():
    clock = ManualClock()
    gpu = SimulatedGPU(queue_depth=2, clock=clock)
    for _ in range(3):
        gpu.launch(0.02)
    assert clock.now() == pytest.approx(0.02)  # the third launch waited for the first to finish
    gpu.synchronize()
    assert clock.now() == pytest.approx(0.06)


def test_simulated_gpu_charges_its_launch_and_sync_costs():
    clock = ManualClock()
    gpu = SimulatedGPU(launch_cost=0.01, sync_cost=0.001, clock=clock)
    gpu.launch(0.0)
    assert clock.now() == pytest.approx(0.01)
    gpu.synchronize()
    assert clock.now() == pytest.approx(0.011)


def test_simulated_gpu_follows_the_model_on_a_manual_clock():
    ops = [Op("a", 0.001, 0.004), Op("b", 0.001, 0.004), Op("c", 0.001, 0.004, sync=True)]
    clock = ManualClock()
    gpu = SimulatedGPU(queue_depth=2, launch_cost=0.001, clock=clock)
    for op in ops:
        gpu.launch(op.gpu)
        if op.sync:
            gpu.synchronize()
    assert clock.now() == pytest.approx(schedule(ops, queue_depth=2, sync_cost=0.0).cpu_end)  # its sync_cost: 0


def test_simulated_gpu_on_the_wall_clock_waits_at_least_its_queued_work():
    # Only lower bounds on the wall clock: a busy machine can make waits longer, never shorter.
    gpu = SimulatedGPU(launch_cost=0.002)
    t0 = time.perf_counter()
    for _ in range(3):
        gpu.launch(0.01)
    assert time.perf_counter() - t0 >= 0.006
    gpu.synchronize()
    assert time.perf_counter() - t0 >= 0.032


def test_simulated_gpu_refuses_a_zero_queue():
    with pytest.raises(ValueError, match="queue_depth"):
        SimulatedGPU(queue_depth=0)


def test_host_syncs_finds_item_cpu_and_data_dependent_shapes():
    def fn(x):
        a = x.sum().item()
        b = x.cpu()
        c = torch.nonzero(x)
        return a, b, c

    whats = [s.what for s in host_syncs(fn, torch.ones(3))]
    assert whats == ["Tensor.item()", "Tensor.cpu()", "aten.nonzero"]


def test_host_syncs_finds_nothing_in_pure_device_code():
    assert host_syncs(lambda x: (x * 2 + 1).relu(), torch.ones(3)) == []


def test_host_syncs_restores_the_tensor_methods():
    before = torch.Tensor.item
    host_syncs(lambda x: x.sum().item(), torch.ones(2))
    assert torch.Tensor.item is before


# --- graph replay as one launch: hand-computed cases --------------------------------------------------
from lessons_lib.launch_queue import Preset, eager_ops, graph_ops, per_step, preset  # noqa: E402

# 1 µs launch, 1 µs shortest kernel, 1 µs gap between eager kernels, none in a graph, 2 µs graph launch
TOY = Preset("toy", flops=1e12, bandwidth=1e9, source="test", kernel_launch=1e-6, kernel_min=1e-6,
             stream_gap=1e-6, graph_gap=0.0, graph_launch=2e-6)
TWO = [("a", 1e-6), ("b", 1e-6)]


def test_eager_kernels_pay_dispatch_and_launch_on_the_host_and_a_gap_on_the_device():
    # host: 3 + 1 = 4 µs per op (0-4, 4-8); device: 1 + 1 µs (4-6, 8-10), idle 6-8
    t = schedule(eager_ops(TWO, 3e-6, TOY))
    assert [x for s in t.slots for x in (s.gpu_start, s.gpu_end)] == pytest.approx([4e-6, 6e-6, 8e-6, 10e-6])
    assert [x for g in t.gaps for x in g] == pytest.approx([6e-6, 8e-6])
    assert t.total == pytest.approx(10e-6)


def test_a_graph_is_one_host_launch_then_the_kernels_back_to_back():
    # host: 2 µs launch; device: a 2-3, b 3-4 µs
    t = schedule(graph_ops(TWO, TOY))
    assert t.cpu_end == pytest.approx(2e-6)
    assert [x for s in t.slots[1:] for x in (s.gpu_start, s.gpu_end)] == pytest.approx([2e-6, 3e-6, 3e-6, 4e-6])
    assert t.gaps == []


def test_steady_state_per_step_of_a_loop():
    # eager, 2 steps: host issues 4 ops by 16 µs, the last ends on the device at 18 µs: 9 µs a step.
    # graph, 2 steps: launches 0-2, 2-4; kernels 2-4 and 4-6: 3 µs a step.
    assert per_step(eager_ops(TWO, 3e-6, TOY), steps=2) == pytest.approx(9e-6)
    assert per_step(graph_ops(TWO, TOY), steps=2) == pytest.approx(3e-6)


def test_long_kernels_make_the_graph_pointless():
    # 1 ms kernels: the host is far ahead either way; 2 steps: eager ends at 4 µs + 4 × 1.001 ms
    long = [("a", 1e-3), ("b", 1e-3)]
    eager, graph = per_step(eager_ops(long, 3e-6, TOY), steps=2), per_step(graph_ops(long, TOY), steps=2)
    assert eager == pytest.approx((4e-6 + 4 * 1.001e-3) / 2)
    assert eager / graph == pytest.approx(1.0, abs=0.01)


def test_kernel_seconds_is_the_roofline_time_with_a_floor():
    assert TOY.kernel_seconds(4e6, 0) == pytest.approx(4e-6)  # 4 MFLOP at 1 TFLOP/s
    assert TOY.kernel_seconds(0, 5e3) == pytest.approx(5e-6)  # 5 kB at 1 GB/s
    assert TOY.kernel_seconds(0, 10) == pytest.approx(1e-6)  # never below the shortest kernel


def test_presets_come_from_the_datasheet():
    t4 = preset("T4")
    assert (t4.flops, t4.bandwidth) == (8.1e12, 320e9)
    assert "T4" in t4.source


def test_an_unknown_preset_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="T4"):
        preset("GTX 480")


def test_per_step_refuses_zero_steps():
    with pytest.raises(ValueError, match="steps"):
        per_step(eager_ops(TWO, 1e-6, TOY), steps=0)


def test_a_sync_costs_its_round_trip_by_default():
    # A GPU's host sync is not free (SYNC_COST, reported on the H200): the default prices it, 0 turns it off.
    ops = [Op("a", 1e-6, 1e-6, sync=True)]
    assert schedule(ops).cpu_end == pytest.approx(2e-6 + launch_queue.SYNC_COST)
    assert schedule(ops, sync_cost=0.0).cpu_end == pytest.approx(2e-6)
