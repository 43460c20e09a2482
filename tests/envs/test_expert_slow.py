"""The scripted expert is a reliable demonstration source (run with `pytest -m slow`)."""

from __future__ import annotations

import pytest

import vlagym

# Never used while tuning the expert or the task: an honest held-out estimate.
SEEDS = range(100_000, 100_200)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(vlagym.TASKS))
def test_expert_success_rate(env_id, make_env):
    env = make_env(env_id)
    expert = vlagym.make_expert(env)
    failures = []
    for seed in SEEDS:
        obs, info = env.reset(seed=seed)
        expert.reset()
        terminated = truncated = False
        while not (terminated or truncated):
            obs, _, terminated, truncated, info = env.step(expert(obs))
        if not info["success"]:
            failures.append(seed)
    rate = 1.0 - len(failures) / len(SEEDS)
    assert rate >= 0.95, f"{env_id}: expert success {rate:.1%} < 95%; failing seeds: {failures}"
