"""Autocast as CUDA would apply it, modelled for a run on meta, where it does not apply.

`torch.autocast("cuda", dtype)` casts at the Autocast dispatch key, which only CUDA tensors carry; on meta it does
nothing (and on a machine without CUDA torch turns it off at construction, with a warning). Left as it is, a
bfloat16 or float16 step would be traced, and priced, in float32. So during a meta run, entering and leaving
`torch.autocast` regions with device_type "cuda" is recorded, and a torch-function mode applies autocast's casts
at the same functions, above autograd as the Autocast key is, following its op lists in the installed torch's
ATen/autocast_mode.h:
- AT_FORALL_LOWER_PRECISION_FP (GEMMs, convolutions, RNN cells, attention): floating inputs cast to the region's
  dtype;
- AT_FORALL_FP32 (exp, log, pow, norms, the losses...): lower-precision inputs cast to float32;
- AT_FORALL_FP32_SET_OPT_DTYPE (softmax, log_softmax, sum, cumsum, prod, norms): run with dtype=float32;
- AT_FORALL_PROMOTE: inputs cast to the widest floating type among them.
As autocast's cached_cast does, float64 is never cast, and a leaf that requires grad (a weight) is cast once per
region, not at every use. Composite functions that decompose into listed ops (F.cross_entropy into log_softmax and
nll_loss) take their parts' policy. The casts are real ops of the trace, as they are real kernels on CUDA.
"""
from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

LOWER = {"_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
         "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
         "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
         "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
         "_scaled_dot_product_flash_attention", "scaled_dot_product_attention", "__matmul__", "__rmatmul__"}
FP32 = {"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
        "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "native_layer_norm", "rms_norm",
        "group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
        "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
        "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
        "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
        "pdist", "cdist", "renorm", "logsumexp", "cross_entropy"}  # cross_entropy: log_softmax and nll_loss
SET_OPT_DTYPE = {"prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm", "linalg_matrix_norm",
                 "sum"}
PROMOTE = {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
           "tensordot", "scatter_add"}
_LOW = (torch.float16, torch.bfloat16)


def _eligible(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64 \
        and t.device.type in ("meta", "cuda")


class _Casts(TorchFunctionMode):
    def __init__(self, regions: list):
        super().__init__()
        self.regions = regions  # [(dtype or None when disabled, weight cache)], innermost last

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        state = self.regions[-1] if self.regions else None
        name = getattr(func, "__name__", "")
        if state is None or state[0] is None:
            return func(*args, **kwargs)
        dtype, cache = state
        if name in LOWER:
            args, kwargs = self._cast((args, kwargs), dtype, cache, lambda t: t.dtype != dtype)
        elif name in FP32:
            args, kwargs = self._cast((args, kwargs), torch.float32, cache, lambda t: t.dtype in _LOW)
        elif name in SET_OPT_DTYPE and kwargs.get("dtype") is None and any(
                _eligible(t) and t.dtype in _LOW for t in (*args, *kwargs.values())):
            kwargs = {**kwargs, "dtype": torch.float32}
        elif name in PROMOTE:
            widest = torch.float32 if any(_eligible(t) and t.dtype == torch.float32
                                          for t in (*args, *kwargs.values())) else dtype
            args, kwargs = self._cast((args, kwargs), widest, cache, lambda t: t.dtype != widest)
        return func(*args, **kwargs)

    @staticmethod
    def _cast(tree, dtype, cache, wanted):
        def one(t):
            if not (_eligible(t) and wanted(t)):
                return t
            if t.is_leaf and t.requires_grad:  # autocast's weight cache: once per region
                key = (id(t), dtype)
                if key not in cache:
                    cache[key] = (t, t.to(dtype))  # the weight held too, so its id is not reused meanwhile
                return cache[key][1]
            return t.to(dtype)
        return tree_map(one, tree)


@contextlib.contextmanager
def modelled(active: bool, notes: list):
    """During the block (when `active`): torch.autocast regions for "cuda" cast as CUDA's autocast would (see
    the module's docstring). A region made before the call on a machine without CUDA, which torch turned off
    then, is modelled as enabled, and `notes` says so."""
    if not active:
        yield
        return
    from torch.amp import autocast_mode

    cls = autocast_mode.autocast
    regions: list = []
    init, enter, exit_ = cls.__init__, cls.__enter__, cls.__exit__

    def new_init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        self._diagnose_enabled = enabled  # before torch turns it off for want of CUDA
        init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def new_enter(self):
        out = enter(self)
        if getattr(self, "device", None) == "cuda":
            wanted = getattr(self, "_diagnose_enabled", None)
            if wanted is None:
                wanted = self._enabled or not torch.cuda.is_available()
                if wanted and not self._enabled and not any("autocast" in n for n in notes):
                    notes.append("an autocast region made before the call (torch turned it off: no CUDA here) "
                                 "was modelled as enabled")
            regions.append((self.fast_dtype if wanted else None, {}))
        else:
            regions.append(regions[-1] if regions else (None, {}))  # a CPU region leaves CUDA's as it is
        return out

    def new_exit(self, *exc):
        if regions:
            regions.pop()
        return exit_(self, *exc)

    cls.__init__, cls.__enter__, cls.__exit__ = new_init, new_enter, new_exit
    try:
        with _Casts(regions):
            yield
    finally:
        cls.__init__, cls.__enter__, cls.__exit__ = init, enter, exit_
