"""Env adapters for SB3: normalised chunk actions, flat observations, truncation signals in the vector env."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from rl_helpers import TASK
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.vec_env.util import check_for_nested_spaces

from vlagym.rl.envs import NormalizedChunkAction, SB3Observation, make_rl_env, make_vec_env
from vlagym.wrappers.chunking import ActionChunking
from vlagym.wrappers.language import Tokenizer


class _Recorder(gym.Env):
    """A 2-D action env recording what it is given; truncates after `limit` steps."""

    observation_space = spaces.Box(-1, 1, (1,), np.float32)
    action_space = spaces.Box(-1, 1, (2,), np.float32)

    def __init__(self, limit: int = 100):
        self.actions: list[np.ndarray] = []
        self.limit, self.t = limit, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.actions.append(np.asarray(action).copy())
        self.t += 1
        return np.zeros(1, np.float32), 0.0, False, self.t >= self.limit, {}


def test_normalized_chunk_action_maps_and_clips():
    inner = _Recorder()
    env = NormalizedChunkAction(ActionChunking(inner, 3), offset=[0.5, -0.1], scale=[2.0, 0.5])
    assert env.action_space.shape == (6,)
    np.testing.assert_allclose(env.action_space.low[:2], [(-1 - 0.5) / 2, (-1 + 0.1) / 0.5])
    np.testing.assert_allclose(env.action_space.high[:2], [(1 - 0.5) / 2, (1 + 0.1) / 0.5])
    env.reset(seed=0)
    env.step(np.array([0.0, 0.0, 0.1, 0.2, 5.0, -5.0], np.float32))
    np.testing.assert_allclose(inner.actions[0], [0.5, -0.1], atol=1e-6)
    np.testing.assert_allclose(inner.actions[1], [0.7, 0.0], atol=1e-6)
    np.testing.assert_allclose(inner.actions[2], [1.0, -1.0])  # clipped to the env's bounds


def test_normalized_chunk_action_binary_gripper_snaps_the_last_entry_like_select_action():
    inner = _Recorder()
    env = NormalizedChunkAction(ActionChunking(inner, 3), offset=[0.0, 0.1], scale=[1.0, 0.5], binary_gripper=True)
    env.reset(seed=0)
    # gripper in env units: 0.1 + 0.5 * (-0.4, -0.1, 0.7) = (-0.1, 0.05, 0.45) -> (-1, +1, +1); arm entries untouched
    env.step(np.array([0.3, -0.4, -0.2, -0.1, 0.1, 0.7], np.float32))
    np.testing.assert_allclose(np.array(inner.actions), [[0.3, -1.0], [-0.2, 1.0], [0.1, 1.0]], atol=1e-6)


def test_binary_gripper_needs_normalised_actions():
    with pytest.raises(ValueError, match="binary_gripper"):
        make_rl_env(TASK, {"obs_mode": "state"}, chunk_size=2, binary_gripper=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(offset=[0.0], scale=[1.0, 1.0]), "shape"),
        (dict(offset=[0.0, 0.0], scale=[1.0, 0.0]), "positive"),
        (dict(offset=[np.nan, 0.0], scale=[1.0, 1.0]), "finite"),
    ],
)
def test_normalized_chunk_action_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NormalizedChunkAction(ActionChunking(_Recorder(), 2), **kwargs)


def test_normalized_chunk_action_needs_a_chunk():
    with pytest.raises(TypeError, match="ActionChunking"):
        NormalizedChunkAction(_Recorder(), offset=[0, 0], scale=[1, 1])


def test_rl_env_observation_is_flat_boxes_sb3_accepts():
    env = make_rl_env(
        TASK,
        {"obs_mode": "rgb+state", "image_size": 32},
        chunk_size=4,
        action_offset=np.zeros(7),
        action_scale=np.ones(7),
        tokenizer=Tokenizer.from_tasks(),
    )
    try:
        space = env.observation_space
        check_for_nested_spaces(space)  # raises on nested dicts
        assert sorted(space.spaces) == ["image_front", "image_wrist", "instruction", "proprio", "state"]
        assert all(isinstance(s, spaces.Box) for s in space.spaces.values())
        assert is_image_space(space["image_front"]) and space["image_front"].shape == (32, 32, 3)
        obs, _ = env.reset(seed=0)
        assert space.contains(obs)
        assert env.action_space.shape == (28,)
    finally:
        env.close()


def test_sb3_observation_refuses_text():
    env = gym.make(TASK, obs_mode="rgb", image_size=32)
    try:
        with pytest.raises(TypeError, match="tokenise"):
            SB3Observation(env)
    finally:
        env.close()


def test_image_observations_need_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        make_rl_env(TASK, {"obs_mode": "rgb", "image_size": 32}, chunk_size=2)


def test_vec_env_marks_chunk_level_truncation():
    """A time limit inside the chunk ends the RL step truncated; the vector env reports it as a timeout with the
    terminal observation, which SB3's PPO bootstraps from."""
    factory = lambda: make_rl_env(TASK, {"obs_mode": "state"}, chunk_size=4, max_episode_steps=6)  # noqa: E731
    envs = make_vec_env(factory, 2)
    try:
        envs.seed(0)
        envs.reset()
        zero = np.zeros((2, 28), np.float32)
        _, _, dones, infos = envs.step(zero)
        assert not dones.any()
        _, _, dones, infos = envs.step(zero)  # steps 5-6 of 6: the second chunk stops after two actions
        assert dones.all()
        for info in infos:
            assert info["TimeLimit.truncated"] and info["actions_executed"] == 2
            assert info["terminal_observation"].shape == (83,)
    finally:
        envs.close()


def test_vec_env_adds_up_its_stepping_time():
    """`TimedVecEnv`: the seconds spent in step_async/step_wait (the env's share of a rollout), nothing else."""
    factory = lambda: make_rl_env(TASK, {"obs_mode": "state"}, chunk_size=4)  # noqa: E731
    envs = make_vec_env(factory, 2)
    try:
        envs.seed(0)
        envs.reset()
        assert envs.seconds == 0.0  # resets are not rollout steps
        start = time.perf_counter()
        envs.step(np.zeros((2, 28), np.float32))
        elapsed = time.perf_counter() - start
        assert 0.0 < envs.seconds <= elapsed
        before = envs.seconds
        time.sleep(0.01)  # time outside the env is not counted
        assert envs.seconds == before
        assert envs.num_envs == 2 and len(envs.envs) == 2  # DummyVecEnv's attributes pass through
    finally:
        envs.close()


def test_unknown_vectorization():
    with pytest.raises(ValueError, match="vectorization"):
        make_vec_env(lambda: _Recorder(), 1, "threads")


def test_reward_scale_multiplies_the_chunk_reward():
    """A dense chunk's summed reward times `reward_scale`: 1/K makes it the mean per-step reward."""
    kwargs = {"obs_mode": "state", "reward_mode": "dense"}
    plain, scaled = (make_rl_env(TASK, kwargs, chunk_size=4, reward_scale=k) for k in (1.0, 0.25))
    try:
        plain.reset(seed=3)
        scaled.reset(seed=3)
        action = np.zeros(plain.action_space.shape, np.float32)
        _, r_plain, *_ = plain.step(action)
        _, r_scaled, *_ = scaled.step(action)
        assert r_plain > 0 and r_scaled == pytest.approx(0.25 * r_plain)
    finally:
        plain.close()
        scaled.close()


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_reward_scale_must_be_positive(bad):
    with pytest.raises(ValueError, match="reward_scale"):
        make_rl_env(TASK, {"obs_mode": "state"}, chunk_size=1, reward_scale=bad)
