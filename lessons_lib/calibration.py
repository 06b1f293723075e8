"""The explorer's run-time estimate, as methods every `Lesson` has (a mixin): calls timed at a small
shape on this machine, now, and scaled to the asked shape by the roofline's work ratio through the
harness's own schedule. `Lesson` (lesson.py) inherits them; they use its check, work, variants and
make_inputs."""
from __future__ import annotations

import statistics
import time

import torch

from . import roofline, timing
from .device import oom_guard, synchronize
from .lesson_parts import check_device, check_dtype
from .runs import CALIBRATION_CALL, CALIBRATION_CALLS, CALIBRATION_FLOOR, Calibration, harness_seconds, timer_overhead


class Calibrating:
    """How long will `run` take here? (`Lesson` inherits this.)"""

    def estimate_seconds(self, params: dict, device=None, dtype=torch.float32, variants=None,
                         min_run_time: float = 0.2, points: int = 1) -> float:
        """Predicted wall time of `run` (or of a sweep of `points` shapes), before allocating.

        Per variant: warm-up calls plus the harness's samples, each call at least its roofline
        floor (measured peaks, measured per-op overhead). The floor is a lower bound, so this is
        optimistic for code far from its floor; the explorer also caps each measurement."""
        dev = check_device(device)
        full = self.check(params, dev, dtype)
        names = self.variant_names(variants)
        work = self.work(full, check_dtype(dtype))
        peaks = roofline.measure_peaks(dev, check_dtype(dtype))
        total = 0.0
        for n in names:
            per_call = max(peaks.floor(work[n]), 1e-6)
            total += (timing.WARMUP_CALLS + timing.MIN_SAMPLES) * per_call + min_run_time
        return total * points

    # --- the explorer's estimate: calls timed at a small shape, now, scaled by the model -----------
    def calibration_shapes(self, params: dict, dtype=torch.float32, device=None, variants=None) -> dict[str, list]:
        """Per variant, the shapes from `params` down (halving the parameter furthest above its lower
        bound) until that variant's floor is at most CALIBRATION_FLOOR, smallest first."""
        dev = check_device(device)
        dtype = check_dtype(dtype)
        full = self.check(params, dev, dtype, memory=False)
        peaks = roofline.measure_peaks(dev, dtype)
        out = {}
        for name in self.variant_names(variants):
            chain = [full]
            for _ in range(64):
                shape = chain[-1]
                if peaks.floor(self.work(shape, dtype)[name]) <= CALIBRATION_FLOOR:
                    break
                for p in sorted((p for p in self.params if shape[p.name] > p.lo),
                                key=lambda p: shape[p.name] / max(p.lo, 1), reverse=True):
                    trial = {**shape, p.name: max(p.lo, shape[p.name] // 2)}
                    try:
                        self.check(trial, dev, dtype, memory=False)
                    except ValueError:  # the lesson's own domain rule (say, divisibility): try another
                        continue
                    chain.append(trial)
                    break
                else:
                    break
            out[name] = chain[::-1]
        return out

    def calibrate(self, params: dict, device=None, dtype=torch.float32, variants=None,
                  cache: dict | None = None, on_phase=None) -> "Calibration":
        """Time each variant on this machine, now: one untimed call, then the median of a few, at the
        largest of its `calibration_shapes` (the asked shape itself when its floor is small, as at a
        lesson's CPU defaults); then up that chain toward the asked shape: at the largest shape whose call
        is predicted under CALIBRATION_CALL seconds from the last one timed, until none is.

        A call's time grows faster than its floor when its data leave the cache, when each new buffer
        faults its pages in, or when a parallel op waits at its barrier for a descheduled thread, and a
        scale-up by the floor's ratio misses that: lesson 06's cat in a loop, 1 thread, load 3.5 on
        the course's 2-core Xeon, took 2.8, 17.9 and 91 ms at 192, 384 and 768 pieces (floor ×4 a
        step; page faults from 768); an earlier measurement under load 12 found a prediction scaled
        from 192 15.7× short at 384 pieces. Each shape timed costs a call or four, each predicted under
        CALIBRATION_CALL, where the run makes at least eight at a larger one. (Tried and dropped:
        walking up through every shape cost 10 s under load; a trend fitted from two shapes swung
        100× with their noise.) Metrics, making the inputs and torch's Timer overhead are timed too.

        cache: {(variant, shape): timing} shared between calibrations (a sweep's points) so that a
        shape is timed once. on_phase(text): told which variant is timed, at which shape."""
        dev = check_device(device)
        dtype = check_dtype(dtype)
        full = self.check(params, dev, dtype, memory=False)
        chains = self.calibration_shapes(full, dtype, dev, variants)
        peaks = roofline.measure_peaks(dev, dtype)
        cache = {} if cache is None else cache
        points, metric_s, inputs_s = {}, {}, {}

        def timed(name, shape):
            key = (name, tuple(sorted(shape.items())), dev.type, dtype, torch.get_num_threads())
            if key not in cache:
                self.check(shape, dev, dtype)  # it fits: no bigger than params, which was checked
                if on_phase is not None:
                    on_phase(f"timing a few calls of {name} ({k} of {len(chains)}) at "
                             + " ".join(f"{p}={v}" for p, v in shape.items()))
                cache[key] = self._time_once(name, shape, dev, dtype)
            return cache[key]

        with oom_guard(dev, what=f"{self.title} (estimating the run time)"):
            for k, (name, chain) in enumerate(chains.items(), 1):
                shape = chain[0]  # the largest whose floor is under CALIBRATION_FLOOR (params itself, often)
                floor = peaks.floor(self.work(shape, dtype)[name])
                call, metric_s[name], inputs_s[name] = timed(name, shape)
                at = 0
                while at < len(chain) - 1:  # up the chain: to the largest shape predicted cheap from here
                    for i in range(len(chain) - 1, at, -1):
                        f_big = peaks.floor(self.work(chain[i], dtype)[name])
                        if call * f_big / max(floor, 1e-12) <= CALIBRATION_CALL:
                            break
                    else:
                        break
                    at, shape, floor = i, chain[i], f_big
                    call, metric_s[name], inputs_s[name] = timed(name, shape)
                points[name] = [(shape, floor, call)]
        return Calibration(points, dtype, dev.type, metric_s, inputs_s, peaks, timer_overhead())

    def _time_once(self, name: str, shape: dict, dev, dtype) -> tuple[float, float, float]:
        """(seconds of a call, of the metrics, of making the inputs) at one shape."""
        t0 = time.perf_counter()
        inputs = self.make_inputs(shape, dev, dtype)
        synchronize(dev)
        inputs_s = time.perf_counter() - t0
        v = self.variant(name)
        fn = self.call(v.fn)  # unprepared: a compiled or captured variant is not slower than this
        t0 = time.perf_counter()
        fn(*inputs)  # first-call costs (allocations, lazy init) are not the steady state
        synchronize(dev)
        first = time.perf_counter() - t0
        times = []
        for _ in range(CALIBRATION_CALLS if first < 0.03 else 1):  # a slow call: one is enough
            t0 = time.perf_counter()
            fn(*inputs)
            synchronize(dev)
            times.append(time.perf_counter() - t0)
        metric = 0.0
        if self.metrics is not None:
            self.metrics(v.fn, *inputs)  # its first call may fill caches the run then reuses
            t0 = time.perf_counter()
            self.metrics(v.fn, *inputs)
            metric = time.perf_counter() - t0
        # one call descheduled by the load is not typical: the median of three, or for a slow call the
        # faster of its two (the untimed one pays first-call costs, the other may have been descheduled)
        call = statistics.median(times) if len(times) > 1 else min(first, times[0])
        return call, metric, inputs_s

    def predict(self, cal: "Calibration", params: dict, variants=None, min_run_time: float = 0.2,
                max_time: float | None = None) -> float:
        """Seconds `run(params)` will take on this machine: each variant's call at its calibration
        shape, scaled by its floor's growth to `params` (the roofline's work ratio), run through the
        harness's own schedule (`harness_seconds`, with the Timer overhead measured now); plus its
        metrics, scaled alike, and making the inputs once (scaled by the peak memory's growth)."""
        full = self.check(params, cal.device, cal.dtype, memory=False)
        total, inputs = 0.0, 0.0
        for n in self.variant_names(variants):
            shape, f_small, call = cal.points[n][-1]
            f_full = cal.peaks.floor(self.work(full, cal.dtype)[n])
            ratio = f_full / f_small if f_small > 0 else 1.0
            grow = max(self.peak_bytes(full, cal.dtype), 1) / max(self.peak_bytes(shape, cal.dtype), 1)
            inputs = max(inputs, cal.inputs_s[n] * grow)  # `run` makes them once for every variant
            total += cal.metric_s[n] * ratio
            total += harness_seconds(call * ratio, min_run_time, max_time, overhead=cal.timer_overhead)
        return total + inputs
