"""The rules issue 32 §3 asked for, each on the smallest step that shows it (the real-style catalogue, scored by
test_score.py, shows them on real code): what a step is, what costs nothing on a GPU, what a chain is, compiled
code, autocast, the fixes that must fit, and the forms real code takes."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import lessons_lib


def _gan_like(netD, netG, optD, optG, x, steps=2):
    for _ in range(steps):
        real = netD(x).mean()
        real.backward()
        fake = netG(torch.randn(x.shape[0], 8, device=x.device))
        netD(fake.detach()).mean().backward()
        optD.step()
        d = netD(fake).mean()
        d.backward()
        print(d.item())
        optG.step()


def test_a_step_is_one_optimizer_step_not_one_backward_call():
    netD, netG = nn.Linear(64, 1), nn.Linear(8, 64)
    report = lessons_lib.diagnose(_gan_like, netD, netG, torch.optim.Adam(netD.parameters()),
                                  torch.optim.Adam(netG.parameters()), torch.randn(32, 64))
    assert report.step["steps"] == 2  # six backward calls, two steps of each optimizer
    sync = report.of("host sync")[0]
    assert sync.numbers["per_step"] == 1 and sync.evidence.startswith("1 host sync a step")  # was "0.3 host syncs"
    assert "optimizer steps" in report.step["summary"]


def _train(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def test_a_default_optimizer_is_no_for_loop_on_a_gpu_but_foreach_false_is():
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    x, y = torch.randn(4096, 512), torch.randint(0, 10, (4096,))
    for opt in (torch.optim.AdamW(model.parameters()), torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)):
        assert not lessons_lib.diagnose(_train, model, opt, x, y).of("for-loop optimizer")  # foreach on CUDA
    report = lessons_lib.diagnose(_train, model, torch.optim.AdamW(model.parameters(), foreach=False), x, y)
    assert report.of("for-loop optimizer") and "foreach=False" in report.of("for-loop optimizer")[0].evidence


def test_on_a_cpu_run_an_optimizers_step_count_and_a_dataloaders_reads_are_no_gpu_syncs():
    model = nn.Linear(64, 10)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 64),
                                                                        torch.randint(0, 10, (64,))), batch_size=32,
                                         shuffle=True)

    def epoch(model, opt, loader):
        for x, y in loader:
            _train(model, opt, x, y)

    report = lessons_lib.diagnose(epoch, model, torch.optim.Adam(model.parameters()), loader, device="cpu")
    assert report.ran_on == "cpu" and not report.of("host sync"), str(report)


def test_independent_updates_are_no_chain_and_a_chain_feeds_itself():
    def updates(ps):
        with torch.no_grad():
            for p in ps:
                p.mul_(0.9).add_(1.0)

    ps = [torch.randn(1 << 16, requires_grad=True) for _ in range(8)]
    assert not lessons_lib.diagnose(updates, ps).of("elementwise chain")  # 16 ops, each on its own parameter

    def chain(x):
        return ((x * 2 + 1).exp() - x).sigmoid() * x

    assert lessons_lib.diagnose(chain, torch.randn(1 << 20)).of("elementwise chain")


def test_what_cuda_runs_fused_or_as_foreach_is_no_chain():
    cell = nn.LSTMCell(64, 64)

    def step(cell, x, model):
        h = c = torch.zeros(x.shape[1], 64, device=x.device)
        for t in range(x.shape[0]):
            h, c = cell(x[t], (h, c))
        h.sum().backward()
        torch.nn.utils.clip_grad_norm_(list(cell.parameters()) + list(model.parameters()), 1.0)

    report = lessons_lib.diagnose(step, cell, torch.randn(16, 4096, 64), nn.Linear(4096, 4096))
    assert not report.of("elementwise chain"), str(report)


def _findings(fn, *args, compiled=()):
    """diagnose's evidence and findings for fn on meta tensors, run as given (no copy: the region under test is
    the function's own call)."""
    from lessons_lib.diagnose.collect import collect
    from lessons_lib.diagnose.costs import Gpu
    from lessons_lib.diagnose.inputs import Step
    from lessons_lib.diagnose.run import _findings as findings

    step = Step(fn, args, {}, "meta")
    step.compiled = list(compiled)  # what diagnose's copy of a step lists as compiled
    ev = collect(step, cuda_view=True)
    return findings(ev, Gpu.of("T4"), [])


def _gelu_by_hand(x):
    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


def test_a_compiled_function_is_not_told_to_compile_and_is_priced_compiled():
    x = torch.empty(1 << 22, device="meta")
    eager, compiled = _findings(_gelu_by_hand, x), _findings(torch.compile(_gelu_by_hand), x)
    assert eager.of("elementwise chain") and not compiled.of("elementwise chain")
    assert compiled.step["launches"] < eager.step["launches"] and compiled.step["eager_s"] < eager.step["eager_s"]
    # diagnose copies what a step reaches: a compiled callable's copy is its inner function, named in Step.compiled
    copied = _findings(_gelu_by_hand, x, compiled=[torch.compile(_gelu_by_hand)])
    assert not copied.of("elementwise chain") and copied.step["launches"] == compiled.step["launches"]


def test_autocast_is_priced_in_its_dtype_on_meta():
    def step(model, x):
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            model(x).float().sum().backward()

    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096))
    x = torch.randn(8192, 4096)
    fp16, fp32 = lessons_lib.diagnose(step, model, x), lessons_lib.diagnose(lambda m, x: m(x).sum().backward(), model, x)
    assert fp16.ran_on == "meta" and fp16.step["flops"] == fp32.step["flops"]
    assert fp16.step["eager_s"] < fp32.step["eager_s"] / 3  # 65 against 8.1 TFLOP/s on a T4; it was priced in fp32
    assert fp16.step["bytes"] < fp32.step["bytes"]


def test_a_hand_written_sgd_gets_torch_optim_sgd_without_momentum_or_private_api():
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

    def step(model, x, y, lr=0.1):
        F.cross_entropy(model(x), y).backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)

    fix = lessons_lib.diagnose(step, model, torch.randn(64, 256), torch.randint(0, 10, (64,))).of(
        "for-loop optimizer")[0].fix
    assert "torch.optim.SGD(params, lr=lr)" in fix and "momentum=" not in fix and "torch._" not in fix


def test_a_tensor_made_from_python_data_in_the_step_is_a_host_to_device_copy():
    def step(x):
        scale = x.new_tensor([1.0, 2.0, 3.0, 4.0])
        shift = torch.tensor([0.5, 0.5, 0.5, 0.5], device=x.device)
        return (x * scale + shift)[:, [-1]]

    found = {f.line: f for f in lessons_lib.diagnose(step, torch.randn(8, 4)).of("host sync")}
    lines = step.__code__.co_firstlineno
    assert set(found) == {lines + 1, lines + 2, lines + 3}, found
    assert "Python data" in found[lines + 1].evidence and "slice" in found[lines + 3].fix


def test_a_read_after_the_loop_is_not_a_sync_a_step():
    model = nn.Linear(1024, 1024)

    def fit(model, opt, batches):
        losses = []
        for x in batches:
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return torch.stack(losses).mean().item()

    report = lessons_lib.diagnose(fit, model, torch.optim.SGD(model.parameters(), lr=0.1),
                                  [torch.randn(4096, 1024) for _ in range(3)])
    assert not report.of("host sync") and report.step["steps"] == 3


def test_a_cat_after_a_freed_cat_is_no_cat_in_a_loop():
    # a storage key is an address: a freed cat's output can come back as a later op's output, read by the next cat
    # (LBFGS evaluating the time-sequence model's closure twice on meta). Allocators reuse addresses when they
    # please, so the trace is written out: cat -> A, (A freed) linear -> A, cat(A) at the same line
    from types import SimpleNamespace as NS

    from lessons_lib.code_lines import Where
    from lessons_lib.diagnose.detect_syncs import cat_loops

    here = Where("step.py", 3, "torch.cat(outputs)", "forward")
    ops = [NS(name="cat", where=here, write_bytes=64), NS(name="addmm", where=Where("step.py", 2, "", "f"),
                                                           write_bytes=64), NS(name="cat", where=here, write_bytes=64)]
    info = [NS(phase="forward", ins=("x",), outs=("A",)), NS(phase="forward", ins=("w",), outs=("A",)),
            NS(phase="forward", ins=("A",), outs=("B",))]
    gpu = NS(bytes_time=lambda n: n / 320e9, label="model")
    ev = NS(trace=NS(ops=ops), info=info, steps=1)
    assert not cat_loops(ev, gpu)
    info[1] = NS(phase="forward", ins=("A",), outs=("A",))  # in place on the cat's output: still that tensor
    assert [f.kind for f in cat_loops(ev, gpu)] == ["cat in a loop"]


def test_a_batch_given_on_the_host_to_a_step_that_moves_it_is_a_transfer():
    class Trainer:
        def __init__(self, model):
            self.model, self.device = model, torch.device("cuda")  # the model is moved later, or never
            self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(self, batch):
            x, y = batch
            x, y = x.to(self.device), y.to(self.device)
            F.cross_entropy(self.model(x), y).backward()
            self.opt.step()

    batch = (torch.randn(256, 512), torch.randint(0, 10, (256,)))
    report = lessons_lib.diagnose(Trainer(nn.Linear(512, 10)).step, batch)
    line = Trainer.step.__code__.co_firstlineno + 2
    assert {f.line for f in report.of("pageable transfer")} == {line} and report.step["transferred"] > 0
    assert not lessons_lib.diagnose(lambda m, x: m(x).sum(), nn.Linear(512, 10), batch[0]).step["transferred"]


def test_memory_made_anew_at_a_freed_picks_address_is_not_routed_rows():
    # the same address reuse (keys are addresses) as above, in the collector: rows a boolean mask picked are freed
    # and an expert's input chunk is later made at their address (torch 2.15 on meta, lesson 07's experts_loop).
    # Without clearing, that expert's GEMM was 'on rows the data routed' and its line split into two findings
    from types import SimpleNamespace as NS

    from lessons_lib.diagnose.collect import Collector

    col = NS(phase="forward", picks=set(), rows=set(), anc={}, step=0)
    mask = torch.ones(4, dtype=torch.bool)
    index, addmm, mm = (NS(name=n, is_view=False, gemm=g, where=None) for n, g in
                        (("index", None), ("addmm", (1, 4, 4, 4)), ("mm", (1, 4, 4, 4))))
    assert not Collector._routed(col, index, (torch.ones(4, 4), [mask]), ("x", "m"), ("A",), False)
    assert col.rows == {"A"}
    assert Collector._routed(col, mm, (), ("A", "w"), ("B",), False)  # a GEMM on the picked rows: routed
    assert not Collector._routed(col, addmm, (), ("b", "h", "w"), ("A",), False)  # A freed, made anew by addmm
    assert not Collector._routed(col, mm, (), ("A", "w"), ("C",), False) and "A" not in col.rows

    col.anc = {"A": {("f.py", 1, (1, 4, 4, 4)): (0, 3)}}  # ancestry of the freed tensor
    assert Collector._ancestry(col, addmm, ("b", "h"), ("A",), ("A",)) == -1  # no where: not a GEMM of its own
    assert col.anc["A"] == {}  # the new tensor at A descends from nothing the old one did
