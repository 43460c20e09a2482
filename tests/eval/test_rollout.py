"""Vectorised rollouts: every seed gets its episode, whichever sub-env runs it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import vlagym
from vlagym.eval.rollout import VectorExpert, make_rollout_envs, run_episodes

SEEDS = [5, 3, 11, 7, 0]


def single_env_records(env_id: str, seeds, **kwargs) -> list[tuple]:
    env = gym.make(env_id, **kwargs)
    expert = vlagym.make_expert(env)
    out = []
    for seed in seeds:
        _, info = env.reset(seed=seed)
        expert.reset()
        instruction, total, steps, done = info["instruction"], 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(expert(None))
            total, steps, done = total + reward, steps + 1, terminated or truncated
        out.append((seed, instruction, info["success"], steps, total))
    env.close()
    return out


@pytest.mark.parametrize("num_envs", [1, 2, 3])
def test_records_match_single_env_episodes_for_any_num_envs(num_envs):
    expected = single_env_records("VLA-PickCup-v0", SEEDS)
    envs = make_rollout_envs("VLA-PickCup-v0", num_envs)
    expert = VectorExpert(envs)
    records = run_episodes(envs, expert, SEEDS, on_episode_start=expert.reset, progress=False)
    envs.close()
    got = [(r.seed, r.instruction, r.success, r.length, r.episode_return) for r in records]
    assert [g[:4] for g in got] == [e[:4] for e in expected]
    np.testing.assert_allclose([g[4] for g in got], [e[4] for e in expected], rtol=0, atol=1e-9)
    assert all(r.task == "VLA-PickCup-v0" for r in records)


def test_failures_and_return_are_recorded():
    envs = make_rollout_envs("VLA-PickCup-v0", 2, max_episode_steps=8)
    records = run_episodes(envs, lambda obs: np.zeros((2, 7), np.float32), [1, 2, 3], progress=False)
    envs.close()
    assert [r.length for r in records] == [8, 8, 8]
    assert not any(r.success or r.success_at_end for r in records)


def test_multitask_records_name_the_drawn_task():
    envs = make_rollout_envs("VLA-MultiTask-v0", 2)
    expert = VectorExpert(envs)
    records = run_episodes(envs, expert, range(4), on_episode_start=expert.reset, progress=False)
    envs.close()
    assert all(r.task in vlagym.TASKS and r.task != "VLA-MultiTask-v0" for r in records)
    assert all(r.success for r in records)


def test_autoresetting_envs_are_refused():
    envs = gym.make_vec("VLA-PickCup-v0", num_envs=2)
    with pytest.raises(ValueError, match="make_rollout_envs"):
        run_episodes(envs, lambda obs: np.zeros((2, 7), np.float32), [0], progress=False)
    envs.close()


def test_vector_expert_needs_sync_envs():
    envs = make_rollout_envs("VLA-PickCup-v0", 2, vectorization_mode="async")
    try:
        with pytest.raises(ValueError, match="sync"):
            VectorExpert(envs)
    finally:
        envs.close()
