"""The "bring your own model" block's example step (workshop/README.md): a step file as participants write it.

    python -m lessons_lib.diagnose workshop/byom_step.py:train_step

The step takes its model and optimizer as arguments, so diagnose can copy them to meta (shapes only: nothing is
allocated and nothing of yours changes). example_inputs() returns those arguments. Replace the model by your own.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Sequential(nn.Linear(784, 1024), nn.GELU(), nn.Linear(1024, 10))  # your model here (an MNIST MLP)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []


def train_step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())  # log every step


def example_inputs():
    return model, opt, torch.randn(256, 784), torch.randint(0, 10, (256,))
