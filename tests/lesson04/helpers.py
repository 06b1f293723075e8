"""Lesson 04's tests: shapes and devices they share."""
import torch

SMALL = {"width": 64, "batch": 32, "layers": 2}


# --- every device the machine has (under tests/simgpu, the simulated GPU's CUDA branches too) ----------
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
TINY = {"width": 8, "batch": 4, "layers": 1}
