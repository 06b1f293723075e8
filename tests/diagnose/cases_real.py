"""Real-style steps (issue 32): training code written in the style of widely used public scripts (nanoGPT's train.py
and generate, the DCGAN and actor-critic examples, a Mixtral-style routed MoE, a ViT notebook cell, timm's
train_one_epoch, a trainer class, makemore's MLP). Each `# expect:` marker is a pitfall an expert sees in the code
as it stands, written down before diagnose ran on it (catalogue.py reads the markers). Sizes are small but keep each
step in the regime its original runs in; the step runs on meta, nothing is allocated.

Three cases reach their model through a closure or a bound method (vit_notebook_cell, trainer_method,
makemore_mlp_closure): they need diagnose to copy what a step reaches (issue 32 §1).
"""
from __future__ import annotations

import os
import tempfile
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical
from torch.utils.data import DataLoader, TensorDataset

from .real_models import AverageMeter, Discriminator, Generator, MnistNet, ResNetCifar, ViT, gpt_small


def case_gpt_grad_accumulation_best_checkpoint():
    """nanoGPT's loop: warm-up lr, an eval every few iterations that saves a checkpoint on the best val loss,
    gradient accumulation, clipping, AdamW, a log line every iteration. The data is a host array (a memmap)."""
    model = gpt_small(block_size=128, n_layer=6, n_head=6, n_embd=384)
    optimizer = optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    out_dir = tempfile.mkdtemp(prefix="diagnose-case-")
    block_size = model.config.block_size

    def get_batch(data, batch_size, device):
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    @torch.no_grad()
    def estimate_loss(model, splits, eval_iters, batch_size, device):
        out = {}
        model.eval()
        for split, data in splits.items():
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(data, batch_size, device)
                _, loss = model(X, Y)
                losses[k] = loss.item()  # expect: 06 host sync
            out[split] = losses.mean()
        model.train()
        return out

    def train(model, optimizer, train_data, val_data, max_iters=2, gradient_accumulation_steps=4, batch_size=12,
              eval_interval=2, eval_iters=2, log_interval=1, learning_rate=6e-4, warmup_iters=100):
        device = next(model.parameters()).device
        best_val_loss = 1e9
        X, Y = get_batch(train_data, batch_size, device)
        for iter_num in range(max_iters):
            lr = learning_rate * min(1.0, (iter_num + 1) / warmup_iters)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            if iter_num % eval_interval == 0:
                losses = estimate_loss(model, {"train": train_data, "val": val_data}, eval_iters, batch_size, device)
                if losses["val"] < best_val_loss:
                    best_val_loss = losses["val"]
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "iter_num": iter_num, "best_val_loss": best_val_loss}, os.path.join(out_dir, "ckpt.pt"))
            for micro_step in range(gradient_accumulation_steps):
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
                X, Y = get_batch(train_data, batch_size, device)
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if iter_num % log_interval == 0:
                lossf = loss.item() * gradient_accumulation_steps  # expect: 06 host sync
                print(f"iter {iter_num}: loss {lossf:.4f}")

    tokens = np.random.default_rng(0).integers(0, 65, 20000).astype(np.uint16)
    return train, (model, optimizer, tokens[:18000], tokens[18000:]), {}


def case_greedy_generation():
    """nanoGPT-style generation, greedy, stopping when every row has produced the end token (the model's lines
    it expects are marked in real_models.py)."""
    @torch.no_grad()
    def generate(model, idx, max_new_tokens=16, eos_id=0):
        finished = torch.zeros(idx.size(0), dtype=torch.bool, device=idx.device)
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= model.config.block_size else idx[:, -model.config.block_size:]
            logits, _ = model(idx_cond)
            next_id = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            idx = torch.cat((idx, next_id), dim=1)  # expect: 06 cat in a loop
            finished |= next_id.squeeze(1) == eos_id
            if finished.all():  # expect: 06 host sync
                break
        return idx

    model = gpt_small(block_size=64, n_layer=4, n_head=4, n_embd=256).eval()
    return generate, (model, torch.randint(1, 65, (4, 8))), {}


def case_dcgan():
    """The DCGAN example's loop: D on real, D on fake, G, with the logged numbers read every iteration."""
    nz = 64

    def train_epoch(netG, netD, optimizerG, optimizerD, dataloader, device):
        criterion = nn.BCELoss()
        G_losses, D_losses = [], []
        for i, (data, _) in enumerate(dataloader):
            netD.zero_grad()
            real_cpu = data.to(device)  # expect: 06 pageable transfer | 06 host sync
            b_size = real_cpu.size(0)
            label = torch.full((b_size,), 1.0, dtype=torch.float, device=device)
            output = netD(real_cpu).view(-1)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()  # expect: 06 host sync
            noise = torch.randn(b_size, nz, 1, 1, device=device)
            fake = netG(noise)
            label.fill_(0.0)
            output = netD(fake.detach()).view(-1)
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()  # expect: 06 host sync
            errD = errD_real + errD_fake
            optimizerD.step()
            netG.zero_grad()
            label.fill_(1.0)
            output = netD(fake).view(-1)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()  # expect: 06 host sync
            optimizerG.step()
            G_losses.append(errG.item())  # expect: 06 host sync
            D_losses.append(errD.item())  # expect: 06 host sync
        return G_losses, D_losses, (D_x, D_G_z1, D_G_z2)

    netG, netD = Generator(nz), Discriminator()
    optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loader = DataLoader(TensorDataset(torch.randn(128, 3, 64, 64), torch.zeros(128)), batch_size=64, shuffle=True)
    return train_epoch, (netG, netD, optimizerG, optimizerD, loader, torch.device("cuda")), {}


class _Pole:
    """A stand-in environment with CartPole's interface (4 numbers in, an action out), ten steps an episode."""

    def __init__(self):
        self.t = 0

    def reset(self):
        self.t = 0
        return np.zeros(4, dtype=np.float32)

    def step(self, action):
        self.t += 1
        return np.full(4, 0.1 * self.t * (1 if action else -1), dtype=np.float32), 1.0, self.t >= 10


def case_actor_critic():
    """The actor-critic example, ported to a GPU: one episode, then the update from its saved log-probs and values."""
    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, 128)
            self.action_head, self.value_head = nn.Linear(128, 2), nn.Linear(128, 1)
            self.saved_actions, self.rewards = [], []

        def forward(self, x):
            x = F.relu(self.affine1(x))
            return F.softmax(self.action_head(x), dim=-1), self.value_head(x)

    def run_episode(model, optimizer, env, gamma=0.99):
        device = next(model.parameters()).device
        state, ep_reward = env.reset(), 0.0
        for t in range(1, 10000):
            state = torch.from_numpy(state).float().unsqueeze(0).to(device)  # expect: 06 host sync
            probs, state_value = model(state)
            m = Categorical(probs)  # expect: 06 host sync | 04 launch-bound step
            action = m.sample()
            model.saved_actions.append((m.log_prob(action), state_value))  # expect: 06 host sync
            state, reward, done = env.step(action.item())  # expect: 06 host sync
            model.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        R, returns = 0.0, []
        for r in model.rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns, device=device)  # expect: 06 host sync
        returns = (returns - returns.mean()) / (returns.std() + 1e-8)
        policy_losses, value_losses = [], []
        for (log_prob, value), R in zip(model.saved_actions, returns):
            advantage = R - value.item()  # expect: 06 host sync
            policy_losses.append(-log_prob * advantage)
            value_losses.append(F.smooth_l1_loss(value, torch.tensor([[R]], device=device)))  # expect: 06 host sync | 06 loss per time step
        optimizer.zero_grad()
        loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
        loss.backward()
        optimizer.step()
        del model.rewards[:]
        del model.saved_actions[:]
        return ep_reward

    model = Policy()
    return run_episode, (model, optim.Adam(model.parameters(), lr=3e-2), _Pole()), {}


def case_routed_mixture_of_experts():
    """A Mixtral-style sparse MoE layer: top-2 routing, each expert run on the tokens routed to it, in a loop."""
    class Expert(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.w1, self.w3 = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
            self.w2 = nn.Linear(hidden, dim, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))  # expect: 03 GEMMs in a Python loop | 04 launch-bound step

    class SparseMoE(nn.Module):
        def __init__(self, dim=128, hidden=256, num_experts=8, top_k=2):
            super().__init__()
            self.num_experts, self.top_k = num_experts, top_k
            self.gate = nn.Linear(dim, num_experts, bias=False)
            self.experts = nn.ModuleList([Expert(dim, hidden) for _ in range(num_experts)])

        def forward(self, hidden_states):
            B, T, C = hidden_states.shape
            x = hidden_states.view(-1, C)
            router_logits = self.gate(x)
            routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
            routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
            out = torch.zeros_like(x)
            expert_mask = F.one_hot(selected, num_classes=self.num_experts).permute(2, 1, 0)
            for e in range(self.num_experts):
                idx, top_x = torch.where(expert_mask[e])  # expect: 06 host sync
                y = self.experts[e](x[top_x]) * routing_weights[top_x, idx, None]
                out.index_add_(0, top_x, y.to(x.dtype))
            return out.view(B, T, C), router_logits

    class TinyMoELM(nn.Module):
        def __init__(self, vocab=512, dim=128):
            super().__init__()
            self.emb, self.norm = nn.Embedding(vocab, dim), nn.LayerNorm(dim)
            self.moe, self.head = SparseMoE(dim), nn.Linear(dim, vocab)

        def forward(self, idx):
            h = self.emb(idx)
            moe_out, router_logits = self.moe(self.norm(h))
            return self.head(h + moe_out), router_logits

    def train_step(model, optimizer, idx, targets):
        logits, _router_logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    model = TinyMoELM()
    return train_step, (model, optim.AdamW(model.parameters(), lr=3e-4), torch.randint(0, 512, (4, 64)),
                        torch.randint(0, 512, (4, 64))), {}


def case_vit_notebook_cell():
    """A notebook's training cell: the model, optimizer and loader are the notebook's globals, the epoch a closure
    over them (the attention line it expects is marked in real_models.py)."""
    device = torch.device("cuda")  # the notebook's first cell; the model was moved there (here it stays on the CPU)
    model = ViT()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=3e-4)
    train_loader = DataLoader(TensorDataset(torch.randn(128, 3, 32, 32), torch.randint(0, 10, (128,))),
                              batch_size=64, shuffle=True)

    def train_one_epoch():
        model.train()
        running_loss, correct, total = 0.0, 0, 0
        for images, labels in train_loader:
            images, labels = images.to(device), labels.to(device)  # expect: 06 pageable transfer | 06 host sync
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running_loss += loss.item()  # expect: 06 host sync
            _, predicted = outputs.max(1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()  # expect: 06 host sync
        return running_loss / len(train_loader), 100.0 * correct / total

    return train_one_epoch, (), {}


def case_timm_train_one_epoch():
    """timm's train_one_epoch, reduced: autocast to float16, a GradScaler, clipping, a scheduler stepped per update
    and an AverageMeter fed a Python number every batch."""
    def train_one_epoch(epoch, model, loader, optimizer, loss_fn, lr_scheduler, loss_scaler, device):
        model.train()
        losses_m = AverageMeter()
        num_updates = epoch * len(loader)
        for batch_idx, (input, target) in enumerate(loader):
            input, target = input.to(device), target.to(device)  # expect: 06 pageable transfer | 06 host sync
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                output = model(input)
                loss = loss_fn(output, target)
            optimizer.zero_grad()
            loss_scaler.scale(loss).backward()
            loss_scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
            loss_scaler.step(optimizer)
            loss_scaler.update()
            losses_m.update(loss.item(), input.size(0))  # expect: 06 host sync
            num_updates += 1
            lr_scheduler.step()
        return OrderedDict([("loss", losses_m.avg), ("updates", num_updates)])

    model = ResNetCifar()
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
    loader = DataLoader(TensorDataset(torch.randn(256, 3, 32, 32), torch.randint(0, 10, (256,))), batch_size=128)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
    import warnings
    with warnings.catch_warnings():  # without CUDA the scaler disables itself, as it would on a CPU run
        warnings.simplefilter("ignore")
        scaler = torch.amp.GradScaler("cuda")
    return train_one_epoch, (0, model, loader, optimizer, nn.CrossEntropyLoss(), scheduler, scaler,
                             torch.device("cuda")), {}


def case_trainer_method():
    """A trainer object whose method is the step (Lightning's shape): it holds the model and optimizer, keeps a
    history, returns a Python number."""
    class Trainer:
        def __init__(self, model, device="cuda", lr=1.0):
            self.model, self.device = model, torch.device(device)
            self.optimizer = optim.Adadelta(model.parameters(), lr=lr)
            self.scheduler = optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.7)
            self.history = []

        def training_step(self, batch):
            data, target = batch
            data, target = data.to(self.device), target.to(self.device)  # expect: 06 pageable transfer | 06 host sync
            self.optimizer.zero_grad()
            output = self.model(data)
            loss = F.nll_loss(output, target)  # expect: 07 graph kept alive
            loss.backward()
            self.optimizer.step()
            self.history.append(loss)
            return loss.item()  # expect: 06 host sync

    trainer = Trainer(MnistNet())
    return trainer.training_step, ((torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))),), {}


def case_makemore_mlp_closure():
    """makemore's MLP as its notebook writes it: tensors for parameters, a step that closes over them, an update
    by hand, the log10 loss read every step."""
    g = torch.Generator().manual_seed(2147483647)
    Xtr, Ytr = torch.randint(0, 27, (2000, 3), generator=g), torch.randint(0, 27, (2000,), generator=g)
    C = torch.randn((27, 10), generator=g)
    W1, b1 = torch.randn((30, 200), generator=g) * 0.2, torch.randn(200, generator=g) * 0.01
    W2, b2 = torch.randn((200, 27), generator=g) * 0.01, torch.zeros(27)
    parameters = [C, W1, b1, W2, b2]
    for p in parameters:
        p.requires_grad = True
    lossi = []

    def train_step(i):
        ix = torch.randint(0, Xtr.shape[0], (32,))
        emb = C[Xtr[ix]]  # expect: 06 host sync
        h = torch.tanh(emb.view(-1, 30) @ W1 + b1)
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, Ytr[ix])  # expect: 06 host sync
        for p in parameters:
            p.grad = None
        loss.backward()
        lr = 0.1 if i < 100000 else 0.01
        for p in parameters:
            p.data += -lr * p.grad  # expect: 04 for-loop optimizer | 04 launch-bound step
        lossi.append(loss.log10().item())  # expect: 06 host sync

    return train_step, (0,), {}
