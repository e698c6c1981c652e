import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Small networks run fastest on one thread, above all on a shared, busy CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
