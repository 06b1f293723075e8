"""Lesson 05's tests: under the simulated GPU, torch.cuda.graph's host cache call is stubbed.

pytest imports this file before tests/simgpu sets up its simulated GPU (an initial conftest), so it reads
nothing about the device at import time: SIMULATED comes from helpers.py inside the fixture.
"""
import pytest
import torch


@pytest.fixture(autouse=True)
def _simulated_host_cache(monkeypatch):
    """torch.cuda.graph calls torch._C._host_emptyCache, absent in a CPU-only build (requested from simgpu)."""
    from .helpers import SIMULATED

    if SIMULATED and not hasattr(torch._C, "_host_emptyCache"):
        monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: None, raising=False)
