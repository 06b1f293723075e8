"""The library's CUDA branches, run under the SIMULATED GPU (tests/simgpu); skipped without it.

    python -m pytest -p tests.simgpu --simulate-gpu=t4 tests/test_simgpu.py -o addopts=""

Each test pins a bug that running the suite with a simulated GPU found (issue 8, section 2) or a
CUDA path that had never run before it. Nothing here measures a GPU: the assertions are about
control flow, memory accounting and which branch the library takes.
"""
import gc
import json
import time

import pytest
import torch

from lessons_lib import device, grading, results, roofline, timing, trace
from lessons_lib.lesson00_timing import exercise as lesson00_exercise
from lessons_lib.lesson import Lesson, Param, Variant
from lessons_lib.widgets import Explorer

SIM = getattr(torch.cuda, "_course_simulated", None)
pytestmark = pytest.mark.skipif(
    not SIM, reason="needs the simulated GPU: python -m pytest -p tests.simgpu --simulate-gpu=t4 tests/test_simgpu.py")
GIB = 2**30


def _allocated_now() -> int:
    """Allocated bytes once garbage from earlier tests is gone (a gc pass mid-test would free it)."""
    gc.collect()
    return torch.cuda.memory_allocated()


def _capacity() -> int:
    return torch.cuda.get_device_properties(0).total_memory


def test_the_device_says_it_is_a_simulation():
    info = device.describe("cuda")
    assert "(simulated)" in info.name
    assert torch.ones(2, device="cuda").device.type == "cuda"


# --- OOM: the failed step's tensors must really be freed ----------------------------------------

def _greedy_lesson() -> Lesson:
    """A lesson whose estimate says it fits, but whose variant holds 1 GiB and then asks for the card."""
    def greedy(a):
        held = torch.empty(GIB // 4, device=a.device)  # 1 GiB, alive in this frame when the OOM hits
        return held.sum() + torch.empty(_capacity() // 4, device=a.device).sum()

    return Lesson(key="greedy", title="greedy", params=[Param("n", "n", cpu=4, gpu=4, lo=1, hi=64)],
                  variants=[Variant("greedy", greedy)],
                  make_inputs=lambda p, d, dt: (torch.ones(p["n"], device=d, dtype=dt),),
                  peak_bytes=lambda p, dt: 1024, reduction=lambda p: 1, baseline="greedy")


def test_an_oom_inside_a_run_frees_the_failed_steps_memory():
    # Before the fix, the OOM's traceback kept the failed frame (and its 1 GiB) alive: "the memory
    # was freed" was printed with the memory still allocated.
    before = _allocated_now()
    with pytest.raises(device.DoesNotFit, match="freed"):
        _greedy_lesson().run({"n": 4}, "cuda", min_run_time=0.01)
    assert torch.cuda.memory_allocated() == before
    assert torch.cuda.memory_reserved() <= before + 2 * 2**20  # empty_cache handed the blocks back
    assert (torch.ones(3, device="cuda") * 2).sum().item() == 6  # and the device still works


def test_an_oom_in_the_explorer_is_one_sentence_and_frees_memory():
    before = _allocated_now()
    # a generous budget: the estimate (from peaks measured on the CPU beneath) is not under test here
    explorer = Explorer(_greedy_lesson(), device="cuda", min_run_time=0.01, run_budget=3600)
    with pytest.raises(ValueError, match="ran out of CUDA memory"):
        explorer.run(n=4)
    assert torch.cuda.memory_allocated() == before


def test_a_storage_sized_while_tracing_keeps_the_counters_plain_ints():
    # torch.compile(dynamic=True) makes storages with SymInt sizes; summed into the simulated allocator they
    # made every later OOM message fail to format (SymFloat.__format__) in CI's sequential simulated-T4 leg
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from .simgpu.tensors import ALLOCATOR

    env = ShapeEnv()
    size = env.create_symintnode(env.create_symbol(4096, ConstantSource("n")), hint=4096)
    before = ALLOCATOR.allocated
    ALLOCATOR.adopt(-12345, size)
    try:
        assert type(ALLOCATOR.allocated) is int and ALLOCATOR.allocated > before
        with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
            ALLOCATOR.need(2 * ALLOCATOR.capacity)
    finally:
        ALLOCATOR.release(-12345)
    assert ALLOCATOR.allocated == before


def test_a_shape_too_big_for_the_card_is_refused_before_allocating():
    lesson = _greedy_lesson()
    lesson.peak_bytes = lambda p, dt: 2 * _capacity()
    allocated = torch.cuda.max_memory_allocated()
    with pytest.raises(device.DoesNotFit, match="safely available"):
        lesson.run({"n": 4}, "cuda")
    assert torch.cuda.max_memory_allocated() == allocated


# --- dtypes and TF32 per compute capability ----------------------------------------------------

def test_bf16_follows_the_hardware_not_the_emulation():
    problem = device.dtype_problem(torch.bfloat16, "cuda")
    if SIM == "t4":  # is_bf16_supported() says True on a T4 (emulation); the course must refuse
        assert "no bfloat16 hardware" in problem
    else:
        assert problem is None


def test_the_datasheet_lists_no_bf16_figure_for_a_t4():
    if SIM == "t4":
        assert roofline.datasheet(device.describe("cuda").name, torch.bfloat16) is None
    assert roofline.datasheet("H100", torch.bfloat16).flops > roofline.datasheet("H100", torch.float32).flops


def test_tf32_is_reported_per_capability_and_keys_the_cached_peaks():
    note = device.tf32_note("cuda")
    before = torch.get_float32_matmul_precision()
    try:
        if SIM == "t4":
            assert "no TF32" in note
        else:
            torch.set_float32_matmul_precision("highest")
            assert "TF32 is off" in device.tf32_note("cuda")
            off = roofline.datasheet("H100", torch.float32, tf32=False)
            torch.set_float32_matmul_precision("high")
            assert "TF32 is ON" in device.tf32_note("cuda")
            assert roofline.datasheet("H100", torch.float32, tf32=True).flops > off.flops
    finally:
        torch.set_float32_matmul_precision(before)


# --- timing on the CUDA path ------------------------------------------------------------------

def test_measure_on_cuda_times_with_events_and_stays_bounded():
    a = torch.ones(64, 64, device="cuda")
    t = timing.measure(torch.mm, a, a, min_run_time=0.05)
    assert t.device == "cuda" and t.median > 0


def test_a_flushed_measurement_of_a_tiny_op_is_capped_on_cuda():
    # Before the cap: tens of thousands of L2-sized flushes for a 1-element op.
    start = time.perf_counter()
    t = timing.measure(torch.neg, torch.ones(1, device="cuda"), flush_cache=True, min_run_time=10.0)
    assert len(t.samples) <= timing.MAX_FLUSHED_CALLS
    assert t.method.startswith("CUDA events")
    assert time.perf_counter() - start < 60


def test_the_exercise_00_checker_cannot_hang_on_a_gpu(monkeypatch):
    # Before the fix the [GPU] line called the reader's benchmark on a real matmul with no limit.
    monkeypatch.setattr(lesson00_exercise, "WORKLOAD_TIME_LIMIT", 0.5)

    def forever(fn, sync):
        while True:
            pass

    start = time.perf_counter()
    v = lesson00_exercise.check_exercise(forever)
    assert v.checks[-1][0].startswith(grading.GPU_TAG) and v.checks[-1][1] is False
    assert time.perf_counter() - start < 30


# --- the profiler and recorded results on "cuda" ----------------------------------------------

def test_kernels_on_cuda_without_a_cuda_profiler_is_none_not_an_error():
    # Before the fix: AssertionError "Legacy CUDA profiling requires use_cpu=True" from the profiler
    # of a build that cannot see CUDA.
    a = torch.ones(8, 8, device="cuda")
    assert not trace.profiler_sees_cuda()  # the simulation runs on a CPU-only build
    assert trace.kernels(torch.mm, a, a) is None


def test_record_on_the_simulated_gpu_names_it_a_simulation(tmp_path):
    from lessons_lib.lesson01_broadcast_matmul import explore as L1  # LESSON and record

    info = device.describe("cuda")
    path = results.save(info, {L1.LESSON.key: L1.record(torch.device("cuda"), quick=True)}, tmp_path)
    data = json.loads(path.read_text())
    assert "(simulated)" in data["meta"]["name"] and "simulated" in path.name
    assert data["lessons"][L1.LESSON.key]
