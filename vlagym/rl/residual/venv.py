"""`ResidualVecEnv`: an SB3 `VecEnv` in which the agent is a residual on a frozen VLA.

Each vector step:

    base action  a_b = the frozen checkpoint's action for the current rgb observations (batched over the
                       sub-envs, acting as `vlagym eval` does: its chunking or temporal ensemble)
    residual     r in [-1, 1]^d from the agent (d = 6 arm dims, or 7 with the gripper)
    executed     a = clip(a_b + alpha * r, -1, 1) on the residual's dims, a_b on the others

The agent observes ``[state, proprio, a_b]`` (`obs_mode="rgb+state"`: the simulator's privileged task state, the
robot's proprioception and the base's action for this step); the images only reach the base. The reward is
``env reward - 1`` per step: with the env's sparse reward -1 until the success step, which ends the episode; with
its dense reward (staged terms in [0, 1], 1 on success) between -1 and 0.

Episodes are keyed by seed: episode k of the env (counted over all sub-envs, in the order they start) runs from
``seed + k``. `reset()` starts every sub-env afresh (the next seeds); finished sub-envs are reset here, and the
finished episode's last observation goes to ``info["terminal_observation"]`` with ``TimeLimit.truncated`` for a
time limit, so SB3 bootstraps truncations. The base's action at that last observation is never computed (the
base's per-episode state has moved on): the terminal observation carries the base action executed last, which
only enters the critic's bootstrap target at a truncation.

Progressive exploration (Policy Decorator): each episode has the residual switched on with probability
`residual_probability` (set by the training loop), drawn from the env's own generator; with it off the
executed action is the base's and the agent's stored action must be zero (`ResidualSAC` does that from
`residual_on`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

ARM_DIMS = 6  # the action's last entry is the gripper


def residual_features(obs: dict[str, Any], base_action: np.ndarray) -> np.ndarray:
    """The residual's observation rows: ``[state, proprio, base action]`` (float32)."""
    return np.concatenate(
        [np.asarray(obs["state"], np.float32), np.asarray(obs["proprio"], np.float32), base_action.astype(np.float32)],
        axis=1,
    )


def apply_residual(base_action: np.ndarray, residual: np.ndarray, alpha: float) -> np.ndarray:
    """``clip(base + alpha * residual, -1, 1)`` on the residual's leading dims; the other dims stay the base's."""
    out = np.array(base_action, dtype=np.float32, copy=True)
    d = residual.shape[1]
    out[:, :d] = np.clip(out[:, :d] + alpha * np.clip(residual, -1.0, 1.0), -1.0, 1.0)
    return out


class ResidualVecEnv(VecEnv):
    """SB3 vector env of residual actions on a frozen base policy (see the module docstring).

    `envs`: a Gymnasium vector env with autoreset disabled (`vlagym.eval.rollout.make_rollout_envs`) and
    ``obs_mode="rgb+state"``; `base`: a batched policy with `reset(mask)` and ``__call__(obs) -> (n, 7)``
    (`vlagym.eval.adapters.CheckpointPolicy`). The env takes ownership of `envs` (`close` closes it).
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        base: Callable[[Any], np.ndarray],
        alpha: float,
        residual_gripper: bool = False,
        seed: int = 0,
        exploration_seed: int = 0,
    ):
        space = envs.single_observation_space
        if not isinstance(space, spaces.Dict) or "state" not in space.spaces:
            raise ValueError('ResidualVecEnv needs envs made with obs_mode="rgb+state"')
        self.envs, self.base, self.alpha = envs, base, float(alpha)
        action_dim = int(np.prod(envs.single_action_space.shape))
        self.residual_dims = action_dim if residual_gripper else ARM_DIMS
        self.render_mode = None
        feat_dim = space["state"].shape[0] + space["proprio"].shape[0] + action_dim
        super().__init__(
            envs.num_envs,
            spaces.Box(-np.inf, np.inf, (feat_dim,), np.float32),
            spaces.Box(-1.0, 1.0, (self.residual_dims,), np.float32),
        )
        self.next_seed = int(seed)
        self.residual_probability = 1.0
        self.residual_on = np.ones(self.num_envs, bool)
        self.rng = np.random.default_rng(exploration_seed)
        self._obs: dict[str, Any] | None = None
        self._base_action = np.zeros((self.num_envs, action_dim), np.float32)
        self._actions: np.ndarray | None = None
        self._returns = np.zeros(self.num_envs)
        self._lengths = np.zeros(self.num_envs, int)
        self.env_s = 0.0
        """seconds spent stepping and resetting the sub-envs (simulation and rendering)"""
        self.base_s = 0.0
        """seconds spent in the base policy (its inference)"""

    # ------------------------------------------------------------------ episodes
    def _start(self, mask: np.ndarray) -> dict[str, Any]:
        """Reset the sub-envs in `mask` with the next seeds and draw whether each new episode uses the residual;
        the observations of every sub-env (the others' unchanged)."""
        rows = np.flatnonzero(mask)
        seeds: list[int | None] = [None] * self.num_envs
        for i in rows:
            seeds[i] = self.next_seed
            self.next_seed += 1
        t = time.perf_counter()
        obs, _ = self.envs.reset(seed=seeds, options={"reset_mask": mask})
        self.env_s += time.perf_counter() - t
        self.base.reset(mask)
        self.residual_on[rows] = self.rng.random(len(rows)) < self.residual_probability
        self._returns[rows], self._lengths[rows] = 0.0, 0
        return obs

    def _observe(self, obs: dict[str, Any]) -> np.ndarray:
        """The base's action for `obs` (kept for the next step) and the residual's observation."""
        t = time.perf_counter()
        self._base_action = np.asarray(self.base(obs), np.float32)
        self.base_s += time.perf_counter() - t
        self._obs = obs
        return residual_features(obs, self._base_action)

    def reset(self) -> np.ndarray:
        return self._observe(self._start(np.ones(self.num_envs, bool)))

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint taken between `reset()`s needs to continue the same run."""
        rng = self.rng.bit_generator.state
        return {"next_seed": self.next_seed, "rng": rng, "env_s": self.env_s, "base_s": self.base_s}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_seed = int(state["next_seed"])
        self.rng.bit_generator.state = state["rng"]
        self.env_s, self.base_s = float(state["env_s"]), float(state["base_s"])

    # ------------------------------------------------------------------ stepping
    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, np.float32).reshape(self.num_envs, self.residual_dims)

    def step_wait(self):
        residual = self._actions * self.residual_on[:, None]
        executed = apply_residual(self._base_action, residual, self.alpha)
        t = time.perf_counter()
        obs, reward, terminated, truncated, info = self.envs.step(executed)
        self.env_s += time.perf_counter() - t
        reward = np.asarray(reward, np.float32) - 1.0
        done = terminated | truncated
        self._returns += reward
        self._lengths += 1
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        success = info.get("success", np.zeros(self.num_envs, bool))
        if done.any():
            last = residual_features(obs, self._base_action)  # see the module docstring: the last base action
            for i in np.flatnonzero(done):
                infos[i] = {
                    "terminal_observation": last[i],
                    "TimeLimit.truncated": bool(truncated[i] and not terminated[i]),
                    "is_success": bool(success[i]),
                    "episode": {"r": float(self._returns[i]), "l": int(self._lengths[i])},
                }
            obs = self._start(done)
        return self._observe(obs), reward, done, infos

    def close(self) -> None:
        self.envs.close()

    # ------------------------------------------------------------------ what SB3's VecEnv also asks for
    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [getattr(self, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        raise NotImplementedError("ResidualVecEnv's sub-envs live in a Gymnasium vector env: call its methods")

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices=None) -> list[bool]:
        return [False] * len(self._get_indices(indices))

    def get_images(self) -> list[np.ndarray]:
        return [np.asarray(img) for img in self._obs["images"][next(iter(self._obs["images"]))]]
