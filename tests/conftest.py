"""Shared fixtures: env construction that always closes what it opened."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import gymnasium as gym
import pytest

# Import vlagym before any test module imports mujoco: vlagym picks the headless
# GL backend (MUJOCO_GL=egl), which MuJoCo reads when it is first imported.
import vlagym  # noqa: F401


@pytest.fixture
def make_env() -> Iterator[Callable[..., gym.Env]]:
    """`make_env(env_id="VLA-PickCup-v0", **kwargs)`; every env made is closed at teardown."""
    made: list[gym.Env] = []

    def _make(env_id: str = "VLA-PickCup-v0", **kwargs) -> gym.Env:
        env = gym.make(env_id, **kwargs)
        made.append(env)
        return env

    yield _make
    for env in made:
        env.close()


@pytest.fixture
def in_tmp_dir(tmp_path, monkeypatch):
    """Run in a temporary directory: MuJoCo appends its warnings to ./MUJOCO_LOG.TXT."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
