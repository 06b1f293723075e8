"""More real-style steps (issue 32), as cases_real.py: the LSTMCell sequence model trained with LBFGS, the word
language model's hand-written SGD, the VAE example, makemore's GRU, the char-RNN tutorial, a CapsNet, a YOLO-style
head, and a fastai-style fit that keeps its losses. Markers written before diagnose ran on them.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from .real_models import RNNModel, repackage_hidden


def case_lbfgs_sequence():
    """The time-sequence example: two LSTMCells over time, float64, LBFGS with a closure that prints the loss."""
    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm1, self.lstm2 = nn.LSTMCell(1, 51), nn.LSTMCell(51, 51)
            self.linear = nn.Linear(51, 1)

        def forward(self, input):
            outputs = []
            device = self.linear.weight.device
            h_t = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)  # expect: 06 host sync | 06 allocation churn
            c_t = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)  # expect: 06 host sync | 06 allocation churn
            h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)  # expect: 06 host sync | 06 allocation churn
            c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double).to(device)  # expect: 06 host sync | 06 allocation churn
            for input_t in input.split(1, dim=1):
                h_t, c_t = self.lstm1(input_t, (h_t, c_t))  # expect: 04 launch-bound step
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                outputs += [self.linear(h_t2)]
            return torch.cat(outputs, dim=1)

    def train_step(seq, optimizer, input, target):
        criterion = nn.MSELoss()

        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            print("loss:", loss.item())  # expect: 06 host sync
            loss.backward()
            return loss
        optimizer.step(closure)  # expect: 06 host sync

    seq = Sequence().double()
    data = torch.sin(torch.arange(8 * 41, dtype=torch.double).view(8, 41) / 4.0)
    return train_step, (seq, optim.LBFGS(seq.parameters(), lr=0.8), data[:, :-1], data[:, 1:]), {}


def case_word_language_model_sgd():
    """The word language model's train(): truncated BPTT over an LSTM, clipping, SGD written by hand."""
    def train(model, train_data, lr=20.0, bptt=35, clip=0.25, batch_size=20):
        model.train()
        total_loss = 0.0
        criterion = nn.NLLLoss()
        hidden = model.init_hidden(batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
            seq_len = min(bptt, len(train_data) - 1 - i)
            data, targets = train_data[i:i + seq_len], train_data[i + 1:i + 1 + seq_len].reshape(-1)
            hidden = repackage_hidden(hidden)
            model.zero_grad()
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)  # expect: 04 for-loop optimizer
            total_loss += loss.item()  # expect: 06 host sync
        return total_loss

    return train, (RNNModel(), torch.randint(0, 10000, (71, 20))), {}


def case_vae():
    """The VAE example: MNIST-sized, the KL term written out, the loss summed into a Python number every batch."""
    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc21, self.fc22 = nn.Linear(784, 400), nn.Linear(400, 20), nn.Linear(400, 20)
            self.fc3, self.fc4 = nn.Linear(20, 400), nn.Linear(400, 784)

        def encode(self, x):
            h1 = F.relu(self.fc1(x))
            return self.fc21(h1), self.fc22(h1)

        def reparameterize(self, mu, logvar):
            std = torch.exp(0.5 * logvar)
            eps = torch.randn_like(std)
            return mu + eps * std

        def decode(self, z):
            return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

        def forward(self, x):
            mu, logvar = self.encode(x.view(-1, 784))
            return self.decode(self.reparameterize(mu, logvar)), mu, logvar

    def loss_function(recon_x, x, mu, logvar):
        BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
        KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())  # expect: 04 elementwise chain | 04 launch-bound step
        return BCE + KLD

    def train(model, optimizer, train_loader, device):
        model.train()
        train_loss = 0
        for batch_idx, (data, _) in enumerate(train_loader):
            data = data.to(device)  # expect: 06 pageable transfer | 06 host sync
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()  # expect: 06 host sync
            optimizer.step()
        return train_loss / len(train_loader.dataset)

    model = VAE()
    loader = DataLoader(TensorDataset(torch.rand(256, 1, 28, 28), torch.zeros(256)), batch_size=128, shuffle=True)
    return train, (model, optim.Adam(model.parameters(), lr=1e-3), loader, torch.device("cuda")), {}


def case_makemore_gru():
    """makemore's GRU: a cell written by hand, run over the characters in a Python loop; batches from an
    endless loader on the host, moved each step."""
    class GRUCell(nn.Module):
        def __init__(self, n_embd, n_embd2):
            super().__init__()
            self.xh_to_z = nn.Linear(n_embd + n_embd2, n_embd2)
            self.xh_to_r = nn.Linear(n_embd + n_embd2, n_embd2)
            self.xh_to_hbar = nn.Linear(n_embd + n_embd2, n_embd2)

        def forward(self, xt, hprev):
            xh = torch.cat([xt, hprev], dim=1)
            r = torch.sigmoid(self.xh_to_r(xh))
            xhr = torch.cat([xt, r * hprev], dim=1)
            hbar = torch.tanh(self.xh_to_hbar(xhr))
            z = torch.sigmoid(self.xh_to_z(xh))
            ht = (1 - z) * hprev + z * hbar  # expect: 04 elementwise chain | 04 launch-bound step
            return ht

    class RNN(nn.Module):
        def __init__(self, vocab_size=27, n_embd=64, n_embd2=64):
            super().__init__()
            self.start = nn.Parameter(torch.zeros(1, n_embd2))
            self.wte = nn.Embedding(vocab_size, n_embd)
            self.cell = GRUCell(n_embd, n_embd2)
            self.lm_head = nn.Linear(n_embd2, vocab_size)

        def forward(self, idx, targets=None):
            b, t = idx.size()
            emb = self.wte(idx)
            hprev = self.start.expand((b, -1))
            hiddens = []
            for i in range(t):
                hprev = self.cell(emb[:, i, :], hprev)
                hiddens.append(hprev)
            logits = self.lm_head(torch.stack(hiddens, 1))
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            return logits, loss

    class InfiniteDataLoader:
        def __init__(self, dataset, **kwargs):
            sampler = RandomSampler(dataset, replacement=True, num_samples=int(1e10))
            self.data_iter = iter(DataLoader(dataset, sampler=sampler, **kwargs))

        def next(self):
            return next(self.data_iter)

    def train_step(model, optimizer, loader, device):
        batch = [t.to(device) for t in loader.next()]  # expect: 06 host sync
        X, Y = batch
        logits, loss = model(X, Y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    model = RNN()
    optimizer = optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8)
    words = TensorDataset(torch.randint(0, 27, (512, 16)), torch.randint(0, 27, (512, 16)))
    return train_step, (model, optimizer, InfiniteDataLoader(words, batch_size=32), torch.device("cuda")), {}


def case_char_rnn_tutorial():
    """The 'generating names' tutorial: an RNN of Linear layers, one character at a time, the loss added up per
    character, SGD by hand."""
    class RNN(nn.Module):
        def __init__(self, n_categories=18, input_size=59, hidden_size=128, output_size=59):
            super().__init__()
            self.hidden_size = hidden_size
            self.i2h = nn.Linear(n_categories + input_size + hidden_size, hidden_size)
            self.i2o = nn.Linear(n_categories + input_size + hidden_size, output_size)
            self.o2o = nn.Linear(hidden_size + output_size, output_size)
            self.dropout, self.softmax = nn.Dropout(0.1), nn.LogSoftmax(dim=1)

        def forward(self, category, input, hidden):
            input_combined = torch.cat((category, input, hidden), 1)  # expect: 04 launch-bound step
            hidden = self.i2h(input_combined)
            output = self.i2o(input_combined)
            output = self.o2o(torch.cat((hidden, output), 1))
            output = self.softmax(self.dropout(output))
            return output, hidden

        def init_hidden(self, device):
            return torch.zeros(1, self.hidden_size, device=device)

    def train(rnn, category_tensor, input_line_tensor, target_line_tensor, learning_rate=0.0005):
        criterion = nn.NLLLoss()
        target_line_tensor = target_line_tensor.unsqueeze(-1)
        hidden = rnn.init_hidden(category_tensor.device)
        rnn.zero_grad()
        loss = 0
        for i in range(input_line_tensor.size(0)):
            output, hidden = rnn(category_tensor, input_line_tensor[i], hidden)
            l = criterion(output, target_line_tensor[i])  # expect: 06 loss per time step
            loss += l
        loss.backward()
        for p in rnn.parameters():
            p.data.add_(p.grad.data, alpha=-learning_rate)  # expect: 04 for-loop optimizer
        return output, loss.item() / input_line_tensor.size(0)  # expect: 06 host sync

    line = torch.zeros(8, 1, 59)
    line[torch.arange(8), 0, torch.randint(0, 59, (8,))] = 1
    return train, (RNN(), torch.eye(18)[3:4], line, torch.randint(0, 59, (8,))), {}


def case_capsnet_routing():
    """A CapsNet as its popular re-implementations write it: the prediction vectors by a broadcast multiply and
    a sum, dynamic routing, the margin loss written out."""
    class CapsNet(nn.Module):
        def __init__(self, routing_iters=3):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 256, 9)
            self.primary = nn.Conv2d(256, 32 * 8, 9, stride=2)
            self.W = nn.Parameter(0.01 * torch.randn(1, 1152, 10, 16, 8))
            self.routing_iters = routing_iters

        @staticmethod
        def squash(s, dim=-1):
            sq = (s ** 2).sum(dim=dim, keepdim=True)
            return sq / (1 + sq) * s / torch.sqrt(sq + 1e-8)

        def forward(self, x):
            B = x.size(0)
            u = self.primary(F.relu(self.conv1(x))).view(B, 32, 8, 6, 6).permute(0, 1, 3, 4, 2).reshape(B, 1152, 8)
            u = self.squash(u)
            u_hat = (self.W * u[:, :, None, None, :]).sum(dim=-1)  # expect: 01 contraction by broadcast
            b = torch.zeros(B, 1152, 10, device=x.device)
            for i in range(self.routing_iters):
                c = F.softmax(b, dim=2)
                v = self.squash((c.unsqueeze(-1) * u_hat).sum(dim=1))
                if i < self.routing_iters - 1:
                    b = b + (u_hat * v.unsqueeze(1)).sum(dim=-1)
            return v

    def train_step(model, optimizer, images, labels):
        lengths = model(images).norm(dim=-1)
        t = F.one_hot(labels, 10).float()
        left = F.relu(0.9 - lengths) ** 2
        right = F.relu(lengths - 0.1) ** 2
        loss = (t * left + 0.5 * (1.0 - t) * right).sum(dim=1).mean()  # expect: 04 elementwise chain
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    model = CapsNet()
    return train_step, (model, optim.Adam(model.parameters()), torch.randn(16, 1, 28, 28),
                        torch.randint(0, 10, (16,))), {}


def case_yolo_head_new_tensor():
    """A YOLO-style detection head that builds its anchor tensor from Python numbers on every forward."""
    class YOLOLayer(nn.Module):
        def __init__(self, anchors, num_classes=4):
            super().__init__()
            self.anchors, self.na, self.no = anchors, len(anchors), num_classes + 5

        def forward(self, x, img_size):
            B, _, ny, nx = x.shape
            stride = img_size // ny
            p = x.view(B, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            anchor_grid = x.new_tensor([(w / stride, h / stride) for w, h in self.anchors]).view(1, self.na, 1, 1, 2)  # expect: 06 host sync
            yv, xv = torch.meshgrid(torch.arange(ny, device=x.device), torch.arange(nx, device=x.device), indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
            xy = (p[..., :2].sigmoid() + grid) * stride
            wh = p[..., 2:4].exp() * anchor_grid * stride
            return torch.cat((xy, wh, p[..., 4:]), -1)

    class TinyYOLO(nn.Module):
        def __init__(self, anchors=((10, 13), (16, 30), (33, 23))):
            super().__init__()
            chans, layers = (3, 32, 64, 128, 256, 512), []
            for cin, cout in zip(chans, chans[1:]):
                layers.append(nn.Sequential(nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout),
                                            nn.LeakyReLU(0.1)))
            self.stages = nn.ModuleList(layers)
            self.head16, self.head8 = nn.Conv2d(256, 3 * 9, 1), nn.Conv2d(512, 3 * 9, 1)
            self.yolo16, self.yolo8 = YOLOLayer(anchors), YOLOLayer(anchors)

        def forward(self, x):
            img_size, feats = x.shape[-1], []
            for stage in self.stages:
                x = stage(x)
                feats.append(x)
            return [self.yolo16(self.head16(feats[-2]), img_size), self.yolo8(self.head8(feats[-1]), img_size)]

    def train_step(model, optimizer, imgs, targets):
        preds = model(imgs)
        loss = sum(F.mse_loss(p[..., :4], t[..., :4]) + F.binary_cross_entropy_with_logits(p[..., 4:], t[..., 4:])
                   for p, t in zip(preds, targets))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    model = TinyYOLO()
    targets = [torch.rand(16, 3, 16, 16, 9), torch.rand(16, 3, 8, 8, 9)]
    return train_step, (model, optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True),
                        torch.randn(16, 3, 256, 256), targets), {}


def case_fit_keeps_losses():
    """A fastai-style fit: batches already on the device, every step's loss kept in a list, averaged at the end."""
    def fit(model, loss_func, opt, train_dl, epochs=1):
        losses = []
        for epoch in range(epochs):
            model.train()
            for xb, yb in train_dl:
                pred = model(xb)
                loss = loss_func(pred, yb)  # expect: 07 graph kept alive
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss)
        return torch.stack(losses).mean().item()

    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10))
    train_dl = [(torch.randn(1024, 784), torch.randint(0, 10, (1024,))) for _ in range(3)]
    return fit, (model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.1), train_dl), {}
