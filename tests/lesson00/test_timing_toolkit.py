"""Lesson 00: the harness and the wrong timers it is taught beside (lessons_lib.timing)."""
import time

import torch

from lessons_lib import timing


# --- the harness and the wrong timers -------------------------------------------------------


def test_harness_median_of_a_known_duration():
    # What cannot vary with load: a sleep never ends early, and the samples are per call, so they
    # cannot add up to more than the wall time spent. (How close to 5 ms it lands is load's business.)
    t0 = time.perf_counter()
    t = timing.measure(time.sleep, 0.005, label="sleep 5 ms", min_run_time=0.05)
    wall = time.perf_counter() - t0
    assert t.median >= 0.005
    assert t.iqr >= 0
    assert len(t.samples) >= timing.MIN_SAMPLES
    assert sum(t.samples) * t.calls_per_sample <= wall


def test_wrong_one_thread_times_with_one_thread(monkeypatch):
    seen = []
    real_timer = timing.tbench.Timer

    def spy(*args, **kwargs):
        seen.append(kwargs.get("num_threads"))
        return real_timer(*args, **kwargs)

    monkeypatch.setattr(timing.tbench, "Timer", spy)
    a = torch.randn(64, 64)
    wrong = timing.wrong_one_thread(torch.mm, a, a, min_run_time=0.01)
    honest = timing.measure(torch.mm, a, a, min_run_time=0.01)
    assert seen == [1, torch.get_num_threads()]
    assert wrong.method.startswith("WRONG: ")
    assert wrong.method.endswith("(1 thread)")
    assert "WRONG" not in honest.method


def test_timer_default_is_one_thread():
    import inspect

    import torch.utils.benchmark as tb

    assert inspect.signature(tb.Timer).parameters["num_threads"].default == 1
