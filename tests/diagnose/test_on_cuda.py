"""diagnose on CUDA tensors (device="cuda"): the run is on the GPU, on copies of the caller's objects, with the sync detector's CUDA view of
real device tensors. Under the simulated GPU (-p tests.simgpu --simulate-gpu=t4) this checks the path; on a real GPU
the same test runs it for real."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lessons_lib

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (or -p tests.simgpu)")


def test_a_training_loop_on_cuda_tensors():
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    x, y = torch.randn(128, 256, device="cuda"), torch.randint(0, 10, (128,), device="cuda")

    def train(model, opt, x, y):
        for _ in range(2):
            mask = torch.ones(len(x), dtype=torch.bool).to(x.device)  # made on the host and moved: a sync
            loss = F.cross_entropy(model(x)[mask], y[mask])  # a boolean index: a sync each
            opt.zero_grad()
            loss.backward()
            opt.step()

    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = lessons_lib.diagnose(train, model, opt, x, y, device="cuda")
    assert report.ran_on == "cuda" and "ran once, for real, on copies of your objects on the GPU" in str(report)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()) and model[0].weight.grad is None
    per_line = {f.where.text.split(" = ")[0]: f.numbers["per_step"] for f in report.of("host sync")}
    assert per_line == {"mask": 1, "loss": 2, "loss.backward()": 1}
    assert "allocation churn" in report.kinds and report.step["launches"] > 0
