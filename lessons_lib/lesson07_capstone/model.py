"""The capstone's model: one small training setup with the pitfalls of lessons 01-06 in it, and its fixes.

Each pitfall is a pair of functions below: the forum's form and its fix, computing the same numbers.
`Block(fixes)` composes them, so any set of fixes can be switched on (the waterfall, the explorer);
`Model(False)` has none, `Model(True)` every one. `FIXES` names each fix, in the order the notebook
applies them, and the lesson that explains it; the training loops hold the loop's own pitfalls.
Shapes: B batch, T tokens, C = H*D channels, H heads, D head size, E experts, K classes.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..grouped_linear import GroupedLinear

FIXES = {  # in the notebook's order; each one cumulative on the ones before
    "gemm": "one GEMM for the q, k, v projections of every head, and one for the heads' output projection, "
            "instead of four broadcast matmuls (lesson 01)",
    "grouped": "GroupedLinear instead of a loop over small Linears (lesson 03)",
    "fused": "the norm and the activation as built-in ops instead of elementwise chains (lesson 04)",
    "saved": "attention by scaled_dot_product_attention: no (B, H, T, T) matrix kept for backward (lesson 02)",
    "loop": "the loop: the batch's rows indexed on the device in one op, no mask, losses kept on the device, "
            "one cat at the end, and one fused optimizer update (lessons 06 and 04)",
}
# The model's default shape, by device. CPU: small, but wide (C=256) over few tokens (T=4), so that the
# broadcast's per-row work on the weights (a copy of each forward, a gradient of each and its sum backward:
# batch x C^2 each) weighs against the GEMMs (batch x T x C^2). GPU: 16 tokens, batch 64, where a small model's
# step lives on a big GPU: the original is bound by its ~210 kernel launches a step (on a T4 by its bytes), and
# the roofline's floors (T4, A100, H100) put the fixed step as one CUDA graph 8.6x ahead
# (tests/lesson07/test_gpu_claims.py).
SHAPE = {"cpu": dict(C=256, H=16, E=16, T=4, batch=32), "cuda": dict(C=256, H=16, E=16, T=16, batch=64)}


def shape(device=None) -> dict:
    """The default shape on `device` (a CUDA GPU, or anything else: the CPU's)."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    return dict(SHAPE["cuda" if dev.type == "cuda" else "cpu"])


# === the pitfalls as a forum post writes them, and their fixes ======================================

def qkv_broadcast(x, wq, wk, wv):                    # x (B, T, C); w* (H, C, D): per-head weights
    xh = x.unsqueeze(1)                              # (B, 1, T, C)
    # (B, 1, T, C) @ (H, C, D): matmul expands both sides to (B, H, ...) and copies them, then one bmm
    return xh @ wq, xh @ wk, xh @ wv                 # 3 x (B, H, T, D)


def qkv_one_gemm(x, w, H):                           # x (B, T, C); w (3C, C): nn.Linear's weight
    B, T, C = x.shape
    qkv = F.linear(x, w).view(B, T, 3, H, C // H)    # one (B*T, C) @ (C, 3C) GEMM
    return qkv.permute(2, 0, 3, 1, 4).unbind(0)      # 3 x (B, H, T, D), views


def heads_out_broadcast(y, wo):                      # y (B, H, T, D); wo (H, D, C): per-head output weights
    # (B, H, T, D) @ (H, D, C): wo copied per batch row, a (B, H, T, C) result, then summed over the heads
    return (y @ wo).sum(1)                           # (B, T, C)


def heads_out_one_gemm(y, w):                        # y (B, H, T, D); w (C, C): nn.Linear's weight
    B, H, T, D = y.shape
    return F.linear(y.transpose(1, 2).reshape(B, T, H * D), w)  # one (B*T, C) @ (C, C) GEMM


def attention_kept(q, k, v):                         # (B, H, T, D) each
    att = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)  # (B, H, T, T), kept for backward
    return att @ v                                   # (B, H, T, D)


def attention_sdpa(q, k, v):                         # (B, H, T, D) each
    return F.scaled_dot_product_attention(q, k, v)   # nothing (B, H, T, T) saved


def norm_by_hand(x, g, b, eps=1e-5):                 # x (B, T, C); g, b (C,)
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * g + b  # an op per term; backward keeps several (counted in 3)


def gelu_chain(x):
    # hand-written tanh GELU: an elementwise op per term, several kept for backward (the notebook counts them)
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def experts_loop(h, experts):                        # h (B, T, C); E Linears of C/E -> C/E
    parts = [lin(c) for lin, c in zip(experts, h.chunk(len(experts), -1))]   # E x (B, T, C/E)
    return torch.cat(parts, dim=-1)                  # (B, T, C)


def experts_grouped(h, experts):                     # one GroupedLinear(E, C/E, C/E): one bmm
    return experts(h)                                # (B, T, C)


# === the block and the model ==========================================================================

def _fixes(fixes) -> frozenset:
    """True (every fix), False or None (none), one fix's name, or a collection of them."""
    if fixes is True:
        return frozenset(FIXES)
    if isinstance(fixes, str):  # Model(fixed="gemm"): one name, not its letters
        fixes = (fixes,)
    if fixes is not None and fixes is not False and not isinstance(fixes, (set, frozenset, list, tuple, dict)):
        raise ValueError(f"fixed={fixes!r}: pass True, False, or a set of fix names from {list(FIXES)}.")
    fixes = frozenset(fixes or ())
    unknown = fixes - set(FIXES)
    if unknown:
        raise ValueError(f"Unknown fix(es) {sorted(map(str, unknown))}; choose from {list(FIXES)}.")
    return fixes


def check_dims(C, H, E, K=4) -> None:
    """One line saying what to change, before any tensor is made."""
    for name, v, what in (("C", C, "channels"), ("H", H, "heads"), ("E", E, "experts"), ("K", K, "classes")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}: the {what} must be a whole number of at least 1.")
    if C % H or C % E:
        raise ValueError(f"channels C={C} must be divisible by the heads H={H} and the experts E={E}.")


class Block(nn.Module):
    """norm -> per-head attention and its output projection -> GELU -> experts -> a Linear, with a residual.
    `fixes`: which of FIXES this block uses (True: all). `qkv`: your own q, k, v projection, called as
    qkv(h, w, H) with w the (3C, C) weight of nn.Linear(C, 3C) (the exercise: write it as one GEMM);
    with it the block holds that Linear whatever `fixes` says."""

    def __init__(self, C=256, H=16, E=16, fixes=(), dtype=None, qkv=None):
        super().__init__()
        check_dims(C, H, E)
        if qkv is not None and not callable(qkv):
            raise ValueError(f"qkv={qkv!r}: pass a function qkv(h, w, H) returning q, k, v, or leave it out.")
        self.fixes, self.H, self.D, self.E, self.qkv_fn = _fixes(fixes), H, C // H, E, qkv
        if "fused" in self.fixes:
            self.norm = nn.LayerNorm(C, dtype=dtype)
        else:
            self.g, self.b = nn.Parameter(torch.ones(C, dtype=dtype)), nn.Parameter(torch.zeros(C, dtype=dtype))
        if "gemm" in self.fixes or qkv is not None:
            self.qkv = nn.Linear(C, 3 * C, bias=False, dtype=dtype)
        else:
            self.wq, self.wk, self.wv = (nn.Parameter(torch.randn(H, C, C // H, dtype=dtype) / C ** 0.5)
                                         for _ in range(3))
        if "gemm" in self.fixes:
            self.proj = nn.Linear(C, C, bias=False, dtype=dtype)
        else:
            self.wo = nn.Parameter(torch.randn(H, C // H, C, dtype=dtype) / C ** 0.5)
        if "grouped" in self.fixes:
            self.experts = GroupedLinear(E, C // E, C // E, strategy="bmm", dtype=dtype)
        else:
            self.experts = nn.ModuleList(nn.Linear(C // E, C // E, dtype=dtype) for _ in range(E))
        self.out = nn.Linear(C, C, dtype=dtype)

    def forward(self, x):                                          # (B, T, C)
        B, T, C = x.shape
        fx = self.fixes
        h = self.norm(x) if "fused" in fx else norm_by_hand(x, self.g, self.b)
        if self.qkv_fn is not None:
            q, k, v = self.qkv_fn(h, self.qkv.weight, self.H)
        else:
            q, k, v = qkv_one_gemm(h, self.qkv.weight, self.H) if "gemm" in fx else qkv_broadcast(h, self.wq, self.wk,
                                                                                                   self.wv)
        y = (attention_sdpa if "saved" in fx else attention_kept)(q, k, v)      # (B, H, T, D)
        y = heads_out_one_gemm(y, self.proj.weight) if "gemm" in fx else heads_out_broadcast(y, self.wo)  # (B, T, C)
        h = F.gelu(y, approximate="tanh") if "fused" in fx else gelu_chain(y)
        h = experts_grouped(h, self.experts) if "grouped" in fx else experts_loop(h, self.experts)
        return x + self.out(h)                                                   # (B, T, C)


class Model(nn.Module):
    """Embedding -> block -> mean-pool readout: classify which of K patterns a noisy sequence holds.
    fixed: True (every fix), False (none), one of FIXES' names or a collection of them. qkv: your own q, k, v
    projection (Block's docstring)."""

    def __init__(self, fixed=False, C=256, H=16, E=16, K=4, dtype=None, qkv=None):
        super().__init__()
        check_dims(C, H, E, K)
        self.fixed = _fixes(fixed)
        self.inp = nn.Linear(8, C, dtype=dtype)
        self.block = Block(C, H, E, self.fixed, dtype, qkv)
        self.head = nn.Linear(C, K, dtype=dtype)

    def forward(self, x):                                          # (B, T, 8)
        return self.head(self.block(self.inp(x)).mean(1))          # (B, K)

    def dims(self) -> dict:
        """Its shape: C, H, E, K (what copy_weights and the checker compare)."""
        b = self.block
        return {"C": self.inp.out_features, "H": b.H, "E": b.E, "K": self.head.out_features}


def SlowBlock(C=256, H=16, E=16, dtype=None) -> Block:
    return Block(C, H, E, (), dtype)


def FixedBlock(C=256, H=16, E=16, dtype=None) -> Block:
    return Block(C, H, E, True, dtype)


@torch.no_grad()
def copy_weights(src: Model, dst: Model) -> Model:
    """Give `dst` exactly `src`'s parameters, whatever fixes each uses (the layouts are converted). The two must
    have the same shape (C, H, E, K): a different head count would scramble the heads silently."""
    if src.dims() != dst.dims():
        raise ValueError(f"copy_weights: the models differ in shape ({_words(src.dims())} against "
                         f"{_words(dst.dims())}); build the second with the first's C, H, E and K.")
    a, b = src.block, dst.block
    for name in ("inp", "head"):
        getattr(dst, name).load_state_dict(getattr(src, name).state_dict())
    b.out.load_state_dict(a.out.state_dict())
    g, bias = (a.norm.weight, a.norm.bias) if hasattr(a, "norm") else (a.g, a.b)
    (b.norm.weight if hasattr(b, "norm") else b.g).copy_(g)
    (b.norm.bias if hasattr(b, "norm") else b.b).copy_(bias)
    if hasattr(a, "qkv"):  # (3C, C) rows ordered (3, H, D) -> three (H, C, D)
        w = a.qkv.weight.view(3, a.H, a.D, -1).transpose(-1, -2)
    else:
        w = torch.stack((a.wq, a.wk, a.wv))                       # (3, H, C, D)
    if hasattr(b, "qkv"):
        b.qkv.weight.copy_(w.transpose(-1, -2).reshape(b.qkv.weight.shape))
    else:
        for dst_w, src_w in zip((b.wq, b.wk, b.wv), w):
            dst_w.copy_(src_w)
    wo = a.proj.weight.t().reshape(a.H, a.D, -1) if hasattr(a, "proj") else a.wo   # (H, D, C)
    if hasattr(b, "proj"):
        b.proj.weight.copy_(wo.reshape(-1, wo.shape[-1]).t())
    else:
        b.wo.copy_(wo)
    ws, bs = _expert_params(a)
    if isinstance(b.experts, GroupedLinear):
        b.experts.weight.copy_(ws)
        b.experts.bias.copy_(bs)
    else:
        for e, lin in enumerate(b.experts):
            lin.weight.copy_(ws[e])
            lin.bias.copy_(bs[e])
    return dst


def _words(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def _expert_params(block):
    """(E, out, in) weights and (E, out) biases, from either form."""
    if isinstance(block.experts, GroupedLinear):
        return block.experts.weight, block.experts.bias
    return (torch.stack([lin.weight for lin in block.experts]), torch.stack([lin.bias for lin in block.experts]))


def make_data(n=256, T=4, K=4, seed=0, dtype=torch.float32):
    """A synthetic task it learns visibly: each class is a fixed random pattern plus noise."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(K, T, 8, generator=g)
    y = torch.randint(0, K, (n,), generator=g)
    x = patterns[y] + 1.0 * torch.randn(n, T, 8, generator=g)
    return x.to(dtype), y


# === the training loops =================================================================================

def batches(n, steps, batch, seed=0, device=None):
    """The rows of each step's batch: a shuffled order, fixed by the seed, the same for both loops. With
    `device`, the order is moved there once (one copy, queued) and each batch is a slice of it on the device;
    torch.randperm(n, device=device) would make it there outright, in another order than the host's.
    Both loops take their batches here, so their steps and batch are checked here, before anything runs."""
    for name, v, least in (("steps", steps, 1), ("batch", batch, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ValueError(f"{name}={v!r}: pass a whole number of at least {least}.")
    if batch > n:
        raise ValueError(f"batch={batch} is more rows than the data holds ({n}): pass batch <= len(x).")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    if device is not None:
        order = order.to(device, non_blocking=True)
    return [order[(s * batch) % n:][:batch] for s in range(steps)]


def slow_optimizer(model, lr=1e-2):
    """The forum's optimizer: SGD with momentum, its defaults. On a CPU that is a for loop over the parameters
    (three ops each); on CUDA SGD already defaults to foreach (torch/optim/optimizer.py,
    _default_to_fused_or_foreach), so that pitfall is a CPU one."""
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def fixed_optimizer(model, lr=1e-2):
    """SGD with momentum as one fused op (torch._fused_sgd_), its learning rate a 0-dim tensor on the
    parameters' device: a CUDA graph can capture it, and a scheduler can copy_ a new value in (the CUDA
    kernel reads the lr as a float32 tensor: FusedSgdKernel.cu; float64 elsewhere, so that float64 checks
    match a Python float lr exactly). meta has no fused kernel: foreach there, one op per update too."""
    p = next(model.parameters())
    if p.device.type == "meta":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, foreach=True)
    lr_t = torch.tensor(lr, dtype=torch.float32 if p.device.type == "cuda" else torch.float64, device=p.device)
    return torch.optim.SGD(model.parameters(), lr=lr_t, momentum=0.9, fused=True)


def optimizer(model, lr=1e-2):
    """The optimizer `train` builds for this model's loop; build one and pass it (`opt=`) to keep it across
    calls, as a training script does (a new one each call starts every call from its first step)."""
    return (fixed_optimizer if "loop" in model.fixed else slow_optimizer)(model, lr)


def slow_train(model, x, y, steps=20, batch=32, lr=1e-2, opt=None):
    opt = opt or slow_optimizer(model, lr)
    losses, outs = [], torch.empty(0, device=x.device, dtype=x.dtype)
    for idx in batches(len(x), steps, batch):
        xb = torch.stack([x[j] for j in idx])                           # one sample at a time, as a
        yb = torch.stack([y[j] for j in idx])                           # Dataset's __getitem__ would
        mask = torch.ones(len(xb), dtype=torch.bool).to(xb.device)     # made and moved every step
        out = model(xb)
        loss = F.cross_entropy(out[mask], yb[mask])                     # boolean indexing: a host sync
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())                                      # a host sync every step
        outs = torch.cat([outs, out.detach()])                          # a growing cat every step
    return losses, outs


def fixed_train(model, x, y, steps=20, batch=32, lr=1e-2, opt=None):
    opt = opt or fixed_optimizer(model, lr)                             # one fused op per update
    losses = torch.empty(steps, dtype=x.dtype, device=x.device)        # logged on the device
    outs = []
    for s, idx in enumerate(batches(len(x), steps, batch, device=x.device)):  # indices on the device
        xb, yb = x[idx], y[idx]                                         # the batch in one index op each
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses[s] = loss.detach()
        outs.append(out.detach())
    return losses, torch.cat(outs)         # one cat; the losses stay on the device until someone reads them


def train(model, x, y, steps=20, batch=32, lr=1e-2, opt=None):
    """The loop a model's fixes call for: `fixed_train` when "loop" is among them, else `slow_train`."""
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows and y {len(y)}: pass one label per row.")
    return (fixed_train if "loop" in model.fixed else slow_train)(model, x, y, steps, batch, lr, opt)
