"""Lesson 06's exercise checker (exercise.py)."""
import pytest
import torch

from lessons_lib import roofline
from lessons_lib.lesson06_data_movement import exercise

SIM = getattr(torch.cuda, "_course_simulated", None)
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
SMALL = (32, 16, 64)  # pieces, rows, cols: the speed line's shape in these tests (the GPU's is 256, 256, 1024)


@pytest.fixture(autouse=True)
def _small_gpu_timing(monkeypatch):
    """Under the simulated GPU the checker's [GPU] speed line runs at SMALL for a second: at the GPU's shape the
    starter's cats copy 34 GB on the CPU beneath (the same code path; the gpu claim tests time the real one)."""
    real = exercise.speed_check
    monkeypatch.setattr(exercise, "speed_check",
                        lambda fn, device, shape=SMALL, max_time=1.0: real(fn, device, shape, max_time=max_time))


@pytest.mark.parametrize("device", DEVICES)
def test_the_starter_checked_against_itself_is_never_called_faster(device):
    # The same code scored 0.8× and 0.6× against itself on the H200, one timing a side. Paired rounds cannot
    # call it faster than itself (no time is asserted: only that it fails).
    name, ok, detail = exercise.speed_check(exercise.exercise_starter, device, SMALL, max_time=1.5)
    assert name == f"at least {exercise.GPU_SPEEDUP_BAR:g}× faster than the starter at {SMALL[0]} pieces"
    assert ok is False, detail
    assert "paired rounds" in detail or detail.startswith("not decided on this run"), detail


def _solution(*pieces):
    return torch.cat([p / p.abs().amax().clamp_min(1e-6) for p in pieces])


def _preallocate_solution(*pieces):
    out = pieces[0].new_empty(sum(p.shape[0] for p in pieces), pieces[0].shape[1])
    start = 0
    for p in pieces:
        out[start:start + p.shape[0]] = p / p.abs().amax().clamp_min(1e-6)
        start += p.shape[0]
    return out


def _sync_once(*pieces):  # one sync for the whole batch: allowed (it does not grow with n)
    scales = torch.stack([p.abs().amax() for p in pieces]).clamp_min(1e-6)
    if not bool(torch.isfinite(scales).all()):
        raise ValueError("a piece holds inf or NaN")
    return torch.cat([p / s for p, s in zip(pieces, scales)])


def test_checker_fails_the_starter_on_syncs_and_bytes_not_correctness():
    v = exercise.check_exercise(exercise.exercise_starter)
    assert [ok for _n, ok, _d in v.checks[:3]] == [True, False, False]
    assert "scale = p.abs().max().item()" in v.checks[1][2]
    assert not v.passed


@pytest.mark.parametrize("fn", [_solution, _preallocate_solution, _sync_once])
def test_checker_passes_correct_rewrites(fn):
    # Every machine-independent line; the [GPU] speed line is a timing (under the simulated GPU, at SMALL on a CPU)
    v = exercise.check_exercise(fn).on_every_machine()
    assert v.passed, str(v)


@pytest.mark.parametrize("fn, failing", [
    (lambda *p: torch.cat(p), "matches the float64"),  # forgot the scaling
    (lambda *p: torch.cat(p)[:1], "runs and returns"),
    (lambda *p: 1 / 0, "runs and returns"),
    (lambda *p: torch.cat([q / 0 for q in p]), "matches the float64"),  # inf
    (lambda *p: [q.div_(q.abs().max()) for q in p][0], "runs and returns"),  # writes into its inputs
    ("not a function", "is a function"),
])
def test_checker_turns_wrong_code_into_a_failed_line(fn, failing):
    v = exercise.check_exercise(fn)
    assert not v.passed
    assert any(not ok and name.startswith(failing) for name, ok, _d in v.checks), str(v)


# --- the [GPU] speed bar against its model (run everywhere) -------------------------------------------
@pytest.mark.parametrize("gpu", ["T4", "A100", "H100", "H200"])
def test_the_speed_bar_is_a_regression_bar_at_the_models_slow_host_limit(gpu):
    # A regression bar (set after the H200 measured 2.27×), not a prediction: it asks no more than the model's
    # ratio for ANY host's cost per op, within 0.2% (6 ops a piece against 4, 1.4985× at 256 pieces).
    assert exercise.slow_host_limit(gpu) == pytest.approx(exercise.GPU_SPEEDUP_BAR, rel=2e-3)
    assert exercise.predicted_ratio(gpu) > exercise.GPU_SPEEDUP_BAR  # at the H200 host's cost per op


def test_the_speed_model_knows_both_sides_launch_the_same_ops():
    from lessons_lib.roofline import DATASHEET

    h200 = DATASHEET["H200"][4] * 1e9
    starter, solution = exercise.speed_model(h200)
    assert 2.5 < starter / solution < 4  # 3.3× at the H200 host's 7.3 µs an op; the H200 measured 2.27×
    assert solution < 1.1 * 1024 * exercise.HOST_OP  # the solution is host-bound: four ops a piece
    slow = exercise.speed_model(h200, 100 * exercise.HOST_OP)
    assert slow[0] / slow[1] < 1.6  # a very slow host: the same four ops a piece, the ratio towards 1.5 (its syncs)
    assert exercise.HOST_OP == roofline.ASSUMED_LAUNCH["H200"]  # one measured figure, not a copy of it


@pytest.mark.skipif(not SIM, reason="needs the simulated GPU: -p tests.simgpu --simulate-gpu=t4")
def test_the_gpu_speed_line_times_fewer_pieces_on_a_gpu_too_slow_for_ten_rounds_of_the_starter_in_its_budget():
    # At 256 pieces a T4's starter is ~0.27 s a call (its quadratic cats at 320 GB/s): the noise rule's 10 paired
    # rounds took ~26 s, past the checker's 20 s, so a T4 reader's correct answer could never pass.
    n, rows, cols = exercise.gpu_speed_shape("cuda")
    bandwidth = roofline.datasheet(torch.cuda.get_device_name()).bandwidth
    starter = exercise.speed_model(bandwidth, 2 * exercise.HOST_OP, (n, rows, cols))[0]
    assert (rows, cols) == exercise.GPU_SPEED_SHAPE[1:] and starter <= exercise.SPEED_CALL_S
    assert n == {"t4": 128, "h100": 256}[SIM]  # a fast GPU keeps the shape the claim tests time
    assert exercise.gpu_speed_shape("cpu") == exercise.GPU_SPEED_SHAPE

