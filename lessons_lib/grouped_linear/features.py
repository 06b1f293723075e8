"""Feature detection: which strategies can run on this device, dtype and shape (and why not)."""
from __future__ import annotations

import torch

from .strategies import _ContiguousGrad, _grouped_mm_fn, MAX_BLOCK_DIAGONAL_BYTES, STRATEGIES


# --- feature detection ----------------------------------------------------------------------------

_probes: dict[tuple, str | None] = {}


def grouped_mm_problem(device, dtype, in_features: int | None = None, out_features: int | None = None,
                       training: bool = False) -> str | None:
    """Why the grouped_mm strategy cannot run here, in one sentence, or None where it can.

    Feature-detected by a tiny probe call (cached per device and dtype), never by version:
    the op must exist, accept this device and dtype, and (for training) run backward. Its
    kernels also need every row stride to be a multiple of 16 bytes, so in_features and
    out_features must be multiples of 16 / element size."""
    if _grouped_mm_fn() is None:
        return f"torch {torch.__version__} has neither torch.nn.functional.grouped_mm nor torch._grouped_mm."
    dev = torch.device(device)
    size = torch.empty(0, dtype=dtype).element_size()
    align = 16 // size if size < 16 else 1
    for name, n in (("in_features", in_features), ("out_features", out_features)):
        if n is not None and n % align:
            return (f"grouped_mm needs row strides that are multiples of 16 bytes: {name}={n} is not a multiple "
                    f"of {align} for {str(dtype).replace('torch.', '')}.")
    key = (dev.type, dev.index, dtype, training)
    if key not in _probes:
        _probes[key] = _probe_grouped_mm(dev, dtype, align, training)
    return _probes[key]


def _probe_grouped_mm(dev, dtype, align, training) -> str | None:
    if dev.type == "meta":
        return "grouped_mm is not traced on meta (its meta kernel assumes bf16 on a GPU)."
    try:
        a = torch.zeros(2, 3, align, device=dev, dtype=dtype, requires_grad=training)
        b = torch.zeros(2, align, align, device=dev, dtype=dtype, requires_grad=training)
        out = _ContiguousGrad.apply(_grouped_mm_fn()(a, b))
        if training:
            out.sum().backward()
    except Exception as err:  # the build, device or dtype does not support it: say which
        line = (str(err).strip().splitlines() or [""])[0][:160]
        return (f"grouped_mm does not run on {dev.type} in {str(dtype).replace('torch.', '')}"
                f"{' with backward' if training else ''} here ({type(err).__name__}: {line}).")
    return None


def problem(strategy: str, device, dtype, groups: int, in_features: int, out_features: int, channels_last: bool,
            training: bool = False) -> str | None:
    """Why `strategy` cannot run for this layer and input here, or None if it can."""
    if strategy == "matmul_channels" and channels_last:
        return "matmul_channels needs a channel-first layout (a dimension after the channels)."
    if strategy == "grouped_mm":
        return grouped_mm_problem(device, dtype, in_features, out_features, training)
    if strategy == "block_diagonal":
        nbytes = groups * groups * in_features * out_features * torch.empty(0, dtype=dtype).element_size()
        if nbytes > MAX_BLOCK_DIAGONAL_BYTES:
            return (f"block_diagonal would build a {groups * out_features} × {groups * in_features} weight "
                    f"({nbytes / 2**20:.0f} MiB) every call.")
    return None


def available(device, dtype, groups: int, in_features: int, out_features: int, channels_last: bool = True,
              training: bool = False) -> dict[str, str | None]:
    """{strategy: None if it can run here, else why not}."""
    return {s: problem(s, device, dtype, groups, in_features, out_features, channels_last, training)
            for s in STRATEGIES}
