"""VLA-MultiTask-v0: task drawing, determinism, per-task horizons, the delegating expert."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import vlagym
from vlagym.envs.multitask import MULTITASK_ID

SINGLE_TASKS = sorted(t for t in vlagym.TASKS if t != MULTITASK_ID)


def test_every_task_is_drawn_and_named_in_info(make_env):
    env = make_env(MULTITASK_ID)
    seen = set()
    for seed in range(20 * len(SINGLE_TASKS)):
        _, info = env.reset(seed=seed)
        assert info["task"] in SINGLE_TASKS
        seen.add(info["task"])
    assert seen == set(SINGLE_TASKS)


def test_tasks_kwarg_selects_a_subset(make_env):
    subset = SINGLE_TASKS[:1]
    env = make_env(MULTITASK_ID, tasks=subset)
    for seed in range(5):
        _, info = env.reset(seed=seed)
        assert info["task"] == subset[0]


@pytest.mark.parametrize("tasks", [["VLA-PickCupp-v0"], [], ["VLA-MultiTask-v0"]])
def test_bad_tasks_raise_with_known_names(tasks):
    with pytest.raises(ValueError, match="VLA-PickCup-v0"):
        gym.make(MULTITASK_ID, tasks=tasks)


def test_same_seed_same_task_and_observation(make_env):
    a, b = make_env(MULTITASK_ID), make_env(MULTITASK_ID)
    for seed in (3, 4, 5):
        obs_a, info_a = a.reset(seed=seed)
        obs_b, info_b = b.reset(seed=seed)
        assert info_a["task"] == info_b["task"]
        np.testing.assert_array_equal(obs_a, obs_b)


def test_episode_is_truncated_at_the_drawn_tasks_horizon(make_env):
    env = make_env(MULTITASK_ID, tasks=["VLA-PickCup-v0"])
    horizon = gym.spec("VLA-PickCup-v0").max_episode_steps
    assert env.spec.max_episode_steps >= horizon
    env.reset(seed=0)
    steps, truncated = 0, False
    while not truncated and steps <= horizon:
        _, _, terminated, truncated, _ = env.step(np.zeros(env.action_space.shape, np.float32))
        steps += 1
        assert not terminated
    assert truncated and steps == horizon


def test_kwargs_reach_every_task(make_env):
    env = make_env(MULTITASK_ID, obs_mode="rgb", image_size=24, cameras=("wrist",))
    obs, _ = env.reset(seed=0)
    assert set(obs["images"]) == {"wrist"} and obs["images"]["wrist"].shape == (24, 24, 3)
    assert obs["instruction"] == env.unwrapped.instruction


def test_expert_delegates_to_the_drawn_task(make_env):
    env = make_env(MULTITASK_ID)
    expert = vlagym.make_expert(env)
    tasks = set()
    for seed in range(len(SINGLE_TASKS) + 2):
        obs, info = env.reset(seed=seed)
        expert.reset()
        tasks.add(info["task"])
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(expert(obs))
            done = terminated or truncated
        assert info["success"], f"seed {seed}: expert failed on {info['task']}"
