"""Lesson 00: timing GPU code honestly.

Every forum thread in this course times something, and most time it wrong: seed 000 puts
`torch.cuda.synchronize()` inside some of the timed functions but not others and sums
`timeit` totals; seed 001 uses `time.time()` with no warm-up (one variant has no
synchronize at all); seed 003 generates its random input inside the timed function.

Each `demo_*` function below makes one of those mistakes with a wrong timer from
`lessons_lib.timing` and measures the same code with the honest harness, `timing.measure`.
`launch_queue.SimulatedGPU` stands in for a CUDA stream on machines without one, so that the
asynchronous mistakes can be shown on a CPU. The exercise (a broken benchmark to fix, graded on
fake workloads of known duration) lives in exercise.py.

Which file holds what:

- variants.py        the forum's code that the notebook shows with `show_source` (seed 003's PseudoLinear and
                     its fresh input, seed 000's two variants on the pretend GPU, the hidden-syncs fragment)
- demos.py           the mistakes that time real torch code, one `demo_*` each, next to the harness; `sizes`, `Demo`
- pretend_gpu.py     the simulated GPU: seed 000's three traps on `launch_queue.SimulatedGPU` and in the queue
                     model, K. Frank's two totals explained
- compare_timers.py  `compare`: every wrong timer next to the harness on your own function
- explore.py         the plots' rows, the recorded GPU results, `run_all`, `record` and `targets` (read by
                     `python -m lessons_lib.record`); lesson 00 has no explorer widget
- exercise.py        the exercise: the broken benchmark, fake workloads of known duration, the checker
"""
from __future__ import annotations

from ..display import show_source  # noqa: F401  (the notebook calls L.show_source)
from ..launch_queue import QUEUE_DEPTH, Op, SimulatedGPU, WallClock, schedule  # noqa: F401  (the notebook uses them)
from ..syncs import host_syncs  # noqa: F401  (the notebook uses it)
from ..timing import Timing, fmt_time  # noqa: F401
from .variants import implicit_syncs_example, pseudo_linear, pseudo_linear_fresh_input, thread000_variants  # noqa: F401
from .demos import (  # noqa: F401
    MiB, ROTATE_CAP, Sizes, sizes, _check_size, _check_seconds, Demo, _paired, _square, demo_no_sync,
    first_call_in_fresh_process, demo_first_call, demo_random_data, demo_single_run, demo_mean, demo_one_thread,
    demo_hot_cache, timing_bytes,
)
from .pretend_gpu import (  # noqa: F401
    SIM_KERNEL, SIM_LAUNCH, SIM_SYNC, _HARNESS_CALLS, demo_sync_in_one_variant, _harness_block, _harness_with_sync,
    sim_estimates, sim_verdicts, sync_timeline, ORDER_CALLS, ORDER_LAUNCHES, ORDER_KERNEL, ORDER_QUEUE, OrderRun,
    demo_order, order_model_ratio, ThreadQueue, thread000_launches_per_call, thread000_queue,
)
from .compare_timers import Compared, compare  # noqa: F401
from .explore import KEY, SHORT, rows_for_plot, recorded_rows, recorded_gpu_summary, run_all, record, targets  # noqa: F401
from .exercise import (SLOW, STEADY, FakeWorkload, TooManyCalls, broken_benchmark,  # noqa: F401 (for
                       check_exercise, starter_source)  # the notebook)
