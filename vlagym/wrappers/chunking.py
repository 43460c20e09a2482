"""Action chunking: one step of the wrapped env executes a chunk of K actions in order."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ActionChunking(gym.Wrapper):
    """The env takes a chunk of `chunk_size` actions, shape ``(K, *action_shape)``, and runs them in order.

    Execution stops at the first step that ends the episode (terminated or
    truncated, e.g. by an inner `TimeLimit`); the rest of the chunk is dropped.
    `step` returns the last observation, the summed (undiscounted) reward, the
    last executed step's `terminated`/`truncated`, and that step's `info` plus:

    * ``"actions_executed"``: how many actions of the chunk ran (1..K);
    * ``"step_rewards"``: their rewards, in order;
    * ``"step_infos"``: their infos, in order.

    One step of this env spans K control steps, so ``metadata["render_fps"]`` is
    divided by K (a video recorded outside this wrapper plays at real time).
    """

    def __init__(self, env: gym.Env, chunk_size: int):
        super().__init__(env)
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
            raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
        space = env.action_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"ActionChunking needs a Box action space, got {space}")
        self.chunk_size = int(chunk_size)
        k = self.chunk_size
        self.action_space = spaces.Box(
            np.broadcast_to(space.low, (k, *space.shape)),
            np.broadcast_to(space.high, (k, *space.shape)),
            (k, *space.shape),
            space.dtype,
        )
        fps = env.metadata.get("render_fps")
        if fps:
            self.metadata = {**env.metadata, "render_fps": fps / k}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        chunk = np.asarray(action)
        if chunk.shape != self.action_space.shape:
            raise ValueError(
                f"action chunk must have shape {self.action_space.shape} (chunk_size, *action_shape), got {chunk.shape}"
            )
        rewards: list[float] = []
        infos: list[dict[str, Any]] = []
        for a in chunk:
            obs, reward, terminated, truncated, info = self.env.step(a)
            rewards.append(float(reward))
            infos.append(info)
            if terminated or truncated:
                break
        info = {**infos[-1], "step_infos": infos, "actions_executed": len(infos), "step_rewards": rewards}
        return obs, float(sum(rewards)), terminated, truncated, info
