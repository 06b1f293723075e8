"""Issue 32 §1: nothing of the reader's is touched, whatever the step reaches and however it reaches it. Each test
takes the reader's state before, runs the tool, and compares: parameters, buffers, gradients, optimizer,
scheduler and scaler state, the random generators, files on disk, an iterator's position, the reader's lists."""
import functools
import logging
import random

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lessons_lib
from lessons_lib import sandbox


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))


def _state(*objs):
    """A deep, detached snapshot of modules (parameters, buffers, gradients), optimizers, schedulers, scalers."""
    out = []
    for o in objs:
        if isinstance(o, nn.Module):
            out.append({k: v.detach().clone() for k, v in o.state_dict().items()})
            out.append([None if p.grad is None else p.grad.clone() for p in o.parameters()])
        else:
            out.append(_clone(o.state_dict()))
    return out


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    return x


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.device == b.device and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _trained(model, opt):
    F.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,))).backward()
    opt.step()


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_a_closure_over_the_model_and_optimizer_runs_on_copies(device):
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)
    _trained(model, opt)
    before = _state(model, opt)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    report = lessons_lib.diagnose(step, torch.randn(8, 16), torch.randint(0, 4, (8,)), device=device)
    assert report.ran and report.ran_on == device and "host sync" in report.kinds
    assert _same(before, _state(model, opt)) and next(model.parameters()).device.type == "cpu"


def test_a_partial_and_a_trainer_method_run_on_copies():
    class Trainer:  # not a module: a plain object holding the model, the optimizer, a scheduler and its history
        def __init__(self):
            self.model = _model()
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9, foreach=True)
            self.sched = torch.optim.lr_scheduler.StepLR(self.opt, 1, gamma=0.5)
            self.history = []

        def train_step(self, x, y):
            loss = F.cross_entropy(self.model(x), y)
            loss.backward()
            self.opt.step()
            self.sched.step()
            self.history.append(loss.detach())

    t = Trainer()
    _trained(t.model, t.opt)
    before = _state(t.model, t.opt, t.sched)
    batch = torch.randn(8, 16), torch.randint(0, 4, (8,))
    assert lessons_lib.diagnose(t.train_step, *batch).ran
    assert lessons_lib.diagnose(functools.partial(t.train_step, batch[0]), batch[1]).ran
    assert _same(before, _state(t.model, t.opt, t.sched)) and t.history == [] and t.sched.last_epoch == 0


def test_a_best_checkpoint_is_not_overwritten_and_best_is_unchanged(tmp_path):
    model = _model()
    path = tmp_path / "best.pt"
    torch.save(model.state_dict(), path)
    saved = path.read_bytes()
    best = [10.0]

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if loss.item() < best[0]:  # on meta .item() is 0: the branch is taken
            best[0] = loss.item()
            torch.save(model.state_dict(), path)
            with open(tmp_path / "log.txt", "a") as log:
                log.write(f"loss {loss.item():.4f}\n")

    report = lessons_lib.diagnose(step, torch.randn(8, 16), torch.randint(0, 4, (8,)))
    assert path.read_bytes() == saved and best == [10.0] and not (tmp_path / "log.txt").exists()
    note = next(n for n in report.notes if n.startswith("the step writes to disk"))
    assert "torch.save" in note and "best.pt" in note and "log.txt" in note and "test_untouched.py:" in note


BEST = 5.0
LOG = []


def _global_step(x):
    global BEST
    loss = x.square().mean()
    BEST = min(BEST, loss.item())
    LOG.append(loss)
    return loss


def test_globals_the_step_assigns_or_appends_to_are_copies():
    assert lessons_lib.diagnose(_global_step, torch.randn(4)).ran
    assert BEST == 5.0 and LOG == []


def test_a_log_file_held_open_a_logging_handler_and_os_calls_write_nothing(tmp_path):
    log_path, keep = tmp_path / "train.log", tmp_path / "keep.txt"
    keep.write_text("mine")
    handle = open(tmp_path / "held.log", "a")
    logger = logging.getLogger("test_untouched")
    handler = logging.FileHandler(log_path)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    import os

    def step(x):
        loss = x.sum()
        handle.write(f"{loss.item()}\n")
        logger.info("loss %s", loss.item())
        os.replace(keep, tmp_path / "moved.txt")
        np.save(tmp_path / "losses.npy", np.zeros(3))  # numpy opens the file: the note names this line
        return loss

    try:
        report = lessons_lib.diagnose(step, torch.randn(4))
    finally:
        logger.removeHandler(handler)
        handler.close()
        handle.close()
    assert report.ran and (tmp_path / "held.log").read_text() == "" and log_path.read_text() == ""
    assert keep.read_text() == "mine" and not (tmp_path / "moved.txt").exists()
    assert not (tmp_path / "losses.npy").exists()
    note = " ".join(report.notes)
    assert "os.replace" in note and "train.log" in note and "losses.npy' at test_untouched.py:" in note


def test_a_hook_appending_to_the_readers_list_appends_to_a_copy():
    model, seen = _model(), []
    model[0].register_forward_hook(lambda module, inputs, output: seen.append(output))
    assert lessons_lib.diagnose(model, torch.randn(8, 16)).ran
    assert seen == [] and len(model[0]._forward_hooks) == 1


def test_a_dataloader_iterator_passed_in_does_not_move():
    data = torch.utils.data.TensorDataset(torch.arange(40.0).view(20, 2), torch.arange(20))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    it = iter(loader)
    first = next(it)
    x_before = data.tensors[0].clone()

    def step(model, it):
        x, _y = next(it)
        model(x).sum().backward()

    report = lessons_lib.diagnose(step, nn.Linear(2, 2), it)
    assert report.ran and any("did not move" in n for n in report.notes)
    assert torch.equal(next(it)[0], first[0] + 8) and torch.equal(data.tensors[0], x_before)


def test_a_step_that_writes_into_the_readers_data_is_stopped_before_the_write():
    data = torch.utils.data.TensorDataset(torch.ones(8, 2))
    before = data.tensors[0].clone()

    def step(model, loader):
        for (x,) in loader:
            x.sub_(1.0)  # normalises its batch in place: a view of the dataset's tensor
            model(x).sum().backward()

    report = lessons_lib.diagnose(step, nn.Linear(2, 2), torch.utils.data.DataLoader(data, batch_size=None))
    assert not report.ran and "writes into your data" in report.stopped and "x.sub_(1.0)" in report.stopped
    assert torch.equal(data.tensors[0], before)


def test_random_draws_leave_every_generator_as_it_was():
    def step(x):
        noise = torch.rand(3) + random.random() + float(np.random.rand())
        torch.manual_seed(123)
        return (x + noise.sum()).sum()

    x = torch.randn(3)
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    for device in ("meta", "cpu"):
        assert lessons_lib.diagnose(step, x, device=device).ran
        assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
        assert np.array_equal(np.random.get_state()[1], states[2])


def test_a_scheduler_and_a_grad_scaler_passed_in_are_copies_and_the_next_real_step_works():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def step(model, opt, sched, scaler, x, y):
        loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        opt.zero_grad()

    step(model, opt, sched, scaler, x, y)  # a real step first: the scaler holds its scale on the CPU
    before = _state(model, opt, sched, scaler)
    assert lessons_lib.diagnose(step, model, opt, sched, scaler, x, y).ran
    assert _same(before, _state(model, opt, sched, scaler)) and scaler.get_scale() == before[-1]["scale"]
    step(model, opt, sched, scaler, x, y)  # the reader's next real step (it failed on a meta scale tensor)
    assert all(p.device.type == "cpu" and torch.isfinite(p).all() for p in model.parameters())


def test_graphs_true_runs_nothing_twice_on_the_readers_objects():
    model, calls = nn.Linear(8, 8), []

    def step(x):
        calls.append(1)
        model(x).sum().backward()

    report = lessons_lib.diagnose(step, torch.randn(4, 8), graphs=True)
    assert report.ran and report.graph_report is not None and calls == [] and model.weight.grad is None


def test_a_greedy_generation_loop_ends_in_bounded_time_with_a_sentence(monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_OPS", 3000)  # a small budget keeps the test short; the default is the same

    class TinyLM(nn.Module):  # the reader's model, with its own loop over layers (not the loop that never ends)
        def __init__(self):
            super().__init__()
            self.emb, self.layers, self.head = nn.Embedding(50, 16), nn.ModuleList(nn.Linear(16, 16) for _ in
                                                                                      range(2)), nn.Linear(16, 50)

        def forward(self, idx):
            h = self.emb(idx)
            for layer in self.layers:
                h = layer(h).relu()
            return self.head(h)

    model = TinyLM()

    def generate(idx, eos=0):
        finished = torch.zeros(idx.shape[0], dtype=torch.bool, device=idx.device)
        while not finished.all():  # on meta .all() is a stand-in: False forever
            nxt = model(idx)[:, -1].argmax(-1)
            idx = torch.cat([idx, nxt[:, None]], 1)
            finished |= nxt == eos
        return idx

    report = lessons_lib.diagnose(generate, torch.zeros(2, 3, dtype=torch.long))
    assert not report.ran and not report.clean and "no verdict" in str(report).splitlines()[0]
    assert "while not finished.all():" in report.stopped and "3,000 ops" in report.stopped
    assert "test_untouched.py:" in report.stopped and "stand-in" in report.stopped


def test_a_loop_waiting_on_a_value_ends_under_the_sync_finders_too(monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_OPS", 2000)

    def grow(x):
        while x.norm().item() < 1:  # .item() is 0 on meta: forever
            x = x * 2
        return x

    from lessons_lib import syncs

    for tool in (syncs.cuda_syncs, syncs.syncs):
        with pytest.raises(ValueError, match=r"while x.norm\(\).item\(\) < 1:"):
            tool(grow, torch.zeros(3))  # 0 on the CPU too: the loop never ends


def test_an_lru_cached_helper_keeps_its_cache_free_of_meta_tensors():
    import functools

    @functools.lru_cache(maxsize=None)
    def causal_mask(T, device):
        return torch.ones(T, T, dtype=torch.bool, device=device).tril()

    def step(x):
        return x.masked_fill(~causal_mask(x.shape[-1], x.device), 0.0).sum()

    assert lessons_lib.diagnose(step, torch.randn(4, 4)).ran
    assert causal_mask.cache_info().currsize == 0  # the copy had its own cache
    assert causal_mask(4, torch.device("cpu")).device.type == "cpu"


@pytest.mark.parametrize("device", [None, "cpu"])
def test_lbfgs_runs_on_its_copy_with_its_own_param_list_and_a_writeable_array_is_copied(device):
    # LBFGS keeps the param list as self._params, which its __getstate__ leaves out; a numpy array the step writes
    model = nn.Linear(4, 1)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5)
    seen = np.zeros(3)
    before = _state(model, opt)

    def step(model, opt, x, y):
        def closure():
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss
        opt.step(closure)
        seen[0] += 1

    report = lessons_lib.diagnose(step, model, opt, torch.randn(8, 4), torch.randn(8, 1), device=device)
    assert report.ran and not report.error, str(report)
    assert _same(before, _state(model, opt)) and not opt.state and seen[0] == 0
