"""`gym.make_vec` works for every task and observation mode, instruction text included."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import vlagym

ENV_IDS = sorted(vlagym.TASKS)


def _run(env_id: str, mode: str, obs_mode: str, steps: int = 3) -> None:
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, obs_mode=obs_mode, image_size=24)
    try:
        obs, info = envs.reset(seed=[7, 8])
        assert envs.observation_space.contains(obs)
        for _ in range(steps):
            actions = np.zeros((2, *envs.single_action_space.shape), np.float32)
            obs, reward, terminated, truncated, info = envs.step(actions)
            assert envs.observation_space.contains(obs) and reward.shape == (2,)
        if obs_mode != "state":
            instructions = tuple(obs["instruction"])
            assert len(instructions) == 2 and all(instructions), instructions
            single = gym.make(env_id, obs_mode=obs_mode, image_size=24)
            assert single.reset(seed=7)[0]["instruction"] == instructions[0]
            single.close()
    finally:
        envs.close()


@pytest.mark.parametrize("obs_mode", ["state", "rgb", "rgb+state"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sync_vector_env_every_task_and_obs_mode(env_id, obs_mode):
    _run(env_id, "sync", obs_mode)


@pytest.mark.parametrize("env_id", ["VLA-MultiTask-v0", "VLA-PutCupInDrawer-v0"])
def test_async_vector_env_carries_the_instruction(env_id):
    _run(env_id, "async", "rgb")
