"""Every cold compile says what is compiling and how long it can take before it starts (issue 34: a cell sat
55 s without output); on an explorer's worker thread it stays silent (the status names the phase there)."""
import threading

import torch

from lessons_lib import compile_notice, compiling


def _times_two_plus_one(x):
    return x * 2 + 1


def test_a_cold_compile_is_announced_before_it_starts(capsys):
    printed_before = []

    def backend(gm, _example_inputs):  # runs during the first call: what was printed by then?
        printed_before.append(capsys.readouterr().out)
        return gm.forward

    compiling.reset()
    c = compiling.compile_cold(_times_two_plus_one, torch.ones(3), backend=backend, busy_s=42.0)
    assert c.ok and printed_before
    line = printed_before[0]
    assert line.startswith("Compiling _times_two_plus_one (torch.compile") and line.count("\n") == 1
    assert f"about 42 s on a 2-core machine with {compile_notice.BUSY_LOAD} (measured" in line
    assert "a student's at load 6-7, reported" in line  # the busier laptop's figure, labelled


def test_the_backends_figure_is_the_default_and_a_gpu_says_so(capsys):
    compile_notice.announce("f", "inductor", torch.device("cpu"))
    assert f"about {compile_notice.BY_BACKEND['inductor']:.0f} s on a 2-core machine" in capsys.readouterr().out
    compile_notice.announce("f", "inductor", torch.device("cuda"))
    assert "H200" in capsys.readouterr().out


def test_an_explorers_worker_thread_compiles_silently(capsys):
    worker = threading.Thread(target=compile_notice.announce, args=("f", "inductor", torch.device("cpu")))
    worker.start()
    worker.join()
    assert capsys.readouterr().out == ""
