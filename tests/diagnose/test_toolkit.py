"""What diagnose added to the toolkit (issue 29): each op's line in the trace, scaled_dot_product_attention on meta
as CUDA runs it, the sync detector's events as they happen, and trace.py's split (every old import path kept)."""
import inspect

import torch
import torch.nn.functional as F

from lessons_lib import code_lines, op_costs, syncs, trace


def test_each_op_carries_the_readers_line_and_backward_the_line_that_called_it():
    def f(x):
        y = x * 2  # line A
        return torch.nn.functional.gelu(y).sum()  # line B

    lines, start = inspect.getsourcelines(f)
    x = torch.randn(4, requires_grad=True)
    t = trace.OpTrace()
    with trace._Recorder(t, lines=True):
        f(x).backward()
    here = inspect.currentframe().f_lineno - 1
    assert [(op.name, op.where.line) for op in t.ops if op.name in ("mul", "gelu", "sum")][:3] == [
        ("mul", start + 1), ("gelu", start + 2), ("sum", start + 2)]
    assert {op.where.line for op in t.ops if op.name == "gelu_backward"} == {here}
    assert t.ops[0].where.text == "y = x * 2" and t.ops[0].where.function == "f"
    assert all(op.where is None for op in trace.trace_ops(f, x).ops)  # trace_ops as before: no lines


def test_the_toolkit_and_torch_are_not_the_readers_code():
    assert code_lines._skipped(torch.__file__) and code_lines._skipped(trace.__file__)
    assert code_lines._skipped(code_lines.__file__.replace("code_lines.py", "diagnose/collect.py"))
    assert not code_lines._skipped(__file__)
    from lessons_lib.lesson07_capstone import model  # a lesson's code is someone's model: the reader's

    assert not code_lines._skipped(model.__file__)


def test_attention_on_meta_runs_cuda_s_kernel_however_it_is_imported():
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q = torch.empty(2, 4, 64, 16, device="meta", requires_grad=True)
    for call in (lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True), lambda: sdpa(q, q, q)):
        with trace.sdpa_as_on_cuda():
            t = trace.trace_ops(lambda: call().sum().backward())
        assert [op.name for op in t.compute_ops if "attention" in op.name] == [
            "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward"]
        assert not t.named("_softmax", "_safe_softmax", "bmm")
    plain = trace.trace_ops(lambda: F.scaled_dot_product_attention(q, q, q))  # outside the block: meta's math path
    assert plain.named("_safe_softmax") or plain.named("_softmax")


def test_the_sync_detector_reports_each_event_as_it_happens():
    seen = []
    x = torch.randn(8, device="meta")
    report = syncs.watch(lambda: (x[x > 0].sum().item(), torch.ones(3).to("meta")), cuda_view=True,
                         on_event=lambda e: seen.append(type(e).__name__))
    assert seen == ["HostSync", "HostSync", "HostSync", "Transfer"] and report.view == "cuda"
    assert [type(e).__name__ for e in report.events] == seen


def test_the_split_keeps_every_import_path():
    for name in ("footprint_bytes", "distinct_elements", "accessed_bytes", "conv_flops", "tf32_enabled",
                 "tf32_allowed", "GEMM_OPS", "CONV_OPS", "COPY_OPS", "NO_KERNEL", "_is_view_op", "_gemm_dims",
                 "_storage_key", "_bias_copy", "_lt_bias", "_tf32"):
        assert getattr(trace, name) is getattr(op_costs, name)


# --- diagnose must not turn a compiled step back into eager code (compiling.EagerWatch) -------------------
def test_diagnose_leaves_a_compiled_step_compiled():
    from lessons_lib import diagnose

    from ..stays_compiled import check

    def step(x):
        return (x.relu() * 2).sum()

    x = torch.randn(8)
    check(lambda f: diagnose(f, x), step, x)
