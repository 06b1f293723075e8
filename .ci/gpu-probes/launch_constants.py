"""The launch model's constants, each measured on its own on this GPU and host (< 15 s on an H100; prints, never
raises; "needs CUDA" elsewhere).

The course's constants (lessons_lib/launch_queue.py, roofline.ASSUMED_LAUNCH) were re-derived from the H200 run of
2026-11-26 (issue 33): some from its logs (a one-element add's host time, the profile's shortest kernels), some
assumed (the gaps between kernels, a graph's launch), one reported (a sync's round trip). Each line below prints a
microbenchmark beside the constant it checks, and their ratio:
1. host seconds per eager op: a one-element add on the GPU, the harness's median (roofline.overhead) and queued
   back to back without waiting (microbench.host_seconds), against ASSUMED_LAUNCH; the same add on the CPU (the
   dispatch alone); their difference against KERNEL_LAUNCH.
2. a tiny kernel's device time, back to back in one stream with the host hidden behind a spin kernel
   (microbench.device_seconds of the add), against KERNEL_MIN + STREAM_GAP.
3. a CUDA graph of 64 such adds: its replay's device time per kernel against KERNEL_MIN + GRAPH_GAP; the host time
   of one replay (queued, not awaited) against GRAPH_LAUNCH.
4. a host sync's round trip (microbench.sync_seconds) against SYNC_COST, and a .item() of a one-element tensor.
5. a training step's host time per aten op: nn.Linear(1, 1) forward and backward over its ops (lesson 04's tiny
   step), against ASSUMED_LAUNCH: what autograd adds.
"""
import time

import torch
from _probe import require_cuda, step  # .ci/gpu-probes/_probe.py (the probe's own folder is on sys.path)

require_cuda()


def main():
    from lessons_lib import launch_queue as lq, microbench, roofline, timing
    from lessons_lib.trace import trace_ops

    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    one = torch.ones(1, device=dev)
    us = lambda s: f"{s * 1e6:.2f} µs"  # noqa: E731

    def host():
        add = roofline.overhead(dev)
        queued = microbench.host_seconds(torch.add, one, one, device=dev)
        cpu = timing.measure(torch.add, torch.ones(1), torch.ones(1), min_run_time=0.1, device="cpu").median
        launch = roofline.ASSUMED_LAUNCH["H100"]
        print(f"1. one-element add on the GPU: harness {us(add)}, queued {us(queued)}; ASSUMED_LAUNCH {us(launch)} "
              f"(measured / constant {add / launch:.2f}); on the CPU {us(cpu)}; GPU - CPU {us(add - cpu)} against "
              f"KERNEL_LAUNCH {us(lq.KERNEL_LAUNCH)} ({(add - cpu) / lq.KERNEL_LAUNCH:.2f})")

    def stream():
        dev_s = microbench.device_seconds(torch.add, one, one, device=dev, calls=200, repeats=5)
        model = lq.KERNEL_MIN + lq.STREAM_GAP
        print(f"2. a tiny kernel back to back in a stream: {us(dev_s)} of device time each; KERNEL_MIN + STREAM_GAP "
              f"{us(model)} ({dev_s / model:.2f})")

    def graph():
        from lessons_lib import graphs

        x = torch.ones(1, device=dev)
        captured = graphs.capture(lambda t: [torch.add(t, t) for _ in range(64)][-1], x)
        replay = captured.graph.replay
        dev_s = microbench.device_seconds(replay, device=dev, calls=10, repeats=5) / 64
        host_s = microbench.host_seconds(replay, device=dev, calls=20)
        model = lq.KERNEL_MIN + lq.GRAPH_GAP
        print(f"3. a graph of 64 tiny kernels: {us(dev_s)} of device time a kernel; KERNEL_MIN + GRAPH_GAP {us(model)} "
              f"({dev_s / model:.2f}); one replay's host time {us(host_s)}, GRAPH_LAUNCH {us(lq.GRAPH_LAUNCH)} "
              f"({host_s / lq.GRAPH_LAUNCH:.2f})")

    def sync():
        s = microbench.sync_seconds(dev, repeats=100)
        items = []
        for _ in range(100):
            t0 = time.perf_counter()
            (one + 1).item()
            items.append(time.perf_counter() - t0)
        item = sorted(items)[50]
        print(f"4. a sync's round trip beyond the launch: {us(s)}; SYNC_COST {us(lq.SYNC_COST)} "
              f"({s / lq.SYNC_COST:.2f}); an add and .item(): {us(item)}")

    def training():
        lin = torch.nn.Linear(1, 1).to(dev)
        xg = torch.zeros(1, 1, device=dev, requires_grad=True)

        def fwd_bwd():
            lin(xg).sum().backward()

        ops = len(trace_ops(fwd_bwd).ops)
        t = timing.measure(fwd_bwd, min_run_time=0.2, device=dev).median
        launch = roofline.ASSUMED_LAUNCH["H100"]
        print(f"5. nn.Linear(1, 1) forward + backward: {us(t)} for {ops} aten ops, {us(t / ops)} an op "
              f"({t / ops / launch:.2f}× ASSUMED_LAUNCH): autograd's host time per op")

    for i, (what, fn) in enumerate((("host", host), ("stream", stream), ("graph", graph), ("sync", sync),
                                    ("training", training)), 1):
        step(i, what, fn)


if __name__ == "__main__":
    t0 = time.perf_counter()
    try:
        main()
    except Exception as err:  # never raise: the validation run reads what was printed
        print(f"probe stopped: {type(err).__name__}: {err}")
    print(f"launch_constants probe: {time.perf_counter() - t0:.1f} s")
