"""Lesson 03 (many small Linear layers in parallel, forum seed 002): every test starts and ends with an empty tuning cache."""

import pytest

from lessons_lib import grouped_linear as GL


@pytest.fixture(autouse=True)
def fresh_cache():
    GL.clear_cache()
    yield
    GL.clear_cache()
