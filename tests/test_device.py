"""device.py: which device, what it is, whether a shape fits, OOM handling, dtype problems."""
import pytest
import torch

from lessons_lib import device


# --- device --------------------------------------------------------------------------------
def test_describe_names_the_machine():
    info = device.describe("cpu")
    assert info.kind == "cpu"
    assert info.torch == torch.__version__
    assert info.threads >= 1
    assert info.date.count("-") == 2
    assert info.slug()
    assert "/" not in info.slug()
    assert torch.__version__ in info.line()


def test_pick_refuses_cuda_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="no usable CUDA"):
        device.pick("cuda")


def test_check_fits_refuses_with_a_sentence():
    device.check_fits(1024, "cpu")
    with pytest.raises(device.DoesNotFit, match="Make a dimension smaller"):
        device.check_fits(2**60, "cpu", what="a huge tensor")


def test_oom_guard_turns_oom_into_does_not_fit_and_keeps_working():
    with pytest.raises(device.DoesNotFit, match="freed"):
        with device.oom_guard("cpu"):
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
    with pytest.raises(RuntimeError, match="unrelated"):  # other errors pass through untouched
        with device.oom_guard("cpu"):
            raise RuntimeError("unrelated failure")
    assert (torch.ones(3) * 2).sum().item() == 6  # and torch still works afterwards


def test_dtype_and_compile_problems_are_sentences_or_none():
    assert device.dtype_problem(torch.float32, "cpu") is None
    problem = device.compile_problem()
    assert problem is None or problem.endswith(".")


def test_bf16_is_refused_on_a_gpu_without_bf16_hardware(monkeypatch):
    # is_bf16_supported() counts emulation by default: True on a T4 (compute capability 7.5)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert "no bfloat16 hardware" in device.dtype_problem(torch.bfloat16, torch.device("cuda"))


# --- issue 28 §5: a device the course cannot use is one sentence, before anything runs -----------------
@pytest.mark.parametrize("bad", ["nonsense", 3, 2.5, True, "mps", "xpu"])
def test_pick_refuses_in_one_line(bad):
    with pytest.raises(ValueError) as err:
        device.pick(bad)
    assert "\n" not in str(err.value) and "'cpu'" in str(err.value)


def test_pick_lets_meta_through_for_shape_only_analyses():
    assert device.pick("meta").type == "meta"


def test_pick_refuses_a_gpu_index_this_machine_lacks():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU, real or simulated (-p tests.simgpu)")
    with pytest.raises(ValueError, match=r"'cuda:7': this machine has 1 CUDA GPU \(cuda:0\)"):
        device.pick("cuda:7")
    assert device.pick("cuda:0").index == 0
