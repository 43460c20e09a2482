"""Every task id is registered the way Gymnasium users expect."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import EnvSpec

import vlagym
from vlagym.envs.multitask import MultiTaskEnv

ENV_IDS = sorted(vlagym.TASKS)


def test_at_least_one_task_registered():
    assert "VLA-PickCup-v0" in ENV_IDS
    for env_id in ENV_IDS:
        assert env_id in gym.registry, f"{env_id} is in vlagym.TASKS but not registered with Gymnasium"


def test_register_envs_is_idempotent():
    before = {env_id: gym.spec(env_id) for env_id in ENV_IDS}
    vlagym.register_envs()  # must not raise or warn about re-registration
    assert {env_id: gym.spec(env_id) for env_id in ENV_IDS} == before


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_after_import(env_id, make_env):
    env = make_env(env_id)
    assert isinstance(env.unwrapped, (vlagym.VLAEnv, MultiTaskEnv))
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_with_module_prefix_in_fresh_interpreter(env_id):
    code = textwrap.dedent(
        f"""
        import sys
        import gymnasium as gym

        assert "vlagym" not in sys.modules, "vlagym was imported before gym.make"
        env = gym.make("vlagym:{env_id}")
        obs, info = env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert "vlagym" in sys.modules
        assert env.spec.id == "{env_id}", env.spec.id
        env.close()
        print("OK")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("OK")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_spec_has_time_limit_and_json_kwargs(env_id, make_env):
    spec = gym.spec(env_id)
    assert isinstance(spec.max_episode_steps, int) and spec.max_episode_steps > 0
    assert isinstance(spec.entry_point, str), "entry points must be strings so specs stay serialisable"
    json.dumps(spec.kwargs)
    # A made env with kwargs round-trips through its JSON spec.
    env = make_env(env_id, obs_mode="rgb", image_size=32, cameras=["front"])
    restored = EnvSpec.from_json(env.spec.to_json())
    assert restored.kwargs == {"obs_mode": "rgb", "image_size": 32, "cameras": ["front"]}
    assert restored.max_episode_steps == spec.max_episode_steps


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_time_limit_truncates_at_max_episode_steps(env_id, make_env):
    env = make_env(env_id)
    max_steps = env.spec.max_episode_steps
    env.reset(seed=0)
    hold = np.zeros(7, np.float32)  # a still arm never succeeds
    for t in range(1, max_steps + 1):
        _, _, terminated, truncated, _ = env.step(hold)
        assert not terminated
        assert truncated == (t == max_steps), f"truncated={truncated} at step {t} of {max_steps}"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_vec_sync_steps(env_id):
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")
    try:
        obs, info = envs.reset(seed=[0, 1])
        assert obs.shape == (2, *envs.single_observation_space.shape)
        assert not np.array_equal(obs[0], obs[1])
        for _ in range(3):
            obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        assert envs.observation_space.contains(obs)
        assert reward.shape == terminated.shape == truncated.shape == (2,)
        assert info["success"].shape == (2,)
    finally:
        envs.close()
