"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): what a width sweep says: Linear's
exponent over its compute-bound widths (sweeps.py)."""
from lessons_lib import roofline, timing
from lessons_lib.lesson04_launch_overhead import lessons, sweeps


# --- the Strassen check: Linear's exponent over its compute-bound widths -------------------------------
def _fake_sweep(values, linear_times, peaks_):
    from lessons_lib.lesson import Run, Sweep

    runs = []
    for v, t in zip(values, linear_times):
        p = {"width": v, "batch": 256, "layers": 1}
        work = lessons.LESSON.work(p)
        runs.append(Run(lessons.LESSON.key, p, "float32", "cpu",
                        {n: timing.Timing(n, t if n == "Linear" else 1e-6, 0.0, [t], 1, "", "cpu") for n in work},
                        work))
    return Sweep(lessons.LESSON.key, "width", values, runs)


def test_linear_exponent_reads_the_compute_bound_points():
    pk = roofline.Peaks(flops=1e9, bandwidth=1e12, launch=1e-9, source="test")  # everything compute-bound
    sw = _fake_sweep([64, 128, 256], [1.0, 4.0, 16.0], pk)
    k, lo, hi = sweeps.linear_exponent(sw, pk)
    assert (round(k.median, 6), lo, hi) == (2.0, 64, 256)
    assert k.decided  # no spread in the fake timings
    assert "width^2.00" in sweeps.sweep_summary(sw, pk)
    assert sweeps.linear_exponent(sw, roofline.Peaks(1e18, 1e18, 1.0, "all overhead")) is None
