"""Envs for stable-baselines3: chunk-level actions in the policy's normalised units, observations SB3 can carry.

SB3 takes neither `Text` spaces nor nested `Dict`s. `make_rl_env` builds, per sub-env:

    gym.make(task)  (its TimeLimit inside)
    -> ActionChunking(K)           one RL step = K control steps; truncation passes through
    -> TransformReward             x reward_scale (only when it is not 1)
    -> NormalizedChunkAction       flat (K*A,) normalised chunk -> (K, A) env units, clipped to the bounds;
                                   with `binary_gripper` the gripper entry is snapped to +-1, as `vlagym eval`
    -> LanguageTokens              instruction text -> (max_tokens,) token ids      (image observations only)
    -> SB3Observation              {"image_<cam>": HxWx3 uint8, "proprio", "instruction", ["state"]}
    -> Monitor                     episode return/length for SB3's logs (chunk-level length)

SB3 itself then transposes the uint8 HxWx3 images to 3xHxW (`VecTransposeImage`) and divides them by 255,
which is what `VLAPolicy` reads (a float image in [0, 1] is used as is; uint8 is divided by 255 inside).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecEnvWrapper

from vlagym.wrappers.chunking import ActionChunking
from vlagym.wrappers.language import LanguageTokens, Tokenizer

IMAGE_PREFIX = "image_"

VECTORIZATION_MODES = ("sync", "async")  # SB3's DummyVecEnv and SubprocVecEnv


class NormalizedChunkAction(gym.ActionWrapper):
    """The agent acts with a flat chunk ``(K * A,)`` in normalised units; the env gets ``(K, A)`` in its units.

    ``env action = clip(action * scale + offset, low, high)`` per action dimension, the map `VLAPolicy` applies
    to its head's output (its ``action_scale``/``action_offset`` buffers). `action_space` is the normalised image
    of the env's bounds, so an agent clipping to it (SB3 does) never asks for more than the env allows.

    With `binary_gripper` the last action entry (the gripper) is then snapped to +1 where it is >= 0 and to -1
    elsewhere: the decode `VLAPolicy.select_action` applies when the checkpoint's `binary_gripper` is on, so RL
    trains the policy that `vlagym eval` will run. The Gaussian's likelihood stays that of the raw sample; the
    snap is part of the environment as the agent sees it.
    """

    def __init__(
        self,
        env: gym.Env,
        offset: Sequence[float] | np.ndarray,
        scale: Sequence[float] | np.ndarray,
        binary_gripper: bool = False,
    ):
        super().__init__(env)
        self.binary_gripper = bool(binary_gripper)
        space = env.action_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 2:
            raise TypeError(f"NormalizedChunkAction needs a (K, A) Box action space (ActionChunking), got {space}")
        a = space.shape[1]
        self.offset = np.asarray(offset, dtype=np.float64).reshape(-1)
        self.scale = np.asarray(scale, dtype=np.float64).reshape(-1)
        if self.offset.shape != (a,) or self.scale.shape != (a,):
            raise ValueError(
                f"offset and scale must have shape ({a},) like one action, "
                f"got {self.offset.shape} and {self.scale.shape}"
            )
        if not (np.isfinite(self.scale).all() and (self.scale > 0).all() and np.isfinite(self.offset).all()):
            raise ValueError(f"scale must be finite and positive and offset finite, got {self.scale}, {self.offset}")
        low = ((space.low - self.offset) / self.scale).reshape(-1)
        high = ((space.high - self.offset) / self.scale).reshape(-1)
        self.action_space = spaces.Box(low.astype(np.float32), high.astype(np.float32), low.shape, np.float32)

    def action(self, action: Any) -> np.ndarray:
        flat = np.asarray(action, dtype=np.float64)
        if flat.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape} (flat chunk), got {flat.shape}")
        space = self.env.action_space
        chunk = flat.reshape(space.shape) * self.scale + self.offset
        if self.binary_gripper:
            chunk[:, -1] = np.where(chunk[:, -1] >= 0, 1.0, -1.0)
        return np.clip(chunk, space.low, space.high).astype(space.dtype)


class FlatChunkAction(gym.ActionWrapper):
    """A ``(K, A)`` chunk action space seen as flat ``(K * A,)`` (SB3's MlpPolicy and SAC want a flat Box)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.action_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"FlatChunkAction needs a Box action space, got {space}")
        self.action_space = spaces.Box(space.low.reshape(-1), space.high.reshape(-1), (space.low.size,), space.dtype)

    def action(self, action: Any) -> np.ndarray:
        return np.asarray(action, dtype=self.env.action_space.dtype).reshape(self.env.action_space.shape)


class SB3Observation(gym.ObservationWrapper):
    """Flattens vlagym's ``{"images": {cam: ...}, ...}`` observation into one `Dict` of `Box` es (SB3 takes no
    nested dicts): ``"image_<cam>"`` per camera, the other keys unchanged. The instruction must already be
    token ids (`LanguageTokens`)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Dict) or "images" not in space.spaces:
            raise TypeError(f"SB3Observation needs a Dict observation with 'images' (obs_mode='rgb'), got {space}")
        new: dict[str, spaces.Space] = {IMAGE_PREFIX + cam: s for cam, s in space["images"].spaces.items()}
        for key, sub in space.spaces.items():
            if key == "images":
                continue
            if not isinstance(sub, spaces.Box):
                raise TypeError(
                    f"observation {key!r} must be a Box for SB3 (tokenise the instruction first), got {sub}"
                )
            new[key] = sub
        self.observation_space = spaces.Dict(new)

    def observation(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        out = {IMAGE_PREFIX + cam: img for cam, img in observation["images"].items()}
        out.update({k: v for k, v in observation.items() if k != "images"})
        return out


def make_rl_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    chunk_size: int,
    max_episode_steps: int | None = None,
    action_offset: Sequence[float] | np.ndarray | None = None,
    action_scale: Sequence[float] | np.ndarray | None = None,
    tokenizer: Tokenizer | None = None,
    max_tokens: int = 16,
    binary_gripper: bool = False,
    reward_scale: float = 1.0,
) -> gym.Env:
    """One sub-env of training (see the module docstring). Without `action_offset`/`action_scale` the actions
    are the env's own (flattened chunk); image observations need a `tokenizer`. `binary_gripper` snaps the
    gripper entry of normalised chunks to +-1 (`NormalizedChunkAction`). `reward_scale` multiplies each RL
    step's (chunk-summed) reward, before `Monitor` (whose episode returns are then scaled too)."""
    if not (np.isfinite(reward_scale) and reward_scale > 0):
        raise ValueError(f"reward_scale must be finite and positive, got {reward_scale!r}")
    if binary_gripper and action_offset is None and action_scale is None:
        raise ValueError("binary_gripper applies to normalised chunk actions: give action_offset/action_scale")
    kwargs = dict(env_kwargs)
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    env = gym.make(env_id, **kwargs)
    env = ActionChunking(env, chunk_size)
    if reward_scale != 1.0:
        env = gym.wrappers.TransformReward(env, lambda r: float(r) * reward_scale)
    if action_offset is None and action_scale is None:
        env = FlatChunkAction(env)
    else:
        a = env.action_space.shape[1]
        offset = np.zeros(a) if action_offset is None else action_offset
        scale = np.ones(a) if action_scale is None else action_scale
        env = NormalizedChunkAction(env, offset, scale, binary_gripper)
    if isinstance(env.observation_space, spaces.Dict):
        if tokenizer is None:
            raise ValueError("image observations need a tokenizer to turn the instruction into token ids")
        env = SB3Observation(LanguageTokens(env, tokenizer, max_tokens))
    return Monitor(env)


class TimedVecEnv(VecEnvWrapper):
    """Adds up the wall-clock seconds spent stepping the wrapped vector env (`seconds`): simulation, rendering
    and the wrappers, everything of a rollout but the policy. Observations and rewards pass through unchanged."""

    def __init__(self, venv: VecEnv):
        super().__init__(venv)
        self.seconds = 0.0

    def reset(self):
        return self.venv.reset()

    def step_async(self, actions: np.ndarray) -> None:
        start = time.perf_counter()
        self.venv.step_async(actions)
        self.seconds += time.perf_counter() - start

    def step_wait(self):
        start = time.perf_counter()
        result = self.venv.step_wait()
        self.seconds += time.perf_counter() - start
        return result


def make_vec_env(factory: Callable[[], gym.Env], n_envs: int, vectorization: str = "sync") -> TimedVecEnv:
    """`n_envs` copies of `factory()` in SB3's `DummyVecEnv` ("sync") or `SubprocVecEnv` ("async"), in a
    `TimedVecEnv` (the env's share of rollout time).

    Both reset a finished sub-env at once and put ``terminal_observation`` and ``TimeLimit.truncated`` in its
    info, which SB3's PPO uses to bootstrap the value at a truncation (a time limit is not a failure).
    """
    if vectorization not in VECTORIZATION_MODES:
        raise ValueError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {vectorization!r}")
    if vectorization == "sync":
        return TimedVecEnv(DummyVecEnv([factory] * n_envs))
    return TimedVecEnv(SubprocVecEnv([factory] * n_envs))
