"""Lesson 01's tests: the shapes and byte counts they share."""
from lessons_lib.lesson01_broadcast_matmul import variants

SEED = variants.THREAD_SHAPE
ODD = {"num_modules": 7, "num_inputs": 5, "batch_size": 3, "embed_dims": 33}
WEIGHT_COPY = (12, 13, 512, 512)
WEIGHT_COPY_BYTES = 12 * 13 * 512 * 512 * 4  # 163,577,856 B: 156 MiB, about 164 MB
