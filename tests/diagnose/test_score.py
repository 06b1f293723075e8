"""Right on real code (issue 32 §3): precision and recall of diagnose over the whole catalogue (the course's own
cases and the real-style ones, whose pitfalls were written down before the tool ran) are both 0.9 or more.
`python -m tests.diagnose.score` prints the table by case."""
from .score import score, table, totals


def test_precision_and_recall_over_the_whole_catalogue_are_at_least_0_9():
    rows = score()
    precision, recall, *_ = totals(rows)
    assert precision >= 0.9 and recall >= 0.9, table(rows)
