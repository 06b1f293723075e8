from lessons_lib.lesson07_capstone.evidence import findings
from lessons_lib.lesson07_capstone.evidence import step_times


def test_the_tools_find_the_pitfalls():
    f = findings()
    assert f["fixed"]["ops"] < 0.5 * f["slow"]["ops"]
    assert f["fixed"]["gemms"] < f["slow"]["gemms"]
    assert f["slow"]["syncs"] >= 3 and f["fixed"]["syncs"] <= 1


def test_step_times_compares_through_noise():
    cmp = step_times(steps=2, max_time=3.0)
    assert set(cmp.names) == {"slow", "fixed"}
    assert "per call" in str(cmp)
