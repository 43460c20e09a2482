"""Fixtures of the RL tests: tiny BC checkpoints, one torch thread."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rl_helpers import make_bc_checkpoint


@pytest.fixture(scope="session")
def bc_checkpoint(tmp_path_factory) -> Path:
    return make_bc_checkpoint(tmp_path_factory.mktemp("bc") / "ckpt")


@pytest.fixture(scope="session")
def flow_checkpoint(tmp_path_factory) -> Path:
    return make_bc_checkpoint(tmp_path_factory.mktemp("bc_flow") / "ckpt", head="flow")


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """The tiny VLA runs ~100x faster on one thread than on two contended ones (a busy 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
