"""Lesson 06, claim 5 (evidence_grad.py): no_grad and inference_mode."""

from lessons_lib.lesson06_data_movement import evidence_grad


def test_no_grad_and_inference_mode_save_nothing_for_backward():
    b, w, d = 256, 512, 3
    saved = evidence_grad.saved_bytes(b, w, d)
    assert saved["no_grad"] == 0 and saved["inference_mode"] == 0
    assert saved["with autograd"] == d * b * w * 4  # each ReLU's output (also the next Linear's input)


def test_the_three_grad_modes_compute_the_same_output():
    assert evidence_grad.grad_modes_agree() < 1e-5


def test_the_grad_mode_verdict_goes_through_the_noise_rule(one_thread):
    cmp, said = evidence_grad.grad_mode_verdict("cpu", batch=2, width=8, depth=1, max_time=0.5)
    r = cmp.ratio("with autograd", "inference_mode")
    assert ("not decided on this run" in said) == (not r.decided)
