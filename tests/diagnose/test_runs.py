"""How diagnose runs (issue 29): once, on meta copies where the step allows it (the caller's objects untouched,
nothing allocated, a 50 GB model in seconds), on the CPU when asked or when meta cannot run it, the device passed
and never guessed from a closure; a module and a batch are a forward and a backward."""
import resource

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lessons_lib
from lessons_lib.diagnose.inputs import prepare

from . import cases_loops, cases_pitfalls
from .catalogue import check, run


def _train(model, opt, x, y):
    for _ in range(2):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(loss.item())


def test_the_callers_objects_are_untouched_on_meta():
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    F.cross_entropy(model(x), y).backward()
    opt.step()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = {k: v.clone() for k, v in opt.state[model[0].weight].items()}
    grad = model[0].weight.grad.clone()
    report = lessons_lib.diagnose(_train, model, opt, x, y)
    assert report.ran_on == "meta" and report.of("host sync")  # the print(loss.item()) line
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(state[k], v) for k, v in opt.state[model[0].weight].items())
    assert torch.equal(grad, model[0].weight.grad) and all(p.device.type == "cpu" for p in model.parameters())


def test_optimizer_copies_keep_sharing_their_modules_parameters_and_host_step_counts():
    model = nn.Linear(8, 8)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    step = prepare(_train, (model, opt, torch.randn(2, 8), torch.zeros(2, dtype=torch.long)), {}, None)
    m, o = step.args[:2]
    assert step.device == "meta" and m is not model and o is not opt
    assert [id(p) for p in m.parameters()] == [id(p) for g in o.param_groups for p in g["params"]]
    assert all(p.device.type == "meta" for p in m.parameters())
    assert o.state[m.weight]["step"].device.type == "cpu"  # Adam keeps it on the host without capturable
    assert o.state[m.weight]["exp_avg"].device.type == "meta"


def test_a_model_too_big_for_this_machine_gets_a_report_without_allocating():
    with torch.device("meta"):  # 48 layers of 16384 x 16384: 51.5 GB of float32 parameters
        model = nn.Sequential(*[nn.Linear(16384, 16384) for _ in range(48)])
        x = torch.randn(8, 16384)
    assert sum(p.numel() for p in model.parameters()) * 4 > 50e9
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    report = lessons_lib.diagnose(model, x)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 512 * 1024  # far below one layer's 1 GiB
    assert report.clean and report.ran_on == "meta"
    assert report.step["gemms"] == 48 * 3 - 1  # forward, and backward's two (the first layer's input needs none)
    assert report.step["flops"] == pytest.approx(6 * 8 * 16384 * 16384 * 48, rel=0.03)


@pytest.mark.parametrize("case", [cases_loops.case_loop_logs_item, cases_pitfalls.case_per_head_broadcast,
                                  cases_loops.case_cat_in_a_loop, cases_pitfalls.case_mlp_per_expert,
                                  cases_pitfalls.case_hand_layernorm], ids=lambda c: c.__name__[5:])
def test_on_the_cpu_it_finds_what_it_finds_on_meta(case):
    on_cpu, on_meta = run(case, lessons_lib.diagnose, device="cpu"), run(case, lessons_lib.diagnose, device="meta")
    assert on_cpu.ran_on == "cpu" and on_meta.ran_on == "meta"
    assert not check(case, on_cpu), "\n".join(check(case, on_cpu))
    assert [(f.kind, f.line) for f in on_cpu.findings] == [(f.kind, f.line) for f in on_meta.findings]


def test_a_step_that_holds_its_model_in_a_closure_runs_on_meta_copies_of_it():
    model = nn.Linear(16, 4)  # held by the closure: copied with it (issue 32: it used to run for real on yours)

    def step(x):
        model(x).sum().backward()
        return model.weight.grad.abs().sum().item()

    report = lessons_lib.diagnose(step, torch.randn(8, 16))
    assert report.ran_on == "meta" and "host sync" in report.kinds and model.weight.grad is None
    assert str(report).startswith("✗ ") and "pitfall" in str(report).splitlines()[0]
    assert "(ran once, on meta copies of your objects: nothing ran for real" in str(report).splitlines()[0]


def test_the_device_is_passed_never_guessed_from_a_closure():
    x = torch.randn(4)
    on_meta = lessons_lib.diagnose(lambda: (x * 2).sum())  # the default is meta, for a closure too
    assert on_meta.ran_on == "meta" and on_meta.clean and on_meta.step["ops"] == 2
    assert lessons_lib.diagnose(lambda: (x * 2).sum(), device="cpu").ran_on == "cpu"
    for bad, words in (("gpu0", "device="), ("cuda" if not torch.cuda.is_available() else "npu", "device=")):
        with pytest.raises(ValueError, match=words):
            lessons_lib.diagnose(lambda t: t, x, device=bad)
    with pytest.raises(ValueError, match="gpu="):
        lessons_lib.diagnose(lambda t: t, x, gpu="GTX 480")
    not_a_step = lessons_lib.diagnose(42, x)
    assert not not_a_step.ran and "needs the step itself" in str(not_a_step).splitlines()[0]


def test_a_module_and_a_batch_are_a_forward_and_a_backward_of_a_scalar():
    report = lessons_lib.diagnose(nn.Linear(256, 256), torch.randn(64, 256))
    assert report.clean and report.step["steps"] == 1 and report.step["gemms"] == 2  # forward, weight's gradient
    frozen = nn.Linear(256, 256).requires_grad_(False)
    assert lessons_lib.diagnose(frozen, torch.randn(64, 256)).step["gemms"] == 1  # nothing to backward


def test_a_method_of_a_module_is_diagnosed_on_a_copy_of_its_module():
    class Trainer(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2048, 2048)  # big enough not to be launch-bound on a T4

        def training_step(self, x):
            loss = self.net(x).square().mean()
            loss.backward()
            return loss.item()

    t = Trainer()
    report = lessons_lib.diagnose(t.training_step, torch.randn(4096, 2048))
    assert report.ran_on == "meta" and report.kinds == ["host sync"] and t.net.weight.grad is None


def test_capture_hazards_only_when_asked_and_the_fused_optimizer_is_not_judged_on_meta():
    report = run(cases_pitfalls.case_capture_hazards, lessons_lib.diagnose, graphs=False)
    assert "capture hazard" not in report.kinds and report.graph_report is None
    assert report.checked["capture hazards (05)"] == "not asked (graphs=True)"
    model = nn.Linear(2048, 2048)  # big enough not to be launch-bound on a T4
    opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.1), momentum=0.9, fused=True)

    def step(model, opt, x):
        model(x).sum().backward()
        opt.step()

    report = lessons_lib.diagnose(step, model, opt, torch.randn(4096, 2048), graphs=True)
    assert report.clean and report.graph_report is not None and any("fused" in n for n in report.notes)


def test_without_the_reduction_tag_the_reductions_are_known_by_name(monkeypatch):
    # torch 2.9 has no torch.Tag.reduction: collect falls back to REDUCTIONS, the ops that carry the tag in 2.13
    # (later releases tag new ops too: 2.15 adds linalg__powsum, which 2.9 does not have)
    from lessons_lib.diagnose import collect

    if getattr(torch.Tag, "reduction", None) is None:
        pytest.skip("this torch has no torch.Tag.reduction to compare the list with")
    tagged = set()
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        for overload in getattr(packet, "overloads", lambda: [])():
            if torch.Tag.reduction in getattr(packet, overload).tags:
                tagged.add(name)
    assert collect.REDUCTIONS <= tagged
    monkeypatch.setattr(collect, "_REDUCTION_TAG", None)
    assert collect._is_reduction(torch.ops.aten.sum.dim_IntList, set())
    assert not collect._is_reduction(torch.ops.aten.add.Tensor, set())
