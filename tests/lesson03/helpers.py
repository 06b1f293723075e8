"""Lesson 03 (many small Linear layers in parallel, forum seed 002): what the test files share."""
import contextlib

import torch

SMALL = {"batch": 2, "groups": 4, "group_size": 8, "length": 5}


def _boom(*args, **kwargs):
    raise AssertionError("allocated inputs for a shape that should have been refused first")


_NEW_API = (("cuda", "matmul"), ("cudnn", "conv"), ("cudnn", "rnn"), ("mkldnn", "matmul"), ("cudnn", None), (None, None))


def _owner(backend, op):
    obj = torch.backends if backend is None else getattr(torch.backends, backend)
    return obj if op is None else getattr(obj, op)


@contextlib.contextmanager
def tf32_restored():
    """Leave PyTorch's TF32 settings exactly as found, whichever API a test sets them with: the old flags
    first (read while the two APIs still agree), then each per-backend fp32_precision of torch 2.9+."""
    legacy = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    new = {k: _owner(*k).fp32_precision for k in _NEW_API} if hasattr(torch.backends.cudnn, "conv") else {}
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(legacy[0])
        torch.backends.cudnn.allow_tf32 = legacy[1]
        for (backend, op), value in reversed(list(new.items())):  # the parents first, then the ops
            setattr(_owner(backend, op), "fp32_precision", value)
