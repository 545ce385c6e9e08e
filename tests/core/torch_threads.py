"""An autouse fixture for test modules that run torch: one intra-op thread.

The networks in these tests are tiny; a second OpenMP thread buys nothing and, on a
shared 2-core machine, makes every op spin against the other processes (5-10x slower).
Import it into a test module to apply it there.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
