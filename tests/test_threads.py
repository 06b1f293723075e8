"""setup()'s thread fit: one CPU thread when torch's threads are slower than one here, now. The clock is
scripted (a fake `timing.measure`), so the outcome does not depend on how busy the test machine is."""
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
    """measure() answers `seconds_on[threads]` for the probe, and records which thread counts it timed."""
    asked = []

    def fake_measure(fn, *args, num_threads=None, **kw):
        asked.append(num_threads)
        s = seconds_on[num_threads]
        return timing.Timing("probe", s, 0.0, [s] * 3, 1, "scripted", "cpu")

    monkeypatch.setattr(timing, "measure", fake_measure)
    return asked


def test_a_busy_machine_gets_one_thread_and_a_sentence(monkeypatch, restore_threads):
    monkeypatch.setattr(device, "CPU_THREADS", 4)
    asked = _scripted(monkeypatch, {4: 0.0036, 1: 0.0011})
    text = device.fit_cpu_threads()
    assert torch.get_num_threads() == 1
    assert "1 thread, not 4" in text and "3.6 ms on 4 threads, 1.1 ms on 1" in text
    assert "torch.set_num_threads(4)" in text
    assert asked == [4, 1, 1, 4, 4, 1]  # alternating rounds


def test_a_free_machine_keeps_every_thread(monkeypatch, restore_threads):
    monkeypatch.setattr(device, "CPU_THREADS", 2)
    _scripted(monkeypatch, {2: 0.0011, 1: 0.0010})  # within 10%: not worth a change
    torch.set_num_threads(1)  # a previous fit on a busy moment is undone first
    assert device.fit_cpu_threads() == ""
    assert torch.get_num_threads() == 2


def test_setup_prints_the_fit_only_on_a_cpu(monkeypatch, restore_threads, capsys):
    calls = []
    monkeypatch.setattr(device, "fit_cpu_threads", lambda: calls.append(1) or "Busy CPU: scripted")
    monkeypatch.setattr(device, "pick", lambda *a: torch.device("cpu"))
    lessons_lib.setup()
    assert calls and "Busy CPU: scripted" in capsys.readouterr().out
