"""Pricing on the named GPU (issue 32 §3): GPU names matched whole, float64 at float64 peaks, autocast modelled on
meta; and what graph_check knows about tensors made from Python data."""
import pytest
import torch

import lessons_lib
from lessons_lib import roofline


@pytest.mark.parametrize("name, key", [("NVIDIA L4", "L4"), ("Tesla T4", "T4"), ("NVIDIA A100-SXM4-40GB", "A100"),
                                       ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"), ("NVIDIA H100 PCIe", "H100 PCIe"),
                                       ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA A10G", "A10G")])
def test_a_gpu_name_matches_its_own_datasheet(name, key):
    assert roofline.datasheet(name).source.startswith(f"datasheet ({key}:")


@pytest.mark.parametrize("name", ["L40S", "NVIDIA L40S", "GH200", "A10", "RTX 4090"])
def test_a_name_that_only_contains_a_known_one_is_unknown(name):
    assert roofline.datasheet(name) is None  # "L40S" was priced as an L4
    with pytest.raises(ValueError, match="no datasheet"):
        lessons_lib.diagnose(lambda x: x * 2, torch.randn(4), gpu=name)


def test_float64_has_float64_peaks():
    t4, h100 = roofline.datasheet("T4", torch.float64), roofline.datasheet("H100", torch.float64)
    assert t4.flops == pytest.approx(8.1e12 / 32) and h100.flops == pytest.approx(67e12)
    assert "fp64" in t4.source
    report = lessons_lib.diagnose(lambda a, b: a @ b, torch.randn(2048, 2048, dtype=torch.float64),
                                  torch.randn(2048, 2048, dtype=torch.float64))
    flops = 2 * 2048 ** 3
    assert report.step["eager_s"] >= flops / t4.flops  # was priced at the float32 peak, 32x too fast


def test_graph_check_refuses_tensors_made_from_python_data():
    def step(x):
        return x[:2] * x.new_tensor([1.0, 2.0]) + torch.as_tensor([3.0, 4.0], device=x.device)

    hazards = lessons_lib.graph_check(step, torch.randn(4)).hazards
    assert {h.what for h in hazards if h.kind == "host↔device copy"} >= {
        "Tensor.new_tensor(...)", f"torch.as_tensor(..., device={torch.device('cpu')!s})"}
