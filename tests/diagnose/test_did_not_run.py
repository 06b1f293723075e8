"""Issue 32 §2: a step that did not run never gets a verdict. The first line says it did not run, and why; the
step's own error comes back to the reader with the reader's traceback, from one call; graph_check(None) too."""
import asyncio
import traceback

import pytest
import torch
import torch.nn as nn

import lessons_lib
from lessons_lib import graph_check


def _first(report) -> str:
    return str(report).splitlines()[0]


def _step(model, x):
    model(x).sum().backward()


@pytest.mark.parametrize("call, words", [
    (lambda: lessons_lib.diagnose(nn.Linear(4, 4)), "its forward takes input: pass a batch too, diagnose(model, x)"),
    (lambda: lessons_lib.diagnose(_step, (nn.Linear(4, 4), torch.randn(2, 4))),
     "the inputs came as one tuple; `_step` takes them one by one: diagnose(step, *inputs)"),
    (lambda: lessons_lib.diagnose(_step, nn.Linear(4, 4), torch.randn(2, 4), lr=0.1),
     "`_step` has no parameter 'lr', so nothing ran (diagnose's own keywords are device=, gpu=, graphs= and timed="),
    (lambda: lessons_lib.diagnose(nn.Linear, torch.randn(2, 4)), "`Linear` is a class, not a step"),
    (lambda: lessons_lib.diagnose(None), "diagnose needs the step itself"),
    (lambda: lessons_lib.diagnose(_step, nn.Linear(4, 4)), "`_step` takes (model, x) and cannot be called with 1"),
], ids=["module without a batch", "inputs as one tuple", "unknown keyword", "a class", "None", "too few inputs"])
def test_a_call_that_does_not_fit_the_step_does_not_run_and_says_why(call, words):
    report = call()
    assert _first(report).startswith("✗ the step did not run, so there is no verdict: ") and words in _first(report)
    assert not report.ran and not report.clean and not report and report.findings == [] and report.checked == {}


def test_generator_and_async_steps_do_not_run():
    def gen_step(model, x):
        yield model(x)

    async def async_step(model, x):
        return model(x)

    for step, words in ((gen_step, "is a generator function: calling it runs none of its body"),
                        (async_step, "is an async function: calling it only makes a coroutine")):
        report = lessons_lib.diagnose(step, nn.Linear(4, 4), torch.randn(2, 4))
        assert words in _first(report) and not report.ran
    assert asyncio.iscoroutinefunction(async_step)


def test_a_generator_of_batches_cannot_be_copied_so_nothing_runs():
    batches = (torch.randn(2, 4) for _ in range(3))

    def step(model, batches):
        model(next(batches)).sum().backward()

    report = lessons_lib.diagnose(step, nn.Linear(4, 4), batches)
    assert "`batches` is a generator" in _first(report) and "pass a list of batches" in _first(report)
    assert len(list(batches)) == 3  # not advanced


def test_cuda_in_the_step_runs_on_meta_and_on_the_cpu_says_it_needs_a_gpu():
    def step(model, x):
        x = x.cuda()
        model.cuda()(x).sum().backward()
        torch.cuda.synchronize()

    on_meta = lessons_lib.diagnose(step, nn.Linear(4, 4), torch.randn(2, 4))
    assert on_meta.ran and _first(on_meta).startswith(("✓", "✗ 1", "✗ 2", "✗ 3"))
    if not torch.cuda.is_available():
        on_cpu = lessons_lib.diagnose(step, nn.Linear(4, 4), torch.randn(2, 4), device="cpu")
        assert not on_cpu.ran and "it needs a CUDA GPU at test_did_not_run.py:" in _first(on_cpu)
        assert "x = x.cuda()" in _first(on_cpu)


class _Mine(Exception):
    pass


class _Calls:
    n = 0  # a class's attribute: the class is not copied (its instances are), so this counts the real calls


def test_the_steps_own_error_comes_through_with_its_traceback_from_one_call():
    def inner(x):
        raise _Mine("shapes do not fit")

    def step(x):
        _Calls.n += 1
        return inner(x * 2)

    for device in ("meta", "cpu"):
        _Calls.n = 0
        with pytest.raises(_Mine, match="shapes do not fit") as caught:
            lessons_lib.diagnose(step, torch.randn(3), device=device)
        frames = [f.name for f in traceback.extract_tb(caught.value.__traceback__)]
        assert frames[-2:] == ["step", "inner"] and "collect" not in frames and "watch" not in frames
        assert any("raised by your step" in n for n in getattr(caught.value, "__notes__", []))
        assert _Calls.n == 1


def test_an_error_meta_caused_is_no_verdict_and_names_the_line():
    def step(x):
        n = int(x.sum().item())  # 0 on meta
        return torch.ones(4)[: n + 1].view(2, 2)  # fine with the real value, 1 element on meta

    report = lessons_lib.diagnose(step, torch.full((4,), 1.0))
    assert not report.ran and _first(report).startswith("✗ no verdict: the step did not run to the end (ran once, on "
                                                         "meta copies of your objects: nothing ran for real)")
    assert "test_did_not_run.py:" in report.stopped and "pass device='cpu'" in report.stopped
    assert not any(f.kind == "graph built for nothing" for f in report.findings)


def test_graph_check_of_none_or_a_wrong_call_has_no_verdict():
    for report in (graph_check(None), graph_check(lambda x: x.sum()), graph_check(nn.Linear, torch.randn(2, 4))):
        assert str(report).startswith("✗ the function did not run, so there is no verdict: ")
        assert report.verdict == "no verdict" and not report.safe and "no hazard seen" not in str(report)
