"""Lesson 00: timing GPU code honestly.

Every forum thread in this course times something, and most time it wrong: seed 000 puts
`torch.cuda.synchronize()` inside some of the timed functions but not others and sums
`timeit` totals; seed 001 uses `time.time()` with no warm-up (one variant has no
synchronize at all); seed 003 generates its random input inside the timed function.

Each `demo_*` function makes one of those mistakes with a wrong timer from
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
- noise_rule.py      §4.1: the noise rule's interval, and why peeking until a comparison looks decided misleads
                     (a seeded simulation: the same numbers on every machine)

Below: the names the notebook and its solution use (the tests import the rest from the files above),
three of them from the toolkit (show_source, SimulatedGPU, host_syncs). `compare` is also used by
workshop/explorer_times.py.
"""
from __future__ import annotations

from ..display import show_source  # noqa: F401
from ..launch_queue import SimulatedGPU  # noqa: F401
from ..syncs import host_syncs  # noqa: F401
from .compare_timers import compare  # noqa: F401
from .demos import (  # noqa: F401
    demo_first_call, demo_hot_cache, demo_mean, demo_no_sync, demo_one_thread, demo_random_data, demo_single_run,
    sizes,
)
from .exercise import STEADY, FakeWorkload, broken_benchmark, check_exercise  # noqa: F401
from .explore import KEY, recorded_gpu_summary, recorded_rows, rows_for_plot  # noqa: F401
from .noise_rule import example_comparison, peek_until_decided, peeking_experiment, plot_noise_rule  # noqa: F401
from .pretend_gpu import (  # noqa: F401
    demo_order, sim_estimates, sim_verdicts, sync_timeline, thread000_queue,
)
from .variants import implicit_syncs_example, pseudo_linear, pseudo_linear_fresh_input, thread000_variants  # noqa: F401
