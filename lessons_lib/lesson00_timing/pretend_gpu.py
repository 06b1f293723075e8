"""Lesson 00 on the pretend GPU: seed 000's three traps, on `launch_queue.SimulatedGPU` and in the model.

`launch_queue.SimulatedGPU` stands in for a CUDA stream on machines without one, so that the
asynchronous mistakes can be shown on a CPU: a sync in one variant (traps 1 and 2), the queued work
billed to the variant timed next (trap 3), and K. Frank's two reported totals explained by the queue.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from .. import claim_table, noise, results, timing
from ..launch_queue import QUEUE_DEPTH, Op, SimulatedGPU, WallClock, schedule
from ..timing import Timing, fmt_time
from .variants import thread000_variants


# --- seed 000: a sync in one variant, and work billed to the next one timed --------------
#
# Three traps, all in the thread's script. (1) Timed without a sync of its own, a variant that does
# not synchronize reports its launches, not its kernels. (2) A synchronize inside the timed function
# costs the host one launch and one sync a call that it can no longer hide behind device work: real
# launches and syncs cost microseconds, so with millisecond kernels this is well under 1%. (3) The
# unsynchronized variant's clock stops with up to a queue's worth of work unfinished, and that work
# is paid by whatever is timed next: in K. Frank's script, run_batched (no sync, timed first) and
# run_batched2 (sync inside, timed next) run the same op, yet report 6.83 s and 11.51 s.


# The pretend GPU's costs in traps 1 and 2: 2 ms of device work a call, 0.5 ms for the host to issue
# it and 0.1 ms for a synchronize. Real launches and syncs cost microseconds; these are scaled up
# several hundred times so that a wall clock on a busy machine resolves them, which makes trap 2
# look far bigger here than it is with real millisecond kernels.
SIM_KERNEL, SIM_LAUNCH, SIM_SYNC = 0.002, 0.0005, 0.0001
_HARNESS_CALLS = 10  # calls per harness sample on the pretend GPU, then one synchronize
HOST = torch.device("cpu")  # where the pretend GPU runs, on every machine: its closures are timed on the host


def _harness_block(fn, gpu, calls: int = _HARNESS_CALLS):
    """The harness on a pretend GPU: a block of calls that ends with the pretend GPU's synchronize, as
    torch.utils.benchmark ends each block with torch.cuda.synchronize()."""
    def block():
        for _ in range(calls):
            fn()
        gpu.synchronize()

    return block


def _over_rounds(label: str, per_round: list[float], method: str) -> Timing:
    """One row of the traps' table: a variant's per-round values (seconds a call) as a Timing."""
    q1, _q2, q3 = statistics.quantiles(per_round, n=4, method="inclusive") if len(per_round) > 1 else [0.0] * 3
    return Timing(label, statistics.median(per_round), q3 - q1, list(per_round), 1, method, "cpu")


@dataclass
class SimRun:
    """Traps 1 and 2 measured once on the pretend GPU, and trap 3's repeated runs: the table and the
    sentences read the same rounds (`claim_table`), so they cannot quote two different numbers."""

    ratios: dict[str, noise.Estimate]  # "wrong", "harness" (Ratios whose num and den are rows of timings), "order"
    timings: dict[str, Timing]  # "syncs inside · wrong", "no sync · wrong", "... · harness": each over its rounds

    def table(self) -> str:
        return claim_table.table(self.timings, [self.ratios["wrong"], self.ratios["harness"]])


def sim_estimates(max_time: float = 6.0) -> SimRun:
    """The three traps' ratios on the pretend GPU, each re-measured by the noise rule:
    "wrong": the wrong way's 'syncs inside' / 'no sync' (trap 1: a wall clock around 20 calls, no sync of
    its own: it times the launches only), "harness": the harness's 'syncs inside' / 'no sync' in paired
    rounds (trap 2: the launch and sync a sync inside cannot hide), "order": in the thread's order, the
    second-timed total / the first (trap 3, `demo_order`). The four timings of traps 1 and 2, each over
    its rounds, come with them: the table beside the sentences."""
    gpu = SimulatedGPU(launch_cost=SIM_LAUNCH, sync_cost=SIM_SYNC)
    syncs_inside, no_sync = thread000_variants(gpu, SIM_KERNEL)
    wrong: dict[str, list[float]] = {"syncs inside": [], "no sync": []}

    def wrong_ratio():
        for name, fn in (("syncs inside", syncs_inside), ("no sync", no_sync)):
            gpu.synchronize()  # start each timing with an empty queue
            wrong[name].append(timing.wrong_no_sync(fn, repeats=20, device=HOST).median)
        gpu.synchronize()
        return wrong["syncs inside"][-1] / wrong["no sync"][-1]

    def order_ratio():
        r = demo_order()
        return r.totals["syncs inside"] / r.totals["no sync"]

    est_wrong = noise.settle(wrong_ratio, max_time=max_time / 4, ratio=True)
    names = {"syncs inside": "syncs inside · harness", "no sync": "no sync · harness"}
    cmp = noise.compare({n: _harness_block(fn, gpu) for n, fn in (("syncs inside", syncs_inside),
                                                                  ("no sync", no_sync))},
                        min_run_time=0.02, max_time=max_time / 2, pairs=[("syncs inside", "no sync")], device=HOST)
    harness = cmp.ratio("syncs inside", "no sync")
    per_call = f"harness: {_HARNESS_CALLS} calls then one synchronize a sample; median of the paired rounds"
    timings = {f"{n} · wrong": _over_rounds(f"{n} · wrong", v, "WRONG: perf_counter around 20 calls, no synchronize")
               for n, v in wrong.items()}
    timings.update({names[n]: _over_rounds(names[n], [x / _HARNESS_CALLS for x in cmp.rounds[n]], per_call)
                    for n in names})
    est_wrong.num, est_wrong.den = "syncs inside · wrong", "no sync · wrong"
    harness.num, harness.den = names["syncs inside"], names["no sync"]
    return SimRun({"wrong": est_wrong, "harness": harness,
                   "order": noise.settle(order_ratio, max_time=max_time / 4, ratio=True)}, timings)


def sim_verdicts(est: dict[str, noise.Estimate]) -> list[str]:
    """`sim_estimates(...).ratios` as sentences: each says what the rounds agree on, or that they did not.
    Each quotes its ratio as `claim_table.ratio_text` prints it in the table (`SimRun.table`)."""
    return [
        "trap 1, wrong way: " + claim_table.say(est["wrong"], "'no sync' looks {x} faster than 'syncs inside' "
                                                 "(it timed its launches only)"),
        "trap 2, harness:   " + claim_table.say(
            est["harness"], "'syncs inside' takes {x} the time of 'no sync' for the same kernels (the launch and "
            "sync it cannot hide, scaled up here)", tie="the two take the same time ({x})"),
        "trap 3, order:     " + claim_table.say(
            est["order"], "timed second, 'syncs inside' reports {x} the total of 'no sync' timed first, for the same "
            "kernels (the model predicts {pred:.2f}×; on a busy machine every synchronize also waits for "
            "the scheduler)", pred=order_model_ratio()),
    ]


def sync_timeline(calls: int = 4):
    """The same two variants in the model (launch_queue.schedule): when each call is issued and
    run. With a sync inside, the device idles while the host issues the next launch."""
    inside = [Op(f"call {i}", SIM_LAUNCH, SIM_KERNEL, sync=True) for i in range(calls)]
    free = [Op(f"call {i}", SIM_LAUNCH, SIM_KERNEL) for i in range(calls)] + [Op("sync", 0.0, 0.0, sync=True)]
    return {"syncs inside": schedule(inside, sync_cost=SIM_SYNC), "no sync": schedule(free, sync_cost=SIM_SYNC)}


# --- trap 3: the thread's order, on the pretend GPU and in the model ---------------------------

# The pretend GPU for trap 3, scaled down so it runs in a fraction of a second: each call queues
# ORDER_LAUNCHES kernels of ORDER_KERNEL seconds, and the queue holds ORDER_QUEUE launches (a real
# one holds about QUEUE_DEPTH; see launch_queue). ORDER_CALLS calls are timed per variant, as
# timeit times 1000 in the thread.
ORDER_CALLS, ORDER_LAUNCHES, ORDER_KERNEL, ORDER_QUEUE = 12, 4, 0.002, 16


@dataclass
class OrderRun:
    """timeit-style totals of two variants that run the same kernels, timed one after the other."""

    order: tuple[str, str]  # which was timed first
    totals: dict[str, float]  # seconds for ORDER_CALLS calls
    true_total: float  # the device work of ORDER_CALLS calls

    def line(self) -> str:
        a, b = self.order
        return (f"{a} timed first: {fmt_time(self.totals[a])}, then {b}: {fmt_time(self.totals[b])} "
                f"(each ran {fmt_time(self.true_total)} of kernels)")


def demo_order(first: str = "no sync", final_sync: bool = False, clock=None) -> OrderRun:
    """Trap 3 on the pretend GPU: total each variant over ORDER_CALLS calls with a wall clock, one
    after the other, like `timeit` in the thread. `final_sync=True` waits for the device before each
    clock stops (what the harness does), so nothing is billed to the next variant. `clock`: the wall
    clock, or a `launch_queue.ManualClock` for the exact numbers of the rules (tests)."""
    if first not in ("no sync", "syncs inside"):
        raise ValueError("first must be 'no sync' or 'syncs inside'.")
    clock = clock or WallClock()
    gpu = SimulatedGPU(queue_depth=ORDER_QUEUE, clock=clock)

    def no_sync():
        for _ in range(ORDER_LAUNCHES):
            gpu.launch(ORDER_KERNEL)

    def syncs_inside():
        no_sync()
        gpu.synchronize()

    fns = {"no sync": no_sync, "syncs inside": syncs_inside}
    order = (first, "syncs inside" if first == "no sync" else "no sync")
    totals = {}
    for name in order:
        t0 = clock.now()
        for _ in range(ORDER_CALLS):
            fns[name]()
        if final_sync:
            gpu.synchronize()
        totals[name] = clock.now() - t0
    gpu.synchronize()
    return OrderRun(order, totals, ORDER_CALLS * ORDER_LAUNCHES * ORDER_KERNEL)


def order_model_ratio() -> float:
    """What launch_queue.schedule predicts for demo_order's pretend GPU, in the thread's order."""
    per_call = [Op("k", 0.0, ORDER_KERNEL)] * ORDER_LAUNCHES
    a = [op for _ in range(ORDER_CALLS) for op in per_call]
    b = [op for _ in range(ORDER_CALLS) for op in per_call[:-1] + [Op("k", 0.0, ORDER_KERNEL, sync=True)]]
    t = schedule(a + b, queue_depth=ORDER_QUEUE, sync_cost=0.0)  # the pretend GPU's sync has no round trip
    first = t.slots[len(a) - 1].cpu_end
    return (t.total - first) / first


@dataclass
class ThreadQueue:
    """K. Frank's two totals explained by the queue: what the model predicts from the reported sum."""

    label: str  # the reported record
    reported: tuple[float, float]  # run_batched (no sync, timed first), run_batched2 (sync, next)
    calls: int
    launches_per_call: int
    queue_depth: int
    per_call: float  # device seconds a call, from the reported sum
    predicted: tuple[float, float]

    @property
    def queued_calls(self) -> float:
        """Calls' worth of work left queued when the first clock stopped, from the reported gap."""
        return (self.reported[1] - self.reported[0]) / 2 / self.per_call

    def lines(self) -> list[str]:
        (a, b), (pa, pb) = self.reported, self.predicted
        return [f"{self.label}",
                f"  reported:  run_batched (no sync) {a:.2f} s, then run_batched2 (sync inside) {b:.2f} s",
                f"  the model: {pa:.2f} s, then {pb:.2f} s  (one true cost, {self.per_call * 1e3:.2f} ms a call, "
                f"from the sum; {self.launches_per_call} launches a call; a queue of {self.queue_depth})",
                f"  the reported gap leaves {self.queued_calls:.0f} calls queued: "
                f"{self.queued_calls * self.launches_per_call:.0f} launches"]


def thread000_launches_per_call() -> int:
    """Ops that launch work in one call of the thread's broadcast matmul, traced on `meta`
    (2 copies, the bmm and the bias add; cuBLAS may run more than one kernel for the bmm)."""
    from ..trace import trace_ops

    x = torch.empty(13, 16, 512, device="meta")
    w, b = torch.empty(12, 512, 512, device="meta"), torch.empty(12, 512, device="meta")
    t = trace_ops(lambda: x.unsqueeze(0) @ w.unsqueeze(1).transpose(-2, -1) + b.unsqueeze(1).unsqueeze(2))
    return len(t.compute_ops)


def thread000_queue(queue_depth: int = QUEUE_DEPTH, host_per_launch: float = 20e-6) -> list[ThreadQueue]:
    """For each reported record of K. Frank's run (seed 000): the model's totals for run_batched
    then run_batched2, when both cost the same per call and the queue holds `queue_depth` launches.

    Pure arithmetic (launch_queue.schedule), the same on every machine. The one number taken from
    the thread is the per-call cost, from the SUM of the two totals; the gap between them is then
    the model's prediction. `host_per_launch` (an assumption: tens of µs of Python and launch a
    kernel) only needs to be far below the device time per launch."""
    k = thread000_launches_per_call()
    out = []
    for rec in results.for_lesson("01_broadcast_matmul", kinds=("reported",), gpu_only=True):
        v = rec.lesson("01_broadcast_matmul")["headline"]["variants"]
        first, second = v.get("broadcast matmul"), v.get("broadcast matmul (views made once)")
        if not first or not second or "without" not in first.get("note", "").lower():
            continue  # only the run whose first variant had no synchronize
        n = int(first["calls"])
        a, b = first["total_s"], second["total_s"]
        per_call = (a + b) / (2 * n)
        op = Op("launch", host_per_launch, per_call / k)
        no_sync = [op] * (k * n)
        with_sync = ([op] * (k - 1) + [Op("launch", host_per_launch, per_call / k, sync=True)]) * n
        t = schedule(no_sync + with_sync, queue_depth=queue_depth)
        pa = t.slots[len(no_sync) - 1].cpu_end
        out.append(ThreadQueue(rec.label(), (a, b), n, k, queue_depth, per_call, (pa, t.total - pa)))
    return out
