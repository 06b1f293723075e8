"""Lesson 01's evidence: what the broadcast version copies, in bytes."""
from __future__ import annotations

import torch

from .variants import THREAD_SHAPE


def thread_weight_copy_bytes(p: dict = THREAD_SHAPE, dtype=torch.float32) -> int:
    """Bytes of the expanded weight copy the broadcast version makes: modules·inputs·E·E."""
    return p["num_modules"] * p["num_inputs"] * p["embed_dims"] ** 2 * torch.empty(0, dtype=dtype).element_size()
