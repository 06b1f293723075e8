"""Lesson 06's public functions refuse bad input in one sentence, before allocating anything (issue 28)."""
import pytest
import torch

from lessons_lib import transfers
from lessons_lib.lesson06_data_movement import evidence_grad, evidence_inplace, evidence_layout, evidence_transfers


@pytest.fixture
def no_allocation(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("allocated before refusing")

    for name in ("rand", "randn", "empty", "zeros", "ones"):
        monkeypatch.setattr(torch, name, boom)


@pytest.mark.parametrize("call, match", [
    (lambda: evidence_transfers.transfer_syncs(size=(10**6, 10**6)), "needs about"),
    (lambda: evidence_grad.grad_mode_timings(batch=10**8), "needs about"),
    (lambda: evidence_grad.grad_mode_verdict(batch=10**8), "needs about"),
    (lambda: evidence_layout.layout_timings(batch=10**6), "needs about"),
    (lambda: evidence_layout.layout_verdict(batch=10**6), "needs about"),
    (lambda: evidence_transfers.transfer_syncs(num_iterations=0), "num_iterations must be a whole number"),
    (lambda: evidence_transfers.transfer_syncs(num_iterations=-1), "num_iterations must be a whole number"),
    (lambda: evidence_transfers.seed_example1_timings(num_iterations=0), "num_iterations must be a whole number"),
    (lambda: evidence_transfers.seed_example1_timings(num_iterations=-1), "num_iterations must be a whole number"),
    (lambda: evidence_transfers.seed_example1_verdict(num_iterations=0), "num_iterations must be a whole number"),
    (lambda: evidence_transfers.transfer_syncs(size=(3, -2)), "size must be a tuple"),
    (lambda: evidence_inplace.inplace_timings(n=-5), "n must be a whole number"),
    (lambda: evidence_inplace.inplace_cause(n=0), "n must be a whole number"),
    (lambda: evidence_grad.grad_mode_timings(batch=0), "batch must be a whole number"),
    (lambda: evidence_layout.layout_timings(size=2.5), "size must be a whole number"),
    (lambda: evidence_inplace.inplace_timings("meta"), "not 'meta'"),
    (lambda: evidence_inplace.inplace_timings("mps"), "not 'mps'"),
])
def test_bad_input_is_one_sentence_before_anything_is_allocated(call, match, no_allocation):
    with pytest.raises(ValueError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kw, match", [({"nbytes": -1}, "nbytes must be"), ({"nbytes": 1.5}, "nbytes must be"),
                                       ({"nbytes": 10, "names": ("nosuch",)}, "No datasheet host link"),
                                       ({"nbytes": 10, "names": "T4"}, "names must be a list")])
def test_the_transfer_model_table_refuses_what_it_cannot_model(kw, match):
    with pytest.raises(ValueError, match=match):
        transfers.model_table(**kw)
