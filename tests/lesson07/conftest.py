import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One CPU thread, as setup() and record choose on a busy machine: a parallel op on a machine whose cores
    other programs hold waits for its descheduled thread (lesson 07's small ops, 10-100x). Restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
