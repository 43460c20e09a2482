"""A tiny MuJoCo-free env with vlagym's observation layout, for testing wrappers in isolation.

Step t (1-based since reset) gives reward t, fills every image with ``(10 * t) % 256``
(so a frame tells which step it shows), and records the action in ``info["action"]``.
Everything random comes from `reset(seed)`.
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

CHARSET = string.ascii_letters + string.digits + " ,.;:'?!-()"
INSTRUCTIONS = ("pick up the red cup", "Push the blue cube, then stop!", "zorble the flux capacitor")


class FakeEnv(gym.Env):
    """obs_mode "rgb": Dict(images=Dict(camera: uint8 HxWx3), proprio=Box(3), instruction=Text); "state": Box(5)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        obs_mode: str = "rgb",
        image_size: int = 8,
        cameras: tuple[str, ...] = ("front", "wrist"),
        terminate_at: int | None = None,
        render_mode: str | None = None,
        instructions: tuple[str, ...] = INSTRUCTIONS,
    ):
        assert obs_mode in ("rgb", "state")
        self.obs_mode, self.render_mode, self.terminate_at = obs_mode, render_mode, terminate_at
        self.image_size, self.cameras, self.instructions = image_size, tuple(cameras), tuple(instructions)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        state = spaces.Box(-np.inf, np.inf, (5,), np.float32)
        if obs_mode == "state":
            self.observation_space = state
        else:
            h = w = image_size
            self.observation_space = spaces.Dict(
                {
                    "images": spaces.Dict({c: spaces.Box(0, 255, (h, w, 3), np.uint8) for c in self.cameras}),
                    "proprio": spaces.Box(-np.inf, np.inf, (3,), np.float32),
                    "instruction": spaces.Text(160, min_length=1, charset=CHARSET),
                }
            )
        self.t = 0
        self.pos = np.zeros(2)
        self.offset = np.zeros(3)
        self.instruction = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        self.pos = self.np_random.uniform(-1, 1, 2)
        self.offset = self.np_random.normal(size=3)
        self.instruction = self.instructions[int(self.np_random.integers(len(self.instructions)))]
        return self._obs(), {"t": 0}

    def step(self, action):
        action = np.asarray(action, dtype=np.float64)
        assert action.shape == (2,), action.shape
        self.t += 1
        self.pos = self.pos + 0.1 * np.clip(action, -1, 1)
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return self._obs(), float(self.t), terminated, False, {"t": self.t, "action": action.copy()}

    def _frame(self) -> np.ndarray:
        return np.full((self.image_size, self.image_size, 3), (10 * self.t) % 256, np.uint8)

    def _obs(self):
        proprio = np.array([*self.pos, self.t], np.float64) + self.offset
        state = np.concatenate([proprio, self.pos]).astype(np.float32)
        if self.obs_mode == "state":
            return state
        return {
            "images": {c: self._frame() for c in self.cameras},
            "proprio": proprio.astype(np.float32),
            "instruction": self.instruction,
        }

    def render(self):
        if self.render_mode == "rgb_array":
            return self._frame()
        return None
