"""Fixtures of the RL tests: tiny BC checkpoints, a tiny demo file, expert-collected rounds, one torch thread."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rl_helpers import TASK, ExpertActor, make_bc_checkpoint

from vlagym.train.demos import DemoConfig, collect_demos


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


@pytest.fixture
def expert_collects(monkeypatch):
    """Make filtered BC's rounds collect with the scripted expert, so every try succeeds: ``expert_collects()``;
    ``expert_collects(edit)`` also passes each round's `Collection` through ``edit(collection, envs, actor, seeds)``
    (the actor is the one filtered BC made, e.g. to tell the retry pass from the first)."""
    import vlagym.rl.filtered_bc as fbc

    real = fbc.collect_round

    def install(edit=None):
        def collect(envs, actor, seeds):
            collection = real(envs, ExpertActor(envs), seeds)
            return collection if edit is None else edit(collection, envs, actor, seeds)

        monkeypatch.setattr(fbc, "collect_round", collect)

    return install


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("demos") / "pick.hdf5"
    collect_demos(DemoConfig(task=TASK, episodes=2, image_size=32, out=str(path), progress=False))
    return path
