from lessons_lib.lesson07_capstone.evidence import findings


def test_the_tools_find_the_pitfalls():
    f = findings()
    assert f["fixed"]["ops"] < 0.5 * f["slow"]["ops"]
    assert f["fixed"]["gemms"] < f["slow"]["gemms"]
    assert f["slow"]["syncs"] >= 3 and f["fixed"]["syncs"] <= 1
