"""setup()'s thread fit: the noise rule on a step (by default many small parallel ops), all of torch's threads
against one in paired rounds; one thread unless all are decided not slower. The clock is scripted (a fake
`timing.measure`), so the outcome does not depend on how busy the test machine is."""
import itertools

import pytest
import torch

import lessons_lib
from lessons_lib import device, timing


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _scripted(monkeypatch, seconds_on):
    """measure() answers the next of `seconds_on[threads]` (a list, cycled) and records which thread counts it
    timed, and which step."""
    asked, steps = [], []
    cycles = {k: itertools.cycle(v if isinstance(v, list) else [v]) for k, v in seconds_on.items()}

    def fake_measure(fn, *args, num_threads=None, **kw):
        asked.append(num_threads)
        steps.append(fn)
        s = next(cycles[num_threads])
        return timing.Timing("probe", s, 0.0, [s] * 3, 1, "scripted", "cpu")

    monkeypatch.setattr(timing, "measure", fake_measure)
    return asked, steps


def test_a_busy_machine_gets_one_thread_and_a_sentence(monkeypatch, restore_threads):
    monkeypatch.setattr(device, "CPU_THREADS", 4)
    asked, _steps = _scripted(monkeypatch, {4: 0.0036, 1: 0.0011})
    text = device.fit_cpu_threads()
    assert torch.get_num_threads() == 1
    assert "1 thread, not 4" in text and "4 threads took 3.27× one thread's time" in text
    assert "torch.set_num_threads(4)" in text
    assert asked[:4] == [4, 1, 1, 4] and len(asked) >= 6  # paired, alternating rounds


def test_a_free_machine_keeps_every_thread(monkeypatch, restore_threads):
    monkeypatch.setattr(device, "CPU_THREADS", 2)
    _scripted(monkeypatch, {2: 0.0006, 1: 0.0010})  # all threads decided faster
    torch.set_num_threads(1)  # a previous fit on a busy moment is undone first
    assert device.fit_cpu_threads() == ""
    assert torch.get_num_threads() == 2


def test_rounds_that_cannot_decide_get_one_thread_and_say_so(monkeypatch, restore_threads):
    # A busy machine: 2 threads now 3x slower, now 3x faster than one. Undecided is one thread, not all:
    # one thread loses at most the cores' factor, a descheduled thread can cost far more (lesson 07: 10x).
    monkeypatch.setattr(device, "CPU_THREADS", 2)
    _scripted(monkeypatch, {2: [0.003, 0.0003], 1: 0.001})
    text = device.fit_cpu_threads()
    assert torch.get_num_threads() == 1
    assert text.startswith("Timing with 1 thread, not 2: the noise rule did not decide")


def test_a_lesson_decides_on_its_own_step(monkeypatch, restore_threads):
    monkeypatch.setattr(device, "CPU_THREADS", 2)
    _asked, steps = _scripted(monkeypatch, {2: 0.004, 1: 0.001})

    def my_step():
        pass

    threads, said = device.thread_choice(my_step, what="this lesson's training step")
    assert threads == 1 and set(steps) == {my_step}
    assert "on this lesson's training step, 2 threads took 4× one thread's time" in said


def test_setup_prints_the_fit_only_on_a_cpu(monkeypatch, restore_threads, capsys):
    calls = []
    monkeypatch.setattr(device, "fit_cpu_threads", lambda: calls.append(1) or "Busy CPU: scripted")
    monkeypatch.setattr(device, "pick", lambda *a: torch.device("cpu"))
    lessons_lib.setup()
    assert calls and "Busy CPU: scripted" in capsys.readouterr().out
