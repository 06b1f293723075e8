"""claim_table: a table beside a sentence prints the very Ratio the sentence quotes, formatted once."""
import pytest

from lessons_lib import claim_table, noise, timing


def _t(label, median, iqr=0.0):
    return timing.Timing(label, median, iqr, [median] * 5, 1, "scripted", "cpu")


def _cmp(rounds):
    cmp = noise.Comparison(rounds)
    cmp.timings = {n: _t(n, v[-1]) for n, v in rounds.items()}
    return cmp


def test_ratio_text_is_three_significant_figures():
    assert [claim_table.ratio_text(r) for r in (56.63, 7.284, 25.0, 0.9781, 1234.5)] == \
        ["56.6×", "7.28×", "25×", "0.978×", "1230×"]


def test_the_table_and_the_sentence_quote_one_number_even_where_the_medians_divide_to_another():
    # The per-round ratios' median (16.45) is not the quotient of the per-variant medians (16.25): a load that
    # changed between rounds. The table's column is the sentence's number, and one line says why the medians differ.
    load = [1.0, 1.3, 0.8, 1.1, 0.9, 2.4, 1.4, 2.0, 2.8, 1.9]
    stacked = [2e-4 * f for f in load]
    ratios = [16, 16.2, 16.4, 16.6, 16.8, 16.1, 16.3, 16.5, 16.7, 16.9]
    cmp = _cmp({"loop": [r * t for r, t in zip(ratios, stacked)], "stacked": stacked})
    pairs = [("loop", "stacked")]
    text = claim_table.of(cmp, pairs)
    r = cmp.ratio("loop", "stacked")
    said = claim_table.say(r, "the loop takes {x} the stacked step's time")
    x = claim_table.ratio_text(r.median)
    assert f"{x} stacked" in text and x in said
    assert claim_table.read(text) == {("loop", "stacked"): float(x[:-1])}
    quotient = claim_table.ratio_text(cmp.median("loop") / cmp.median("stacked"))
    assert quotient != x and f"÷ of the medians: loop ÷ stacked {quotient}" in text


def test_no_note_where_the_medians_divide_to_the_same_number():
    cmp = _cmp({"a": [2e-3] * 10, "b": [1e-3] * 10})
    text = claim_table.of(cmp, [("a", "b")])
    assert "÷ of the medians" not in text and claim_table.read(text) == {("a", "b"): 2.0}


def test_an_undecided_ratio_is_marked_and_a_sentence_says_not_decided():
    cmp = _cmp({"a": [1e-3, 3e-3, 1e-3, 3e-3], "b": [2e-3, 1e-3, 2e-3, 1e-3]})
    r = cmp.ratio("a", "b")
    assert not r.decided
    assert "(not decided)" in claim_table.of(cmp, [("a", "b")])
    assert claim_table.say(r, "a takes {x} b's time").startswith("not decided")


def test_a_row_label_can_differ_from_the_variant_name_and_a_missing_row_is_one_sentence():
    rows = {"channels_last": _t("channels_last (TF32)", 1e-3), "NCHW": _t("NCHW (TF32)", 2e-3)}
    r = noise.Ratio([2.0] * 10, num="NCHW", den="channels_last")
    text = claim_table.table(rows, [r])
    assert claim_table.read(text) == {("NCHW (TF32)", "channels_last (TF32)"): 2.0}
    with pytest.raises(ValueError, match="names a row the table does not have"):
        claim_table.table(rows, [noise.Ratio([2.0] * 10, num="NHWC", den="NCHW")])


def test_read_finds_several_ratios_on_one_row_and_skips_other_text():
    cmp = _cmp({"bcast": [4e-3] * 10, "loop": [1e-3] * 10, "einsum": [2e-3] * 10})
    text = "some line\n" + claim_table.of(cmp, [("bcast", "loop"), ("bcast", "einsum")]) + "\nbcast  9 ms  later text"
    assert claim_table.read(text) == {("bcast", "loop"): 4.0, ("bcast", "einsum"): 2.0}
