"""Helpers the per-task test files share: run a scripted-expert episode, find a word in an instruction."""

from __future__ import annotations

import re

import vlagym


def run_expert(env, seed: int, max_steps: int | None = None, until_success: bool = False, perturb=None) -> list[tuple]:
    """(obs, reward, terminated, truncated, info) per step of one expert episode.

    `max_steps` defaults to the registered horizon; `perturb(base_env, expert, t)` runs before step t.
    """
    expert = vlagym.make_expert(env)
    obs, _ = env.reset(seed=seed)
    expert.reset()
    steps = []
    for t in range(max_steps or env.spec.max_episode_steps):
        if perturb is not None:
            perturb(env.unwrapped, expert, t)
        obs, reward, terminated, truncated, info = env.step(expert(obs))
        steps.append((obs, reward, terminated, truncated, info))
        if terminated or truncated or (until_success and info["success"]):
            break
    return steps


def names(text: str, word: str) -> bool:
    """`word` appears in `text` as a whole word."""
    return re.search(rf"\b{re.escape(word)}\b", text) is not None
