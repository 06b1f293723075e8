"""Lesson 05 (CUDA graphs, seed 003): the eager training step matches float64 (variants.py, LESSON in lessons.py)."""
from lessons_lib.lesson05_cuda_graphs import lessons


# --- correctness ------------------------------------------------------------------------------------
def test_the_eager_step_matches_float64_at_default_and_odd_shapes():
    rows = lessons.LESSON.check_correct(seed=0)
    assert len(rows) == 3 and all(r.ok for r in rows)
