"""How well the scripted experts solve their tasks: the check behind every demonstration set."""

from __future__ import annotations

from collections.abc import Iterable

import gymnasium as gym

import vlagym
from vlagym.eval.stats import wilson_interval

__all__ = ["expert_outcomes", "wilson_interval"]  # wilson_interval lives in stats; kept importable here


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
