"""Fixtures of the RL tests: tiny BC checkpoints, a tiny demo file, expert-collected rounds, one torch thread."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rl_helpers import ENV, TASK, ExpertActor, make_bc_checkpoint

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
    (the actor is the one filtered BC made)."""
    from vlagym.rl.fbc import collectors

    real = collectors.collect_round

    def install(edit=None):
        def collect(envs, actor, seeds, first=0):
            collection = real(envs, ExpertActor(envs), seeds, first=first)
            return collection if edit is None else edit(collection, envs, actor, seeds)

        monkeypatch.setattr(collectors, "collect_round", collect)

    return install


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("demos") / "pick.hdf5"
    collect_demos(DemoConfig(task=TASK, episodes=2, image_size=32, out=str(path), progress=False))
    return path


@pytest.fixture(scope="session")
def expert_rollouts(tmp_path_factory, bc_checkpoint):
    """Three successful expert episodes (seeds 0, 1, 2), recorded by the collection envs (2 sub-envs) and written
    as a rollout file: (records, episodes, path)."""
    from vlagym.rl.collection.files import write_rollouts
    from vlagym.rl.collection.rollouts import collect_round
    from vlagym.rl.fbc.collect import make_collection_envs
    from vlagym.rl.fbc.config import FilteredBCConfig

    envs = make_collection_envs(FilteredBCConfig(policy=str(bc_checkpoint), n_envs=2, demos=[]), ENV)
    try:
        collection = collect_round(envs, ExpertActor(envs), [0, 1, 2])
    finally:
        envs.close()
    assert collection.hindsight == [] and collection.delayed == []  # no failure, and no replay asked for
    path = tmp_path_factory.mktemp("rollouts") / "round_0000.hdf5"
    write_rollouts(path, collection.successes, TASK, ENV)
    return collection.records, collection.successes, path
