"""A probe, not a test (a machine's speed is no unit test): how long diagnose takes on a GPT-2-124M training step
on meta (issue 32: under 10 s; about 6 s before the step was copied whole). Prints the seconds and the head line.

    python -m tests.diagnose.probe_gpt2            # from the repository's root

The model is written here in nanoGPT's shape (12 layers, 12 heads, 768 wide, 50257 tokens, 1024 positions,
tied embeddings, SDPA attention, AdamW), batch 8: the step reaches it through a closure, the way a notebook's
training loop does, so the probe also times copying what a step reaches.
"""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d=768, heads=12):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50257, block=1024, layers=12, d=768):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    import lessons_lib

    with torch.device("meta"):
        model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=False)
    idx = torch.randint(0, 50257, (8, 1024))

    def step(x, y):
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    params = sum(p.numel() for p in model.parameters())
    t = time.perf_counter()
    report = lessons_lib.diagnose(step, idx, idx)
    took = time.perf_counter() - t
    print(f"GPT-2 ({params / 1e6:.0f}M parameters), batch 8 x 1024 on meta: diagnose took {took:.1f} s "
          f"(issue 32: under 10 s); {math.ceil(report.step.get('ops', 0))} ops a step")
    print(report.head().splitlines()[0])


if __name__ == "__main__":
    main()
