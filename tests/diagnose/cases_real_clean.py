"""Held-out clean steps in the style of public training scripts (issue 32): what their authors did right. An expert
sees no pitfall of the course in them; diagnose must report nothing. Data is already on the device (a prefetcher,
a device-resident dataset), as the fast versions of these scripts keep it.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from .real_models import MnistNet, ResNetCifar, RNNModel, gpt_small, repackage_hidden


def case_gpt_step_autocast_fused_adamw():
    """nanoGPT's inner step as it runs on an A100: bfloat16 autocast, two micro-batches, clipping, fused AdamW."""
    def train_step(model, optimizer, X, Y, gradient_accumulation_steps=2):
        for micro_step in range(gradient_accumulation_steps):
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                logits, loss = model(X[micro_step], Y[micro_step])
                loss = loss / gradient_accumulation_steps
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    model = gpt_small(block_size=128, n_layer=6, n_head=6, n_embd=384)
    optimizer = optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    return train_step, (model, optimizer, torch.randint(0, 65, (2, 12, 128)), torch.randint(0, 65, (2, 12, 128))), {}


def case_validate_inference_mode():
    """timm's validate, reduced: inference mode, the correct count kept on the device, one read at the end."""
    def validate(model, loader):
        model.eval()
        device = next(model.parameters()).device
        correct, total = torch.zeros((), dtype=torch.long, device=device), 0
        with torch.inference_mode():
            for input, target in loader:
                output = model(input)
                correct += (output.argmax(dim=-1) == target).sum()
                total += target.size(0)
        return correct.item() / total

    batches = [(torch.randn(256, 3, 32, 32), torch.randint(0, 10, (256,))) for _ in range(2)]
    return validate, (ResNetCifar(), batches), {}


def case_word_language_model_optim_sgd():
    """The word language model with torch.optim.SGD (foreach on CUDA), the loss summed on the device."""
    def train(model, optimizer, train_data, bptt=35, batch_size=20):
        model.train()
        total_loss = torch.zeros((), device=train_data.device)
        hidden = model.init_hidden(batch_size)
        for i in range(0, train_data.size(0) - 1, bptt):
            data, targets = train_data[i:i + bptt], train_data[i + 1:i + 1 + bptt].reshape(-1)
            hidden = repackage_hidden(hidden)
            optimizer.zero_grad(set_to_none=True)
            output, hidden = model(data, hidden)
            loss = F.nll_loss(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            optimizer.step()
            total_loss += loss.detach()
        return total_loss

    model = RNNModel()
    return train, (model, optim.SGD(model.parameters(), lr=20.0), torch.randint(0, 10000, (71, 20))), {}


def case_clip_contrastive_step():
    """A CLIP-style contrastive step on precomputed features: normalised embeddings, one logits matrix, the loss
    both ways, labels made on the device."""
    class TwoTowers(nn.Module):
        def __init__(self, image_dim=2048, vocab=10000, dim=512):
            super().__init__()
            self.image_proj = nn.Sequential(nn.Linear(image_dim, dim), nn.GELU(), nn.Linear(dim, dim))
            self.token_emb = nn.Embedding(vocab, dim)
            self.text_proj = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
            self.logit_scale = nn.Parameter(torch.tensor(2.659))

        def forward(self, image_feats, tokens):
            image = F.normalize(self.image_proj(image_feats), dim=-1)
            text = F.normalize(self.text_proj(self.token_emb(tokens).mean(dim=1)), dim=-1)
            return self.logit_scale.exp() * image @ text.t()

    def train_step(model, optimizer, image_feats, tokens):
        logits = model(image_feats, tokens)
        labels = torch.arange(logits.size(0), device=logits.device)
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    model = TwoTowers()
    return train_step, (model, optim.AdamW(model.parameters(), lr=5e-4), torch.randn(1024, 2048),
                        torch.randint(0, 10000, (1024, 32))), {}


def case_mnist_device_resident():
    """The MNIST example with the dataset on the device and a per-epoch scheduler, losses kept detached."""
    def train(model, optimizer, data, target, batch_size=256):
        model.train()
        losses = []
        perm = torch.randperm(data.size(0), device=data.device)
        for start in range(0, data.size(0), batch_size):
            idx = perm[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = F.nll_loss(model(data[idx]), target[idx])
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        return torch.stack(losses)

    model = MnistNet()
    return train, (model, optim.Adadelta(model.parameters(), lr=1.0), torch.randn(512, 1, 28, 28),
                   torch.randint(0, 10, (512,))), {}


def case_compiled_rmsnorm_gelu():
    """An RMSNorm and a tanh-GELU written out in one function that the author put under torch.compile."""
    @torch.compile
    def rmsnorm_gelu(x, weight, eps=1e-6):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

    class Net(nn.Module):
        def __init__(self, dim=1024):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.weight = nn.Parameter(torch.ones(4 * dim))

        def forward(self, x):
            return self.fc2(rmsnorm_gelu(self.fc1(x), self.weight))

    def train_step(model, optimizer, x, y):
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    model = Net()
    return train_step, (model, optim.AdamW(model.parameters(), lr=1e-3), torch.randn(2048, 1024),
                        torch.randn(2048, 1024)), {}
