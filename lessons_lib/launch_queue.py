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
# document one number: it depends on the driver and on the kernels' arguments, so 1024 here is an
# ASSUMPTION, an order of magnitude. Its source is a user's measurement, not a specification: "CUDA
# stream are blocked when launching lots of kernels (>1000)" (NVIDIA developer forums, topic 68937;
# the same question on Stack Overflow, 53970187) found launches returning in 4-5 µs until about 1000
# were queued in one stream, then each waiting for a kernel to finish. Seed 000's own figures fit it:
# lesson 00's `thread000_queue` recovers about 1020 launches left queued from K. Frank's two totals.
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


def schedule(ops: list[Op], queue_depth: int = QUEUE_DEPTH, sync_cost: float | None = None) -> Timeline:
    """Issue `ops` in order from one host thread into one stream; return who did what, when.

    Rules: the host issues one op after another, each taking `op.cpu`; an op's device work
    starts when it has been issued and the previous op has finished on the device; a launch
    finds the queue full when `queue_depth` ops are issued but unfinished, and then waits for
    the oldest; `sync=True` makes the host wait until the device is idle, plus `sync_cost` (SYNC_COST: a GPU's
    round trip, when None; 0 for a pretend GPU whose rules are being shown alone).
    """
    sync_cost = SYNC_COST if sync_cost is None else sync_cost
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


def per_step(ops: list[Op], steps: int = 8, queue_depth: int = QUEUE_DEPTH) -> float:
    """Steady-state seconds per step when the same `ops` are issued `steps` times in a row with no
    sync between steps (a training loop): the host runs ahead, so the slower row sets the pace."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}.")
    return schedule(list(ops) * steps, queue_depth).total / steps


# --- kernels on a named GPU: launched one by one, or replayed as one graph ----------------------
# A CUDA graph changes the host's side: one launch for the whole graph instead of one dispatch
# and one launch per kernel. The device still runs every kernel, with slightly shorter gaps.
#
# Launch costs are not in any datasheet. Where a GPU run measured one, the figure is the H200's (NVIDIA H200,
# torch 2.11, 16-core host, 2026-11-26: .ci/gpu-runs/h200-2026-11-26-b/ and lessons_lib/reference/h200.json), used
# for every preset: a measurement on one machine, an assumption on the others. The rest are ASSUMPTIONS.
#   KERNEL_LAUNCH (measured, derived): host time of a CUDA op beyond the dispatch a CPU op pays: the H200 host's
#       one-element add on the GPU, 7.3 µs (roofline.ASSUMED_LAUNCH), less the same add on its CPU, 1.18 µs
#       (h200.json 05_cuda_graphs "dispatch_s"): device guard, caching allocator, cudaLaunchKernel.
#   KERNEL_MIN (measured): the shortest a kernel runs on the device. torch.profiler's trace of lesson 07's loops
#       on the H200 shows its shortest kernels at 0.71-0.81 µs (call1-probes.log, lines 79-80: an elementwise
#       kernel, a memset, a scal). The course assumed 2 µs before.
#   STREAM_GAP, GRAPH_GAP (assumed): the device's idle time between two kernels issued one by one into a stream,
#       and between two kernels of a graph (NVIDIA's blog "Getting Started with CUDA Graphs", 2019: about 1 µs and
#       under 0.5 µs). On the H200 replays of 38 and 78 kernels took 82 and 152 µs (h200.json 05_cuda_graphs), about
#       2 µs a kernel: this model's 1.25 µs a kernel is a floor 40% under them (its error, stated, not fitted away).
#   GRAPH_LAUNCH (assumed): host time of one replay: Python, CUDAGraph.replay and cudaGraphLaunch (CUDA 12
#       launches a straight-line graph in constant time, NVIDIA's CUDA 12.0 notes).
#   SYNC_COST (reported): what a host sync costs beyond draining the queue: the host's wait for the device's
#       signal and its wake-up. Issue 33's review of the H200 run gives 10-30 µs a round trip; no committed log
#       holds it (.ci/gpu-probes/launch_constants.py measures it). The course priced a sync at nothing before.
# Known to be wrong: kernels that do not fill the GPU (the roofline assumes every kernel reaches
# the datasheet peak), clock boost and throttling, the caching allocator's host time (graphs skip
# it: a replay allocates nothing), autograd's per-node host time beyond one dispatch (a tiny forward and backward,
# nn.Linear(1, 1), took 227 µs for 17 aten ops on the H200: 13 µs an op), and the copies into a graph's inputs.
KERNEL_LAUNCH = 6.1e-6
KERNEL_MIN = 0.75e-6
STREAM_GAP = 1.0e-6
GRAPH_GAP = 0.5e-6
GRAPH_LAUNCH = 10e-6
SYNC_COST = 20e-6
PRESETS = ("T4", "A100", "H100")  # the GPUs the course names: Colab's T4 and two datacenter parts


@dataclass(frozen=True)
class Preset:
    """A named GPU for the launch model: datasheet peaks (roofline.datasheet) and assumed launch costs."""

    name: str
    flops: float  # FLOP/s
    bandwidth: float  # bytes/s
    source: str
    kernel_launch: float = KERNEL_LAUNCH
    kernel_min: float = KERNEL_MIN
    stream_gap: float = STREAM_GAP
    graph_gap: float = GRAPH_GAP
    graph_launch: float = GRAPH_LAUNCH

    def kernel_seconds(self, flops: float, nbytes: float) -> float:
        """Device time of one kernel: its roofline time, but never below KERNEL_MIN."""
        return max(flops / self.flops, nbytes / self.bandwidth, self.kernel_min)


def preset(name: str, dtype=None) -> Preset:
    """A named GPU's preset from its datasheet (float32 without TF32, PyTorch's default)."""
    import torch

    from . import roofline

    peaks = roofline.datasheet(name, dtype or torch.float32, tf32=False)
    if peaks is None:
        raise ValueError(f"No datasheet figures for {name!r} in this dtype: use one of {', '.join(PRESETS)} "
                         f"(or {', '.join(roofline.DATASHEET)}).")
    return Preset(name, peaks.flops, peaks.bandwidth, peaks.source.split(";")[0])


def eager_ops(kernels: list[tuple[str, float]], dispatch: float, p: Preset) -> list[Op]:
    """Each kernel (name, device seconds) issued by eager PyTorch: the host pays its dispatch and a
    launch per kernel; the device runs it and then idles for the stream's gap."""
    return [Op(name, dispatch + p.kernel_launch, seconds + p.stream_gap) for name, seconds in kernels]


def graph_ops(kernels: list[tuple[str, float]], p: Preset, name: str = "graph launch") -> list[Op]:
    """The same kernels replayed as one graph: one host launch; the device runs them back to back."""
    return [Op(name, p.graph_launch, 0.0)] + [Op(k, 0.0, seconds + p.graph_gap) for k, seconds in kernels]


# --- the same rules in wall-clock time -------------------------------------------------------

_COARSE_SLEEP = sys.platform == "win32" and sys.version_info < (3, 11)  # ~15 ms timer ticks
_SLEEP_SLACK = 0.02 if _COARSE_SLEEP else 0.001


def wait_until(deadline: float) -> None:
    """Sleep, then spin, until perf_counter() reaches `deadline` (sleep alone overshoots)."""
    while (left := deadline - time.perf_counter()) > 0:
        if left > _SLEEP_SLACK:
            time.sleep(left - _SLEEP_SLACK)


class WallClock:
    """Real time: `now()` is perf_counter, `wait_until` sleeps and spins."""

    now = staticmethod(time.perf_counter)
    wait_until = staticmethod(wait_until)


class ManualClock:
    """Time that passes only when someone waits: a SimulatedGPU on it keeps the same rules with
    exact numbers, whatever the machine is doing (unit tests use it; lessons use the wall clock)."""

    def __init__(self, start: float = 0.0):
        self.t = float(start)

    def now(self) -> float:
        return self.t

    def wait_until(self, deadline: float) -> None:
        self.t = max(self.t, deadline)


class SimulatedGPU:
    """A pretend CUDA stream that keeps time by the rules of `schedule`. Nothing computes.

    `launch(seconds)` spends `launch_cost` of host time, queues `seconds` of device work and
    returns, like a kernel launch. `synchronize()` waits until the queue is empty, plus
    `sync_cost`, like `torch.cuda.synchronize()`. A launch blocks when `queue_depth` launches
    are unfinished. The defaults cost nothing extra; lesson 00 sets both costs to show what a
    sync inside a timed function really costs. `clock`: the wall clock by default (so a real timer
    can time it), or a `ManualClock` for exact, load-independent numbers.
    """

    def __init__(self, queue_depth: int = QUEUE_DEPTH, launch_cost: float = 0.0, sync_cost: float = 0.0,
                 clock=None):
        if queue_depth < 1:
            raise ValueError(f"queue_depth must be at least 1 (a real GPU queues about {QUEUE_DEPTH} launches).")
        if launch_cost < 0 or sync_cost < 0:
            raise ValueError("launch_cost and sync_cost are seconds and cannot be negative.")
        self.queue_depth, self.launch_cost, self.sync_cost = queue_depth, launch_cost, sync_cost
        self.clock = clock or WallClock()
        self._finish: collections.deque[float] = collections.deque()  # when each queued piece will be done

    def launch(self, seconds: float) -> None:
        clock = self.clock
        if self.launch_cost:
            clock.wait_until(clock.now() + self.launch_cost)
        now = clock.now()
        while self._finish and self._finish[0] <= now:
            self._finish.popleft()
        if len(self._finish) >= self.queue_depth:  # queue full: wait for a slot, as CUDA does
            clock.wait_until(self._finish.popleft())
            now = clock.now()
        start = max(now, self._finish[-1]) if self._finish else now
        self._finish.append(start + seconds)

    def synchronize(self) -> None:
        if self._finish:
            self.clock.wait_until(self._finish[-1])
            self._finish.clear()
        if self.sync_cost:
            self.clock.wait_until(self.clock.now() + self.sync_cost)

    @property
    def drained_at(self) -> float | None:
        """When the queued work will be done (on `clock`), or None when nothing is queued."""
        return self._finish[-1] if self._finish else None

    @property
    def pending(self) -> int:
        """Launches not finished yet."""
        now = self.clock.now()
        return sum(1 for t in self._finish if t > now)


__all__ = ["Op", "Slot", "Timeline", "schedule", "per_step", "SimulatedGPU", "ManualClock", "WallClock", "wait_until", "QUEUE_DEPTH", "Preset",
           "preset", "PRESETS", "eager_ops", "graph_ops", "KERNEL_LAUNCH", "KERNEL_MIN", "STREAM_GAP", "GRAPH_GAP",
           "GRAPH_LAUNCH", "SYNC_COST"]
