"""Lesson 06's summary of the seed's claims (evidence.py)."""

from lessons_lib.lesson06_data_movement import evidence


def test_the_in_place_claim_no_longer_says_not_bandwidth():
    rule = dict((c[0], c[2]) for c in evidence.CLAIMS)["In-place ops avoid copies"]
    assert "not bandwidth" not in rule and "same bytes" in rule


def test_a_claim_another_lesson_tests_points_there():
    table = str(evidence.summary_table({}))
    assert "torch.matmul" in table and "lesson 01" in table


def test_summary_table_has_every_claim_and_its_evidence_and_renders_as_html():
    table = evidence.summary_table({evidence.CLAIMS[0][0]: "59x in the model"})
    assert all(c[0] in str(table) for c in evidence.CLAIMS) and "59x in the model" in str(table)
    html = table._repr_html_()
    assert html.startswith("<table>") and html.count("<tr>") == len(evidence.CLAIMS) + 1
