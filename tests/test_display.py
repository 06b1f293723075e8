"""display.py: counts and numbers in words, for every lesson's sentences (issue 28 §2: "1 threads",
"1 saved tensors", "68.0 host syncs")."""
import pytest

from lessons_lib.display import count, number, plural


@pytest.mark.parametrize("n, noun, want", [
    (1, "thread", "1 thread"), (2, "thread", "2 threads"), (1, "saved tensor", "1 saved tensor"),
    (68.0, "host sync", "68 host syncs"), (1.0, "host sync", "1 host sync"), (1.5, "host sync", "1.5 host syncs"),
    (0, "copy", "0 copies"), (3, "batch", "3 batches"), (12800, "element", "12,800 elements"),
    (2, "day", "2 days"),
])
def test_count_says_a_number_and_its_noun(n, noun, want):
    assert count(n, noun) == want


def test_an_irregular_plural_is_given():
    assert count(2, "matrix", "matrices") == "2 matrices"
    assert plural("saved tensor") == "saved tensors"


@pytest.mark.parametrize("x, want", [(68.0, "68"), (0.25, "0.25"), (3.14159, "3.14"), (1234567.0, "1,234,567"),
                                     (float("nan"), "nan"), (True, "True")])
def test_number_drops_a_needless_point_zero(x, want):
    assert number(x) == want
