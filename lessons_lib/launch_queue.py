"""One CPU thread issuing work into one GPU stream: the model behind "asynchronous".

PyTorch's CUDA ops return as soon as their kernel is queued. The CPU runs ahead, the GPU works
through the queue in order, and the CPU waits only when it must: at a synchronize (explicit,
or hidden in `.item()`, `.cpu()`, `print(t)`, `if t:`), or when the queue is full.

Two forms of the same rules:
  * `schedule(ops)`: pure arithmetic, no clock. Each op costs the CPU `cpu` seconds to issue and
    the GPU `gpu` seconds to run; the result gives every op's start and end on both rows and the
    GPU's idle gaps. Lessons draw timelines from it, and tests pin its numbers.
  * `SimulatedGPU`: the same rules in wall-clock time (it sleeps), so that a real timer can be
    pointed at it on a machine without a GPU (lesson 00's asynchronous mistakes, its exercise).

The sync detector (which ops make the host wait) lives in `syncs.py`.
"""
from __future__ import annotations

import collections
import sys
import time
from dataclasses import dataclass, field


# How many kernel launches may wait in a stream's queue before a launch blocks. NVIDIA does not
# document one number: it depends on the driver and on the kernels' arguments. Measurements
# reported in NVIDIA's developer forums and PyTorch issues put it around a thousand, so the model
# uses 1024 as an order of magnitude, not as a specification.
QUEUE_DEPTH = 1024


@dataclass(frozen=True)
class Op:
    """One launch: `cpu` seconds for the host to issue it, `gpu` seconds of device work.
    `sync=True`: the host waits for the stream to drain after issuing it (and pays `sync_cost`)."""

    name: str
    cpu: float
    gpu: float
    sync: bool = False


@dataclass(frozen=True)
class Slot:
    op: Op
    cpu_start: float
    cpu_end: float
    gpu_start: float
    gpu_end: float


@dataclass
class Timeline:
    slots: list[Slot]
    cpu_end: float  # when the host has issued everything (and waited, where it synchronized)
    gpu_end: float  # when the device finished the last op
    gaps: list[tuple[float, float]] = field(default_factory=list)  # the device idle, waiting for the host

    @property
    def total(self) -> float:
        return max(self.cpu_end, self.gpu_end)

    @property
    def gpu_busy(self) -> float:
        return sum(s.gpu_end - s.gpu_start for s in self.slots)

    @property
    def gpu_utilization(self) -> float:
        return self.gpu_busy / self.total if self.total else 0.0


def schedule(ops: list[Op], queue_depth: int = QUEUE_DEPTH, sync_cost: float = 0.0) -> Timeline:
    """Issue `ops` in order from one host thread into one stream; return who did what, when.

    Rules: the host issues one op after another, each taking `op.cpu`; an op's device work
    starts when it has been issued and the previous op has finished on the device; a launch
    finds the queue full when `queue_depth` ops are issued but unfinished, and then waits for
    the oldest; `sync=True` makes the host wait until the device is idle, plus `sync_cost`.
    """
    if queue_depth < 1:
        raise ValueError(f"queue_depth must be at least 1, got {queue_depth}.")
    cpu, gpu_free = 0.0, 0.0
    pending: collections.deque[float] = collections.deque()  # device end times of unfinished ops
    slots, gaps = [], []
    for op in ops:
        if op.cpu < 0 or op.gpu < 0:
            raise ValueError(f"{op.name}: times must not be negative.")
        while pending and pending[0] <= cpu:
            pending.popleft()
        if len(pending) >= queue_depth:  # the queue is full: the host waits for a slot
            cpu = pending.popleft()
        cpu_start, cpu = cpu, cpu + op.cpu
        gpu_start = max(cpu, gpu_free)
        if gpu_start > gpu_free and slots:
            gaps.append((gpu_free, gpu_start))
        gpu_free = gpu_start + op.gpu
        pending.append(gpu_free)
        slots.append(Slot(op, cpu_start, cpu, gpu_start, gpu_free))
        if op.sync:
            cpu = max(cpu, gpu_free) + sync_cost
            pending.clear()
    return Timeline(slots, cpu, gpu_free, gaps)


# --- the same rules in wall-clock time -------------------------------------------------------

_COARSE_SLEEP = sys.platform == "win32" and sys.version_info < (3, 11)  # ~15 ms timer ticks
_SLEEP_SLACK = 0.02 if _COARSE_SLEEP else 0.001


def wait_until(deadline: float) -> None:
    """Sleep, then spin, until perf_counter() reaches `deadline` (sleep alone overshoots)."""
    while (left := deadline - time.perf_counter()) > 0:
        if left > _SLEEP_SLACK:
            time.sleep(left - _SLEEP_SLACK)


class SimulatedGPU:
    """A pretend CUDA stream that keeps time by the rules of `schedule`. Nothing computes.

    `launch(seconds)` spends `launch_cost` of host time, queues `seconds` of device work and
    returns, like a kernel launch. `synchronize()` waits until the queue is empty, plus
    `sync_cost`, like `torch.cuda.synchronize()`. A launch blocks when `queue_depth` launches
    are unfinished. The defaults cost nothing extra; lesson 00 sets both costs to show what a
    sync inside a timed function really costs.
    """

    def __init__(self, queue_depth: int = QUEUE_DEPTH, launch_cost: float = 0.0, sync_cost: float = 0.0):
        if queue_depth < 1:
            raise ValueError(f"queue_depth must be at least 1 (a real GPU queues about {QUEUE_DEPTH} launches).")
        if launch_cost < 0 or sync_cost < 0:
            raise ValueError("launch_cost and sync_cost are seconds and cannot be negative.")
        self.queue_depth, self.launch_cost, self.sync_cost = queue_depth, launch_cost, sync_cost
        self._finish: collections.deque[float] = collections.deque()  # when each queued piece will be done

    def launch(self, seconds: float) -> None:
        if self.launch_cost:
            wait_until(time.perf_counter() + self.launch_cost)
        now = time.perf_counter()
        while self._finish and self._finish[0] <= now:
            self._finish.popleft()
        if len(self._finish) >= self.queue_depth:  # queue full: wait for a slot, as CUDA does
            wait_until(self._finish.popleft())
            now = time.perf_counter()
        start = max(now, self._finish[-1]) if self._finish else now
        self._finish.append(start + seconds)

    def synchronize(self) -> None:
        if self._finish:
            wait_until(self._finish[-1])
            self._finish.clear()
        if self.sync_cost:
            wait_until(time.perf_counter() + self.sync_cost)

    @property
    def pending(self) -> int:
        """Launches not finished yet."""
        now = time.perf_counter()
        return sum(1 for t in self._finish if t > now)


__all__ = ["Op", "Slot", "Timeline", "schedule", "SimulatedGPU", "wait_until", "QUEUE_DEPTH"]
