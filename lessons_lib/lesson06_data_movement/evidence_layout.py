"""Lesson 06, claim 6 (channel-first layouts help convolutions): a small convnet, what channels_last does
to strides, NCHW vs channels_last timings, and the paired-rounds verdict."""
from __future__ import annotations

import torch
import torch.nn as nn

from .. import claim_table, grading, noise, timing
from .. import device as _device
from ..grading import rel_error
from ..lesson_parts import check_dtype
from .evidence import _course_device, _measure, _whole


def convnet(channels: int = 32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(2 * channels, 2 * channels, 3, padding=1), nn.ReLU())


def layout_inputs(device=None, batch: int | None = None, size: int | None = None, dtype=torch.float32):
    dev = _device.pick(device)
    dtype = check_dtype(dtype)
    batch = _whole(batch, "batch") if batch is not None else (64 if dev.type == "cuda" else 4)  # CPU: quick rounds
    size = _whole(size, "size", 1, 1 << 16) if size is not None else (64 if dev.type == "cuda" else 16)
    # the input, and the convnet's widest activations (2 x 32 channels), two of them alive, in both layouts
    itemsize = dtype.itemsize
    _device.check_fits(itemsize * batch * size * size * (3 + 4 * 64), dev, "the convnet's input and activations")
    x = torch.randn(batch, 3, size, size, device=dev, dtype=dtype)
    return x


def layout_strides(batch: int = 2, size: int = 8) -> str:
    """What channels_last is: the same shape, other strides. A convolution's output is channels_last when its
    input or its weight is: cudnn_conv_suggest_memory_format (ATen's ConvUtils.h) on CUDA, and the same rule
    on this CPU's backends (_determine_backend_memory_format), shown by the strides below."""
    x = torch.randn(batch, 3, size, size)
    cl = torch.channels_last
    lines = []
    for name, x_cl, w_cl in (("contiguous (NCHW)", False, False), ("channels_last (NHWC)", True, True),
                             ("input NHWC, weight NCHW", True, False), ("input NCHW, weight NHWC", False, True)):
        m = convnet(4).to(memory_format=cl) if w_cl else convnet(4)
        xi = x.contiguous(memory_format=cl) if x_cl else x
        y = m(xi)
        out = "channels_last" if y.is_contiguous(memory_format=cl) and not y.is_contiguous() else "NCHW"
        lines.append(f"{name:24s} input strides {xi.stride()}; output strides {y.stride()} ({out})")
    ref = convnet(4).double()(x.double())
    err = rel_error(convnet(4).to(memory_format=cl)(x.contiguous(memory_format=cl)), ref)
    lines.append(f"channels_last output vs float64 NCHW reference: {'✓' if err < 1e-5 else '✗'} (within 1e-5)")
    return "\n".join(lines)


def layout_timings(device=None, dtype=torch.float32, min_run_time: float = 0.1, **kw) -> dict[str, timing.Timing]:
    """The small convnet's forward, NCHW vs channels_last, model and input in the same layout."""
    dev = _course_device(device)
    x = layout_inputs(dev, dtype=dtype, **kw)
    out = {}
    with torch.no_grad():
        for name, fmt in (("contiguous NCHW", torch.contiguous_format), ("channels_last", torch.channels_last)):
            m = convnet().to(dev, dtype).to(memory_format=fmt)
            out[name] = _measure(m, x.contiguous(memory_format=fmt), label=name + _precision(dev, x.dtype),
                                 min_run_time=min_run_time, device=dev)
    return out


def _precision(dev, dtype) -> str:
    """What a GPU ran float32 convolutions in, for a timing's label: cuDNN uses TF32 by default on compute
    capability 8.0+ (torch.backends.cudnn.conv.fp32_precision; grading.precision_label). Empty elsewhere."""
    if dev.type != "cuda" or dtype != torch.float32:
        return ""
    return " (TF32)" if "TF32" in grading.precision_label(dev, "conv") else " (full float32)"


LAYOUT_PAIRS = [("contiguous NCHW", "channels_last")]  # what layout_verdict's sentence says


def layout_verdict(device=None, dtype=torch.float32, max_time: float = 4.0, **kw):
    """(Comparison, sentence): the small convnet's forward in NCHW against channels_last, paired rounds; its
    table is `claim_table.of(cmp, LAYOUT_PAIRS)`."""
    dev = _course_device(device)
    x = layout_inputs(dev, dtype=dtype, **kw)
    fns = {}
    for name, fmt in (("contiguous NCHW", torch.contiguous_format), ("channels_last", torch.channels_last)):
        m, xi = convnet().to(dev, dtype).to(memory_format=fmt), x.contiguous(memory_format=fmt)
        fns[name] = lambda m=m, xi=xi: _no_grad_call(m, xi)
    cmp = noise.compare(fns, pairs=LAYOUT_PAIRS, max_time=max_time, device=dev)
    for t in cmp.timings.values():  # what the table beside the sentence shows: the precision the GPU ran
        t.label += _precision(dev, x.dtype)
    r = cmp.ratio(*LAYOUT_PAIRS[0])
    word = {"channels_last": "channels_last wins: the seed's 'channel-first helps' does not hold on this device",
            "contiguous NCHW": "NCHW wins for this network on this device: the seed's advice holds here; on GPUs "
                               "with tensor cores, measure in float16/bfloat16 before trusting it"}
    # cuDNN runs float32 convolutions in TF32 by default on an Ampere or newer GPU: say which ran
    ran = f" ({grading.precision_label(dev, 'conv')})" if dev.type == "cuda" and dtype == torch.float32 else ""
    said = claim_table.say(r, "here channels_last runs at {x} NCHW's speed" + ran + ": " + word.get(r.faster or "", ""),
                           tie="here neither layout wins (within 5%)" + ran + ": channel-first gives no advantage on this "
                     "device either")
    if ran and ran not in said:  # the noise rule's own sentence (not decided, no winner): the precision still applies
        said += ran
    return cmp, said


def _no_grad_call(m, x):
    with torch.no_grad():
        return m(x)
