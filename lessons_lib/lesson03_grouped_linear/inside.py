"""Lesson 03, look inside: copies, GEMM shapes, the conv backend, the optimizer's ops, the loop's graphs and compile."""
from __future__ import annotations

import warnings

import torch

from .. import claim_table, compile_notice, compiling, noise
from .. import device as _device
from .. import grouped_linear as GL
from ..display import text_table
from ..grading import rel_error
from ..display import count
from ..trace import trace_ops
from .lessons import LESSON, make_inputs, TRAIN_LESSON
from .variants import slow_groups


# --- look inside -----------------------------------------------------------------------------------------


def look_inside(params: dict, training: bool = False, dtype=torch.float32) -> str:
    """Per variant, from its op trace on meta: launches, GEMMs, copies, bytes, FLOPs (device-independent)."""
    lesson = TRAIN_LESSON if training else LESSON
    return lesson.work_table(params, dtype)


def copies_table(params: dict, training: bool = False) -> str:
    """Each variant's layout copies by op (transpose → contiguous/clone, cat, ...), from its trace."""
    lesson = TRAIN_LESSON if training else LESSON
    rows = [("variant", "GEMMs", "convolutions", "copy ops", "bytes copied")]
    for name, t in lesson.traces(params).items():
        ops = {}
        for op in t.copies:
            ops[op.name] = ops.get(op.name, 0) + 1
        names = ", ".join(f"{n} ×{c}" for n, c in ops.items()) or "none"
        rows.append((name, str(len(t.gemms)), str(len(t.convolutions)), names, _device.fmt_bytes(t.copied_bytes)))
    return text_table(rows)


def gemm_shapes(params: dict, training: bool = False) -> str:
    """The GEMMs each variant runs (op, batch, M×K @ K×N, how many), from the trace."""
    lesson = TRAIN_LESSON if training else LESSON
    lines = []
    for name, t in lesson.traces(params).items():
        counts: dict[str, int] = {}
        for op in t.gemms:
            b, m, n, k = op.gemm
            s = f"{op.name} {'' if b == 1 else f'batch {b} of '}{m}×{k} @ {k}×{n}"
            counts[s] = counts.get(s, 0) + 1
        conv = [op for op in t.convolutions]
        desc = "; ".join(f"{c} × {s}" if c > 1 else s for s, c in counts.items())
        if conv:
            desc = (desc + "; " if desc else "") + "; ".join(
                f"{op.name} {'x'.join(map(str, op.in_shapes[0]))}" for op in conv)
        lines.append(f"{name}: {desc or 'none'}")
    return "\n".join(lines)


def conv_backend(params: dict | None = None, device=None, dtype=torch.float32, training: bool = False) -> str:
    """Which backend ATen's convolution picks for the grouped Conv1d here (cuDNN, oneDNN, a slow
    fallback), asked of `torch._C._select_conv_backend` with the real input's shape (batch, channels,
    length): ATen's choice depends on the batch and, on a CPU, on the thread count, so both are said."""
    dev = _device.pick(device)
    p = {**LESSON.defaults(dev), **(params or {})}
    G, K = p["groups"], p["group_size"]
    select = getattr(torch._C, "_select_conv_backend", None)
    if select is None:
        return "this torch does not expose _select_conv_backend; the profiler's kernel names say which ran."
    _device.check_fits(2 * p["batch"] * G * K * p["length"] * torch.empty(0, dtype=dtype).element_size(), dev,
                       "the backend probe")
    x = torch.zeros(p["batch"], G * K, p["length"], device=dev, dtype=dtype, requires_grad=training)
    w = torch.zeros(G * K, K, 1, device=dev, dtype=dtype, requires_grad=training)
    try:
        backend = select(x, w, None, [1], [0], [1], False, [0], G)
    except Exception as err:  # a private API: if it changed, say so instead of failing
        return f"could not ask ATen ({type(err).__name__}); the profiler's kernel names say which ran."
    name = str(backend).split(".")[-1]
    threads = f", {count(torch.get_num_threads(), 'thread')}" if dev.type == "cpu" else ""
    return (f"grouped Conv1d, {G} groups of {K}, input {p['batch']}×{G * K}×{p['length']} on {dev.type} "
            f"({str(dtype).replace('torch.', '')}{threads}{', training' if training else ''}): backend {name}")


def optimizer_ops(groups: int = 64, group_size: int = 32, fused: bool | None = None) -> dict[str, int]:
    """Ops one Adam step dispatches on the parameters' device, over SlowGroups' 2·G tensors vs
    GroupedLinear's 2 (meta trace). A later step is traced (the first also creates the state), and
    ops on the 0-dim CPU `step` counters (`step += 1`, `.item()`) and profiler records are left out:
    they run on the host, not as kernels."""
    out = {}
    for label, shapes in (("SlowGroups: 2·G tensors", [(group_size, group_size), (group_size,)] * groups),
                          ("GroupedLinear: 2 tensors", [(groups, group_size, group_size), (groups, group_size)])):
        for foreach in (False, True):
            params = [torch.zeros(s, device="meta", requires_grad=True) for s in shapes]
            for q in params:
                q.grad = torch.zeros(q.shape, device="meta")
            opt = torch.optim.Adam(params, lr=1e-3, foreach=foreach)
            opt.step()  # the first step initialises the state (zeros_like per tensor): not a steady step
            t = trace_ops(opt.step)
            out[f"{label}, {'foreach' if foreach else 'for loop'}"] = len([op for op in t.compute_ops
                                                                           if _device_op(op)])
    return out


def _device_op(op) -> bool:
    """An op on the parameters (not on a 0-dim host step counter, not a profiler record)."""
    if op.name.startswith("_record_function") or op.name == "_local_scalar_dense":
        return False
    return any(len(s) for s in (*op.in_shapes, *op.out_shapes))


def optimizer_timings(device=None, groups: int = 64, group_size: int = 32, min_run_time: float = 0.01,
                      max_time: float = 6.0, rounds: int = 3) -> noise.Comparison:
    """One Adam step over SlowGroups' parameters vs GroupedLinear's, in the noise rule's paired rounds.
    Adam's default here is what `torch.optim.optimizer._default_to_fused_or_foreach` picks: foreach only
    where every parameter is on a foreach device (CUDA, XPU, MTIA, ...), so a for loop on a CPU."""
    dev = _device.pick(device)
    p = LESSON.check({"groups": groups, "group_size": group_size}, dev, torch.float32, memory=False)
    G, K = p["groups"], p["group_size"]
    # Both layouts' parameters, gradients and Adam's two state tensors: 8 copies of the weights and biases.
    _device.check_fits(8 * 4 * (G * K * K + G * K), dev, f"Adam over {G} Linears of {K}×{K}, twice")
    steps = {}
    for label, shapes in ((OPT_LOOP, [(group_size, group_size), (group_size,)] * groups),
                          (OPT_STACKED, [(groups, group_size, group_size), (groups, group_size)])):
        params = [torch.zeros(s, device=dev, requires_grad=True) for s in shapes]
        for q in params:
            q.grad = torch.full(q.shape, 1e-3, device=dev)
        opt = torch.optim.Adam(params, lr=1e-6)
        opt.step()  # state created outside the clock
        steps[label] = opt.step
    return noise.compare(steps, rounds=rounds, min_run_time=min_run_time, max_time=max_time, device=dev,
                         pairs=[(OPT_LOOP, OPT_STACKED)])


OPT_LOOP, OPT_STACKED = "Adam over 2·G tensors", "Adam over 2 stacked tensors"


def optimizer_summary(cmp: noise.Comparison, device=None) -> str:
    """The Adam comparison in words, through the noise rule, naming the implementation that ran."""
    dev = _device.pick(device)
    how = "foreach (the default on CUDA)" if dev.type == "cuda" else "a for loop over tensors (the default off CUDA)"
    ratio = cmp.ratio(OPT_LOOP, OPT_STACKED)  # the table's ratio column and the sentence: one number
    return (claim_table.table(cmp.over_rounds(), [ratio]) + f"\nAdam ran as {how}. " +
            claim_table.say(ratio, "Over 2·G tensors the step takes {x} the stacked step's time.",
                            tie="The two steps take the same time within 5%."))


def loop_graphs(params: dict) -> compiling.Captured:
    """The loop through Dynamo and AOTAutograd with a recording backend: G separate addmm/mm ops."""
    full = LESSON.check(params, torch.device("cpu"), torch.float32)
    return compiling.record_graphs(slow_groups, *make_inputs(full, torch.device("cpu"), torch.float32), aten=True)


def loop_rows(x, weight, bias):
    """The loop on (rows, channels) input: one F.linear per group on a 2-D column slice, then cat."""
    return GL.loop(x, weight, bias, dim=-1)


def compile_loop(groups: int = 8, group_size: int = 16, rows: int = 64, device=None,
                 fuse: bool = True) -> tuple[compiling.Compiled, str]:
    """One real Inductor compile of the loop's forward on 2-D rows (no grad). fuse: turn on Inductor's
    opt-in pre-grad pass `batch_linear` (torch._inductor.config.pre_grad_fusion_options), which can
    batch same-shaped linears into one bmm. Returns the compile and a line naming the library GEMMs
    in the generated code, with a float64 check of the compiled function."""
    dev = _device.pick(device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, groups * group_size, generator=gen).to(dev)
    w = (torch.randn(groups, group_size, group_size, generator=gen) / group_size**0.5).to(dev)
    b = torch.randn(groups, group_size, generator=gen).to(dev)
    try:
        import torch._inductor.config as inductor_config
        patch = inductor_config.patch({"pre_grad_fusion_options": {"batch_linear": {}}} if fuse else {})
    except (ImportError, AttributeError, RuntimeError) as err:  # an Inductor without these options
        return compiling.Compiled(None, "inductor", problem=f"this Inductor has no pre-grad fusion options ({err})"), ""
    compiling.reset()
    with torch.no_grad(), patch, warnings.catch_warnings():
        # Inductor's advice to turn TF32 on for float32 GEMMs (a GPU with TF32): the lesson keeps PyTorch's
        # default, full float32, and says so beside every GPU timing (tf32_note); a red stderr block here is noise.
        warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")
        c = compiling.compile_cold(loop_rows, x, w, b, capture_code=True,
                                   busy_s=compile_notice.BUSY_S["03 loop"])
    if not c.ok:
        return c, str(c)
    lib = compiling.kernels(c.code)["library"]
    counts = {n: lib.count(n) for n in dict.fromkeys(lib)}
    line = ", ".join(f"{v} × {k}" for k, v in counts.items()) or "no library GEMM"
    with torch.no_grad():
        err = rel_error(c.fn(x, w, b), loop_rows(x.double(), w.double(), b.double()))
    ok = err <= 4 * 2e-6 * group_size**0.5
    return c, (f"{count(groups, 'linear')}, {'batch_linear fusion on' if fuse else 'default options'}: library GEMMs in the "
               f"generated code: {line}; against float64 {'✓' if ok else '✗'}")
