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


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The tiny VLA runs ~100x faster on one thread than on two contended ones (a busy 2-core machine).

    Per test, restored after it: a session-wide setting would leak into every later test of the run (the BC
    resume test compares an in-process run with a subprocess one, bit for bit, and the thread count changes
    floating-point reduction order)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
