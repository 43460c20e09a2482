"""How well the scripted experts solve their tasks: the check behind every demonstration set."""

from __future__ import annotations

import math
from collections.abc import Iterable

import gymnasium as gym

import vlagym


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def expert_outcomes(env_id: str, seeds: Iterable[int], **env_kwargs) -> list[bool]:
    """Success of the scripted expert on episode `reset(seed=s)` for each seed (state observations)."""
    env = gym.make(env_id, obs_mode="state", **env_kwargs)
    try:
        expert = vlagym.make_expert(env)
        outcomes = []
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            expert.reset()
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(expert(obs))
                done = terminated or truncated
            outcomes.append(bool(info["success"]))
        return outcomes
    finally:
        env.close()
