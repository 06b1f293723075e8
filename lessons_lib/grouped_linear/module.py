"""class GroupedLinear: the drop-in nn.Module."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..display import count
from .features import available, problem
from .strategies import (
    _any_autocast, _compute_dtype, _norm_dim, AUTO, FUNCTIONS, laid_out, LAYOUT, layout_of, STRATEGIES,
)
from .tuning import _GENERATION, _is_compiling, _traceable, Choice, FALLBACK, tune


# --- the module ---------------------------------------------------------------------------------------


def _check_size(name: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"{name} must be a whole number, got {n!r}.")
    if n < 1:
        raise ValueError(f"{name} must be at least 1, got {n}.")
    return n


def _check_strategy(strategy) -> str:
    if strategy != AUTO and strategy not in STRATEGIES:
        raise ValueError(f"No strategy {strategy!r}: choose 'auto' or one of {', '.join(STRATEGIES)}.")
    return strategy


class GroupedLinear(nn.Module):
    """`groups` independent `nn.Linear(in_features, out_features)` layers applied side by side.

    Input (..., groups·in_features) along `dim` (default the last), output the same with
    groups·out_features there. Each group is initialised as `nn.Linear` initialises itself,
    in the order G separate Linears would (so a seeded GroupedLinear equals seeded Linears).

    strategy: "auto" (time once per shape here, cache, reuse) or one of `STRATEGIES`.
    """

    def __init__(self, groups: int, in_features: int, out_features: int, bias: bool = True,
                 strategy: str = AUTO, dim: int = -1, device=None, dtype=None):
        super().__init__()
        self.groups = _check_size("groups", groups)
        self.in_features = _check_size("in_features", in_features)
        self.out_features = _check_size("out_features", out_features)
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise ValueError(f"dim must be an integer (the channel dimension), got {dim!r}.")
        self.dim = dim
        self._strategy = _check_strategy(strategy)
        self._choices: dict[tuple, Choice] = {}
        self._sig, self._fn = None, None  # the last call's input signature and the function it ran
        kw = {"device": device, "dtype": dtype}
        # Shape (G, out, in) like G nn.Linears. Its memory order follows the strategy in use (LAYOUT): the
        # first call under "auto" lays it out for the strategy chosen; `to()`/`load_state_dict` keep it.
        self.weight = nn.Parameter(torch.empty(groups, out_features, in_features, **kw))
        self.bias = nn.Parameter(torch.empty(groups, out_features, **kw)) if bias else None
        self.reset_parameters()
        if self._strategy != AUTO:
            self._lay_out(self._strategy)

    # --- construction ---------------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """nn.Linear's initialisation, group by group (weight then bias, as G Linears would draw them)."""
        bound = 1 / math.sqrt(self.in_features)
        one = torch.empty(self.out_features, self.in_features, device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            for g in range(self.groups):  # drawn into an (out, in) Linear-shaped buffer: the same numbers
                nn.init.kaiming_uniform_(one, a=math.sqrt(5))  # as nn.Linear whatever the memory layout
                self.weight[g].copy_(one)
                if self.bias is not None:
                    nn.init.uniform_(self.bias[g], -bound, bound)

    @classmethod
    def for_channels(cls, in_channels: int, out_channels: int, groups: int, **kwargs) -> "GroupedLinear":
        """Sized like a grouped Conv1d: channels split evenly into `groups`."""
        for name, c in (("in_channels", in_channels), ("out_channels", out_channels)):
            _check_size(name, c)
        _check_size("groups", groups)
        for name, c in (("in_channels", in_channels), ("out_channels", out_channels)):
            if c % groups:
                raise ValueError(f"{name}={c} is not divisible by groups={groups}: every group needs the same width "
                                 f"(choose channels that are a multiple of {groups}).")
        return cls(groups, in_channels // groups, out_channels // groups, **kwargs)

    @classmethod
    def from_linears(cls, linears, strategy: str = AUTO, dim: int = -1) -> "GroupedLinear":
        """One GroupedLinear computing what `linears` compute on consecutive slices of the channels."""
        linears = list(linears)
        if not linears:
            raise ValueError("from_linears needs at least one nn.Linear.")
        first = linears[0]
        for i, lin in enumerate(linears):
            if not isinstance(lin, nn.Linear):
                raise ValueError(f"item {i} is a {type(lin).__name__}, not an nn.Linear.")
            if (lin.in_features, lin.out_features) != (first.in_features, first.out_features):
                raise ValueError(f"Linear {i} is {lin.in_features} → {lin.out_features} but Linear 0 is "
                                 f"{first.in_features} → {first.out_features}: every group must have the same shape.")
            if lin.weight.dtype != first.weight.dtype or lin.weight.device != first.weight.device:
                raise ValueError(f"Linear {i} is {lin.weight.dtype} on {lin.weight.device} but Linear 0 is "
                                 f"{first.weight.dtype} on {first.weight.device}: convert them to one dtype and device.")
            if (lin.bias is None) != (first.bias is None):
                raise ValueError(f"Linear {i} {'has no' if lin.bias is None else 'has a'} bias and Linear 0 "
                                 f"{'has none' if first.bias is None else 'has one'}: all or none must have a bias.")
        out = cls(len(linears), first.in_features, first.out_features, bias=first.bias is not None,
                  strategy=strategy, dim=dim, device=first.weight.device, dtype=first.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(torch.stack([lin.weight for lin in linears]))
            if out.bias is not None:
                out.bias.copy_(torch.stack([lin.bias for lin in linears]))
        return out

    def to_linears(self) -> nn.ModuleList:
        """The G separate nn.Linear layers (copies of the parameters)."""
        out = nn.ModuleList()
        for g in range(self.groups):
            lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                            device=self.weight.device, dtype=self.weight.dtype)
            with torch.no_grad():
                lin.weight.copy_(self.weight[g])
                if self.bias is not None:
                    lin.bias.copy_(self.bias[g])
            out.append(lin)
        return out

    @classmethod
    def from_conv1d(cls, conv: nn.Conv1d, strategy: str = AUTO) -> "GroupedLinear":
        """The same function as a grouped `nn.Conv1d` with kernel_size=1 (channel-first, dim=-2)."""
        if not isinstance(conv, nn.Conv1d):
            raise ValueError(f"from_conv1d needs an nn.Conv1d, got {type(conv).__name__}.")
        bad = {k: v for k, v in (("kernel_size", conv.kernel_size), ("stride", conv.stride),
                                 ("dilation", conv.dilation)) if tuple(v) != (1,)}
        if isinstance(conv.padding, str):
            if conv.padding not in ("valid", "same"):
                bad["padding"] = conv.padding
        elif tuple(conv.padding) != (0,):
            bad["padding"] = conv.padding
        if bad:
            raise ValueError(f"Only a pointwise Conv1d (kernel_size=1, stride=1, dilation=1, padding=0) is a grouped "
                             f"Linear; this one has {bad}.")
        G = conv.groups
        out = cls(G, conv.in_channels // G, conv.out_channels // G, bias=conv.bias is not None, strategy=strategy,
                  dim=-2, device=conv.weight.device, dtype=conv.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(conv.weight.reshape(G, conv.out_channels // G, conv.in_channels // G))
            if out.bias is not None:
                out.bias.copy_(conv.bias.reshape(G, -1))
        return out

    def to_conv1d(self) -> nn.Conv1d:
        """A grouped pointwise nn.Conv1d computing the same (for channel-first inputs)."""
        G, O, K = self.weight.shape
        conv = nn.Conv1d(G * K, G * O, 1, groups=G, bias=self.bias is not None, device=self.weight.device,
                         dtype=self.weight.dtype)
        with torch.no_grad():
            conv.weight.copy_(self.weight.reshape(G * O, K, 1))
            if self.bias is not None:
                conv.bias.copy_(self.bias.reshape(-1))
        return conv

    @classmethod
    def from_slow_groups(cls, module: nn.Module, strategy: str = AUTO) -> "GroupedLinear":
        """The thread's SlowGroups (a ModuleList `projs` of Linears over chunks of dim -2)."""
        projs = getattr(module, "projs", None)
        if projs is None:
            raise ValueError(f"{type(module).__name__} has no `projs` ModuleList of nn.Linear (the thread's SlowGroups).")
        return cls.from_linears(list(projs), strategy=strategy, dim=-2)

    # --- strategy ---------------------------------------------------------------------------------------
    @property
    def strategy(self) -> str:
        return self._strategy

    @strategy.setter
    def strategy(self, name: str) -> None:
        self._strategy = _check_strategy(name)
        self._sig = self._fn = None
        if name != AUTO:
            self._lay_out(name)

    def _lay_out(self, strategy: str) -> None:
        """Store the weight in the memory order `strategy` reads fastest (same Parameter, same values; an
        optimizer holding it is unaffected). Only when it changes: once per new strategy, not per call."""
        if layout_of(self.weight) != LAYOUT[strategy]:
            with torch.no_grad():
                self.weight.data = laid_out(self.weight.data, strategy)

    def strategy_for(self, x: torch.Tensor) -> str:
        """The strategy a call on `x` uses (tuning first, under "auto", if this shape is new)."""
        if self._strategy != AUTO:
            return self._strategy
        if _is_compiling():
            return _traceable(next((c.strategy for c in self._choices.values()), FALLBACK), x.device.type)
        choice = tune(x, self.weight, self.bias, self.dim)
        if x.device.type != "meta":  # a trace on meta times nothing: nothing to explain
            self._choices[choice.key] = choice
        return choice.strategy

    def _check_input(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"GroupedLinear takes a tensor, got {type(x).__name__}.")
        if x.dim() == 0:
            raise ValueError("GroupedLinear needs at least one dimension (the channels).")
        if x.device.type != self.weight.device.type:  # a meta input into a CPU layer ran, and returned garbage
            raise ValueError(f"The input is on {x.device} but this layer's parameters are on {self.weight.device}: "
                             f"move one of them (layer.to({str(x.device)!r}) or x.to({str(self.weight.device)!r})).")
        d = _norm_dim(self.dim, x.dim())
        want = self.groups * self.in_features
        if x.shape[d] != want:
            raise ValueError(f"Input has {count(x.shape[d], 'channel')} in dim {self.dim} (shape {tuple(x.shape)}); this layer "
                             f"expects groups × in_features = {self.groups} × {self.in_features} = {want}.")

    @staticmethod
    def _signature(x: torch.Tensor, weight: torch.Tensor) -> tuple:
        """What decides the strategy: the input, the weight's dtype and device, training or not, the tuning cache."""
        return (x.shape, x.dtype, x.device, weight.dtype, weight.device, _GENERATION[0],
                torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Fast path: the same signature as the last call runs the same function. A small layer pays this on
        # every call (at 20 µs a call, 4 µs of checks and lookups would be 20%), so the parameters are read
        # from their dict (`self.weight` is a slower nn.Module attribute lookup). Not while torch.compile
        # traces, nor under autocast (its dtype is part of the choice).
        if self._fn is not None and not _is_compiling() and not _any_autocast():
            params = self._parameters
            weight = params["weight"]
            if self._signature(x, weight) == self._sig:
                return self._fn(x, weight, params.get("bias"), self.dim)
        self._check_input(x)
        name = self.strategy_for(x)
        if self._strategy != AUTO:  # an explicit strategy must run here, or say why not
            d = _norm_dim(self.dim, x.dim())
            why = problem(name, x.device, _compute_dtype(x, self.weight), self.groups, self.in_features,
                          self.out_features, d == x.dim() - 1, torch.is_grad_enabled() and
                          (x.requires_grad or self.weight.requires_grad))
            if why:
                ok = [s for s, p in available(x.device, _compute_dtype(x, self.weight), self.groups,
                                              self.in_features, self.out_features, d == x.dim() - 1).items()
                      if p is None]
                raise ValueError(f"Strategy {name!r} cannot run here: {why} Available: {', '.join(ok)} (or 'auto').")
        if x.device.type != "meta" and not _is_compiling():
            self._lay_out(name)
            if not _any_autocast():
                self._sig, self._fn = self._signature(x, self.weight), FUNCTIONS[name]
        return FUNCTIONS[name](x, self.weight, self.bias, self.dim)

    def explain(self) -> str:
        """What auto-tuning saw for the shapes this layer has met, and the weight's memory order (a report:
        `print(layer.explain())`)."""
        if self._strategy != AUTO:
            text = f"strategy {self._strategy!r} was chosen explicitly; nothing was timed."
        elif not self._choices:
            text = "strategy 'auto': no input seen yet; the first call on a new shape times the strategies."
        else:
            text = "\n".join(c.describe() for c in self._choices.values())
        order = "(G, in, out), the batched GEMM's" if layout_of(self.weight) == "gemm" else "(G, out, in), nn.Linear's"
        return f"{text}\nweight held in memory as {order} order"

    def extra_repr(self) -> str:
        return (f"groups={self.groups}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, strategy={self._strategy!r}, dim={self.dim}")
