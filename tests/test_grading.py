"""Exercise verdicts (grading.py): Verdict lines, GPU-only lines, call_for_tensor."""
import torch

from lessons_lib.grading import Verdict


def test_verdict():
    v = Verdict("x")
    v.check("one", True)
    v.skip("gpu", "no CUDA")
    assert v.passed
    assert "✓ one" in str(v)
    assert "– gpu" in str(v)
    v.check("two", False, "why")
    assert not v.passed
    assert "✗ two (why)" in str(v)
    assert not Verdict("empty").passed


def test_a_verdict_on_every_machine_drops_only_the_gpu_lines():
    v = Verdict("x")
    v.check("correct", True)
    v.on_gpu("fast enough", False, "0.4×")
    assert not v.passed
    portable = v.on_every_machine()
    assert portable.passed and [n for n, _ok, _d in portable.checks] == ["correct"]
    assert len(v.checks) == 2  # the original keeps its [GPU] line


def test_call_for_tensor_turns_wrong_returns_into_one_line():
    from lessons_lib.grading import call_for_tensor

    out, problem = call_for_tensor(lambda x: x * 2, torch.ones(2, 3), shape=(2, 3))
    assert problem is None
    assert torch.equal(out, torch.full((2, 3), 2.0))
    _, problem = call_for_tensor(lambda x: x.tolist(), torch.ones(2, 3), shape=(2, 3))
    assert problem == "your function returned list, not a tensor"
    _, problem = call_for_tensor(lambda x: x.t(), torch.ones(2, 3), shape=(2, 3), shape_name="(B, N)")
    assert problem == "output shape (3, 2), expected (B, N) = (2, 3)"


# --- speed_check: a checker's speed line from paired rounds -------------------------------------------
import pytest  # noqa: E402

from lessons_lib import grading, noise, timing  # noqa: E402

SIM = getattr(torch.cuda, "_course_simulated", None)


def _rounds(monkeypatch, starter, yours):
    """noise.compare as if its paired rounds had measured these times (seconds), one per round."""
    monkeypatch.setattr(noise, "compare", lambda fns, **kw: noise.Comparison({"starter": starter, "yours": yours}))


def test_speed_check_passes_only_a_decided_win_that_reaches_the_bar(monkeypatch):
    _rounds(monkeypatch, [2.0, 2.1, 1.9, 2.0, 2.05] * 2, [1.0] * 10)
    name, ok, detail = grading.speed_check("fast", lambda: None, lambda: None, 1.3, "cpu")
    assert ok is True and detail.startswith("2.00×, decidedly faster: median of 10 paired rounds, 99.5% interval 1.9")
    _rounds(monkeypatch, [1.2, 1.21, 1.19, 1.2, 1.22] * 2, [1.0] * 10)  # decided, but under the bar
    assert grading.speed_check("fast", lambda: None, lambda: None, 1.3, "cpu")[1] is False


def test_a_pass_rests_on_the_noise_rules_count_of_rounds(monkeypatch):
    # three rounds that all lean one way: on a loaded machine chance gives that to the same code a quarter of the
    # time (1.58x over 3 rounds for lesson 06's starter against itself, simulated GPU). No interval is that sure.
    _rounds(monkeypatch, [1.6, 1.58, 1.4], [1.0] * 3)
    _name, ok, detail = grading.speed_check("fast", lambda: None, lambda: None, 1.5, "cpu", max_time=1.5)
    assert ok is False and detail.startswith("not decided on this run: 3 paired rounds, and the noise rule needs 10")


def test_the_starter_timed_once_a_side_can_look_fast_but_paired_rounds_refuse_it(monkeypatch):
    # The H200's "✓ 2.0×" for the untouched starter: one lucky round. Rounds that disagree decide nothing.
    _rounds(monkeypatch, [2.0, 0.6, 1.0, 1.7, 0.9] * 2, [1.0] * 10)
    _name, ok, detail = grading.speed_check("fast", lambda: None, lambda: None, 1.3, "cpu")
    assert ok is False
    assert detail.startswith("not decided on this run: 10 paired rounds put it at 0.6–2× (99.5% interval)")
    # the median reaches the bar, but a third of the rounds found the two equal: the interval reaches 1, so it
    # is not a decided win (the median alone would have passed it)
    rounds = [1.0, 1.0, 1.0, 1.3, 1.31, 1.31, 1.32, 1.35, 1.37, 1.0]
    _rounds(monkeypatch, rounds, [1.0] * 10)
    r = noise.Ratio(rounds)
    assert not r.decided and r.median >= 1.3 and r.low <= 1.0
    assert grading.speed_check("fast", lambda: None, lambda: None, 1.3, "cpu")[1] is False


def test_a_win_short_of_the_bar_at_the_first_look_runs_to_the_last():
    # Decided faster at 10 rounds with the estimate at 1.45×, under a 1.5× bar its interval still reaches: the
    # check takes the rule's second look (no third), where the estimate is 1.5×.
    ten = [1.4, 1.5, 1.45, 1.4, 1.5, 1.45, 1.4, 1.5, 1.45, 1.42]
    assert not grading._settled(noise.Comparison({"starter": ten, "yours": [1.0] * 10}), 1.5)
    assert grading._settled(noise.Comparison({"starter": ten, "yours": [1.0] * 10}), 1.4)  # passes: stop
    assert grading._settled(noise.Comparison({"starter": [1.0] * 10, "yours": [1.0] * 10}), 1.5)  # a tie: stop
    rounds = iter(ten + [1.6, 1.55, 1.6, 1.5, 1.55])
    draws = {"n": 0}

    def measure(fn, label=None, **_kw):
        draws["n"] += 1
        t = next(rounds) * 1e-3 if label == "starter" else 1e-3
        return timing.Timing(label, t, 0.0, [t], 1, "scripted", "cpu")

    real = timing.measure
    timing.measure = measure
    try:
        _name, ok, detail = grading.speed_check("fast", None, None, 1.5, "cpu")
    finally:
        timing.measure = real
    assert draws["n"] == 30 and ok is True and detail.startswith("1.50×, decidedly faster: median of 15 paired")


def test_speed_check_turns_the_readers_errors_into_the_detail():
    def boom():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\nmore lines")

    _name, ok, detail = grading.speed_check("fast", lambda: None, boom, 1.3, "cpu", max_time=1)
    assert ok is False and detail == "timing raised RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not SIM, reason="needs the simulated GPU: -p tests.simgpu --simulate-gpu=t4"))])
def test_the_same_code_against_itself_is_never_called_faster(device):
    # Real paired rounds (no assertion on a time): a decided win needs the rule's interval above 1 and a median at
    # the bar, which the same code gives itself at most 1 time in 200 (test_noise_rates.py).
    x = torch.randn(64, 64, device=device)
    for _ in range(3):
        _name, ok, detail = grading.speed_check("fast", lambda: x @ x, lambda: x @ x, 1.15, device, max_time=1.0)
        assert ok is False, detail


def test_precision_label_names_tf32_only_where_cublas_or_cudnn_may_use_it():
    assert grading.precision_label("cpu") == "float32 GEMMs in full float32"
    assert grading.precision_label("cpu", "conv") == "float32 convolutions in full float32"
    if SIM == "t4":  # compute capability 7.5: no TF32 whatever the flags
        torch.backends.cudnn.allow_tf32 = True
        assert grading.precision_label("cuda", "conv") == "float32 convolutions in full float32"
    if SIM == "h100":
        before = torch.get_float32_matmul_precision()
        try:
            torch.set_float32_matmul_precision("highest")
            assert grading.precision_label("cuda") == "float32 GEMMs in full float32"
            torch.set_float32_matmul_precision("high")
            assert grading.precision_label("cuda") == "float32 GEMMs in TF32 (cuBLAS)"
        finally:
            torch.set_float32_matmul_precision(before)


LIMIT = 300  # a trace's first call on a machine at load 14 ran past the reader's 20 s: no clock is under test here


def test_analyse_reader_finds_an_input_changed_in_place_on_either_path():
    # Lesson 04's checker passed code that zeroed its bias after computing, except when traced on meta.
    def zeroes(x, b):
        with torch.no_grad():
            b.zero_()
        return x + 1

    def make(device):
        return torch.ones(3, device=device), torch.ones(3, device=device)

    _r, where, problem = grading.analyse_reader(lambda x, b: zeroes(x, b), make, check_inputs=True, limit=LIMIT)
    assert where == "meta" and "changed input 1 in place" in problem  # meta: the version counter
    assert grading.check_name(problem, "can be traced") == "leaves its inputs as they were"

    def zeroes_values(x, b):  # .data has its own version counter: only values can tell, on the CPU
        if x.device.type == "meta":
            raise RuntimeError("reads values")
        b.data.zero_()
        return x + 1

    _r, where, problem = grading.analyse_reader(lambda x, b: zeroes_values(x, b), make, check_inputs=True,
                                                limit=LIMIT)
    assert where == "cpu" and "changed input 1 in place" in problem
    # opt-in: old callers unchanged
    _r, _where, problem = grading.analyse_reader(lambda x, b: zeroes(x, b), make, limit=LIMIT)
    assert problem is None
