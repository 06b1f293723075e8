"""Lesson 04's tests: no_allocation fails any allocation of inputs (bad input must be refused first).

pytest imports this file before tests/simgpu sets up its simulated GPU (an initial conftest), so it imports
nothing that looks at the device: the lesson is imported inside the fixture, and DEVICES lives in helpers.py.
"""
import pytest
import torch


def _boom(*args, **kwargs):
    raise AssertionError("allocated inputs for a shape that should have been refused first")


@pytest.fixture
def no_allocation(monkeypatch):
    from lessons_lib.lesson04_launch_overhead import lessons

    for lesson in (lessons.LESSON, lessons.TRAIN_LESSON):
        monkeypatch.setattr(lesson, "make_inputs", _boom)
    for name in ("randn", "rand", "zeros", "ones"):
        monkeypatch.setattr(torch, name, _boom)
