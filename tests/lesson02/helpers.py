"""Lesson 02's tests: the shapes they share, and the helpers that make inputs or refuse to."""
import torch

from lessons_lib.lesson02_autograd_memory import variants

SEED = variants.THREAD_SHAPE
ODD = {"batch": 5, "groups": 3, "dim": 7}
SCALED = {"batch": 256, "groups": 8, "dim": 64}  # seed 004 with a 32× smaller batch
FIXES = ["einsum", "3-D bmm", "custom Function"]


def _boom(*args, **kwargs):
    raise AssertionError("allocated inputs for a shape that should have been refused first")


def _inputs(p, x_grad=True, w_grad=True, dev="cpu"):
    x, W, _g = variants.make_inputs(p, torch.device(dev), torch.float32, x_grad, w_grad)
    return x, W
