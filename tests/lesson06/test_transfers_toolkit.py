"""The transfers toolkit module (lessons_lib/transfers.py), which lesson 06 introduces."""
import pytest
import torch

from lessons_lib import transfers


SIMULATED = getattr(torch.cuda, "_course_simulated", None)


REAL_GPU = torch.cuda.is_available() and not SIMULATED


def test_link_model_reads_the_datasheet_per_direction():
    assert transfers.model("Tesla T4").pcie_gbs == 16
    assert transfers.model("NVIDIA H100 PCIe").gpu == "H100 PCIe"  # the longer name wins
    assert transfers.model("NVIDIA H100 80GB HBM3").nvlink_gbs == 450
    assert transfers.model("Quadro unknown") is None
    link = transfers.model("A100")
    assert link.pinned_gbs > link.pageable_gbs
    # 1 GB at 0.8 × 32 GB/s = 39 ms plus the assumed 10 µs
    assert link.seconds(10**9) == pytest.approx(1 / 25.6 + 1e-5)
    assert "Not a measurement" in transfers.model_table(2**20)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only explanations")
def test_transfers_explain_themselves_on_a_cpu():
    assert "No CUDA GPU" in transfers.problem()
    assert "Pinned memory needs an accelerator" in transfers.pin_problem()
    assert "changes nothing on a CPU" in transfers.non_blocking_note("cpu")
    with pytest.raises(ValueError, match="No CUDA GPU"):
        transfers.measure(2**20)


@pytest.mark.parametrize("kw, message", [({"direction": "sideways"}, "direction"), ({"nbytes": 2}, "nbytes"),
                                         ({"nbytes": 1.5}, "nbytes")])
def test_transfer_measurement_refuses_bad_input(kw, message):
    with pytest.raises(ValueError, match=message):
        transfers.measure(**{"nbytes": 2**20, **kw})


@pytest.mark.gpu
@pytest.mark.skipif(not REAL_GPU, reason="needs a real CUDA GPU")
def test_gpu_pinned_copies_beat_pageable_by_1_5x():
    """Model (transfers.py): pinned = 0.8 × PCIe per direction; pageable adds a host staging copy at ~10 GB/s
    (assumed), so pinned/pageable = 1 + pinned/10: 2.3× on a T4 (12.8 GB/s), 6.1× on an H100 (51 GB/s). The bar
    1.5× leaves a margin of 1.5× below the T4 model for a host whose staging copy overlaps the DMA."""
    pinned = transfers.measure(256 * 2**20, "h2d", pinned=True)
    pageable = transfers.measure(256 * 2**20, "h2d", pinned=False)
    assert pinned.gbs >= 1.5 * pageable.gbs, (str(pinned), str(pageable))
