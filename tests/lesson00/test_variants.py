"""Lesson 00's variants: the hidden syncs the notebook shows are found."""
import torch

from lessons_lib.lesson00_timing import variants
from lessons_lib.syncs import host_syncs


def test_implicit_syncs_are_found_with_their_lines():
    found = host_syncs(variants.implicit_syncs_example, torch.ones(8))
    assert [s.where.split("(")[0].split(" ")[0] for s in found] == ["print", "if", "kept", "return"]
