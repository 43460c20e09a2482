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

The sub-envs and the base that acts in them are a `SubEnvs`: here (`LocalSubEnvs`), or in slices on Ray workers
(`vlagym.rl.residual.remote.RaySubEnvs`), which step at once. Episodes are keyed by seed: sub-env i of n runs
the seeds ``seed + i``, ``seed + i + n``, ``seed + i + 2n``, ..., one per episode, whoever steps it and whenever
the others finish. `reset()` starts every sub-env on its next seed; finished sub-envs are reset by the
`SubEnvs` in the same step, and the finished episode's last observation goes to ``info["terminal_observation"]``
with ``TimeLimit.truncated`` for a time limit, so SB3 bootstraps truncations. The base's action at that last
observation is never computed (the base's per-episode state has moved on): the terminal observation carries the
base action executed last, which only enters the critic's bootstrap target at a truncation.

Progressive exploration (Policy Decorator): each episode has the residual switched on with probability
`residual_probability` (set by the training loop), drawn from the env's own generator; with it off the
executed action is the base's and the agent's stored action must be zero (`ResidualSAC` does that from
`residual_on`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

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


class Stepped(NamedTuple):
    """What a step of the sub-envs gives back, one row per sub-env."""

    features: np.ndarray
    """the residual's next observations (a finished sub-env's: its new episode's first)"""
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    success: np.ndarray
    last: np.ndarray
    """the residual's observations of this step's own outcome, before any reset (the terminal observations)"""
    env_s: float
    """seconds stepping and resetting the sub-envs (simulation and rendering)"""
    base_s: float
    """seconds in the base's inference"""


class SubEnvs(Protocol):
    """The sub-envs of a `ResidualVecEnv` and the frozen base acting in them."""

    num_envs: int
    feature_dim: int
    action_dim: int

    def reset(self, seeds: Sequence[int]) -> tuple[np.ndarray, float, float]:
        """Start every sub-env on its seed; the features, env and base seconds."""
        ...

    def step(self, residual: np.ndarray, next_seeds: Sequence[int]) -> Stepped:
        """Execute base + alpha * residual; a sub-env whose episode ends starts its next seed."""
        ...

    def close(self) -> None: ...


class LocalSubEnvs:
    """`SubEnvs` in this process: a Gymnasium vector env with autoreset disabled and ``obs_mode="rgb+state"``
    (`vlagym.eval.rollout.make_rollout_envs`), and `base`, a batched policy with `reset(mask)` and
    ``__call__(obs) -> (n, 7)`` (`vlagym.eval.adapters.CheckpointPolicy`). Takes ownership of `envs`."""

    def __init__(self, envs: gym.vector.VectorEnv, base: Callable[[Any], np.ndarray], alpha: float):
        space = envs.single_observation_space
        if not isinstance(space, spaces.Dict) or "state" not in space.spaces:
            raise ValueError('the residual needs envs made with obs_mode="rgb+state"')
        self.envs, self.base, self.alpha = envs, base, float(alpha)
        self.num_envs = envs.num_envs
        self.action_dim = int(np.prod(envs.single_action_space.shape))
        self.feature_dim = space["state"].shape[0] + space["proprio"].shape[0] + self.action_dim
        self.base_action = np.zeros((self.num_envs, self.action_dim), np.float32)
        self.obs: dict[str, Any] | None = None

    def _start(self, mask: np.ndarray, seeds: Sequence[int]) -> tuple[dict[str, Any], float]:
        wanted: list[int | None] = [int(s) if m else None for s, m in zip(seeds, mask, strict=True)]
        t = time.perf_counter()
        obs, _ = self.envs.reset(seed=wanted, options={"reset_mask": mask})
        seconds = time.perf_counter() - t
        self.base.reset(mask)
        return obs, seconds

    def _observe(self, obs: dict[str, Any]) -> tuple[np.ndarray, float]:
        """The base's action for `obs` (kept for the next step) and the residual's observation."""
        t = time.perf_counter()
        self.base_action = np.asarray(self.base(obs), np.float32)
        self.obs = obs
        return residual_features(obs, self.base_action), time.perf_counter() - t

    def reset(self, seeds: Sequence[int]) -> tuple[np.ndarray, float, float]:
        obs, env_s = self._start(np.ones(self.num_envs, bool), seeds)
        features, base_s = self._observe(obs)
        return features, env_s, base_s

    def step(self, residual: np.ndarray, next_seeds: Sequence[int]) -> Stepped:
        executed = apply_residual(self.base_action, residual, self.alpha)
        t = time.perf_counter()
        obs, reward, terminated, truncated, info = self.envs.step(executed)
        env_s = time.perf_counter() - t
        last = residual_features(obs, self.base_action)  # see the module docstring: the last base action
        done = terminated | truncated
        if done.any():
            obs, seconds = self._start(done, next_seeds)
            env_s += seconds
        features, base_s = self._observe(obs)
        success = np.asarray(info.get("success", np.zeros(self.num_envs, bool)), bool)
        return Stepped(features, np.asarray(reward, np.float32), terminated, truncated, success, last, env_s, base_s)

    def images(self) -> list[np.ndarray]:
        return [np.asarray(img) for img in self.obs["images"][next(iter(self.obs["images"]))]]

    def close(self) -> None:
        self.envs.close()


class ResidualVecEnv(VecEnv):
    """SB3 vector env of residual actions on a frozen base policy acting in `sub` (see the module docstring)."""

    def __init__(self, sub: SubEnvs, residual_gripper: bool = False, seed: int = 0, exploration_seed: int = 0):
        self.sub = sub
        self.residual_dims = sub.action_dim if residual_gripper else ARM_DIMS
        self.render_mode = None
        super().__init__(
            sub.num_envs,
            spaces.Box(-np.inf, np.inf, (sub.feature_dim,), np.float32),
            spaces.Box(-1.0, 1.0, (self.residual_dims,), np.float32),
        )
        self.seed0 = int(seed)
        self.episodes = np.zeros(self.num_envs, np.int64)  # episodes each sub-env has started
        self.residual_probability = 1.0
        self.residual_on = np.ones(self.num_envs, bool)
        self.rng = np.random.default_rng(exploration_seed)
        self._actions: np.ndarray | None = None
        self._returns = np.zeros(self.num_envs)
        self._lengths = np.zeros(self.num_envs, int)
        self.env_s = 0.0
        """seconds spent stepping and resetting the sub-envs (simulation and rendering; on Ray the slowest
        worker's)"""
        self.base_s = 0.0
        """seconds spent in the base policy (its inference; on Ray the slowest worker's)"""

    # ------------------------------------------------------------------ episodes
    def next_seeds(self) -> np.ndarray:
        """The seed each sub-env's next episode runs: sub-env i's episode j runs seed + i + j * num_envs."""
        return self.seed0 + np.arange(self.num_envs) + self.num_envs * self.episodes

    def _started(self, mask: np.ndarray) -> None:
        """The sub-envs in `mask` started an episode: count it, draw whether it uses the residual."""
        rows = np.flatnonzero(mask)
        self.episodes[rows] += 1
        self.residual_on[rows] = self.rng.random(len(rows)) < self.residual_probability
        self._returns[rows], self._lengths[rows] = 0.0, 0

    def reset(self) -> np.ndarray:
        features, env_s, base_s = self.sub.reset(self.next_seeds())
        self.env_s, self.base_s = self.env_s + env_s, self.base_s + base_s
        self._started(np.ones(self.num_envs, bool))
        return features

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint taken between `reset()`s needs to continue the same run."""
        rng = self.rng.bit_generator.state
        return {"episodes": self.episodes.tolist(), "rng": rng, "env_s": self.env_s, "base_s": self.base_s}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "episodes" not in state:  # `next_seed`: an episode's seed was counted over all sub-envs then
            raise ValueError("the checkpoint was written by an older vlagym, which seeded episodes differently: "
                             "start a new run")  # fmt: skip
        if len(state["episodes"]) != self.num_envs:
            raise ValueError(f"the checkpoint ran {len(state['episodes'])} sub-envs, this run has {self.num_envs}")
        self.episodes = np.asarray(state["episodes"], np.int64)
        self.rng.bit_generator.state = state["rng"]
        self.env_s, self.base_s = float(state["env_s"]), float(state["base_s"])

    # ------------------------------------------------------------------ stepping
    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, np.float32).reshape(self.num_envs, self.residual_dims)

    def step_wait(self):
        out = self.sub.step(self._actions * self.residual_on[:, None], self.next_seeds())
        self.env_s, self.base_s = self.env_s + out.env_s, self.base_s + out.base_s
        reward = out.reward - 1.0
        done = out.terminated | out.truncated
        self._returns += reward
        self._lengths += 1
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(done):
            infos[i] = {
                "terminal_observation": out.last[i],
                "TimeLimit.truncated": bool(out.truncated[i] and not out.terminated[i]),
                "is_success": bool(out.success[i]),
                "episode": {"r": float(self._returns[i]), "l": int(self._lengths[i])},
            }
        if done.any():
            self._started(done)
        return out.features, reward, done, infos

    def close(self) -> None:
        self.sub.close()

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
        images = getattr(self.sub, "images", None)
        if images is None:
            raise NotImplementedError("the sub-envs' images stay on the Ray workers")
        return images()
