"""The launch model: its arithmetic on hand-computed cases, the wall-clock pretend GPU, host syncs."""
import time

import pytest
import torch

from lessons_lib.launch_queue import Op, SimulatedGPU, schedule
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
    gpu = SimulatedGPU()
    t0 = time.perf_counter()
    for _ in range(3):
        gpu.launch(0.02)
    assert time.perf_counter() - t0 < 0.01
    gpu.synchronize()
    assert time.perf_counter() - t0 >= 0.06


def test_simulated_gpu_blocks_when_its_queue_is_full():
    gpu = SimulatedGPU(queue_depth=2)
    t0 = time.perf_counter()
    for _ in range(3):
        gpu.launch(0.02)
    assert time.perf_counter() - t0 >= 0.02  # the third launch waited for a free slot
    gpu.synchronize()


def test_simulated_gpu_charges_its_launch_cost():
    gpu = SimulatedGPU(launch_cost=0.01)
    t0 = time.perf_counter()
    gpu.launch(0.0)
    assert time.perf_counter() - t0 >= 0.01


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
