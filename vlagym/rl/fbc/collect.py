"""Collection: the VLA acting as `vlagym eval` runs it plus exploration noise, on vector envs whose sub-envs
record (and relabel) their episodes.

Episode seeds: round r tries `episodes_per_round / group_size` states, state k with seed
``collect_seed + r * states + k``, each `group_size` times in a row. The noise of an episode comes from a
generator of its seed and its try, so a round's episodes depend on neither `n_envs` nor the rows beside them
(up to the last bits of batched inference, which contact-rich episodes can amplify, as in `vlagym eval`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from vlagym.envs.pool import make_vec
from vlagym.eval.adapters import episode_noise_generator
from vlagym.policies.vla import VLAPolicy
from vlagym.rl.collection.recorder import RolloutRecorder
from vlagym.rl.fbc.config import FilteredBCConfig
from vlagym.train.demo_collector import ignore_sigint
from vlagym.train.run import resolve_device

NOISE_STREAM = 0xF17B  # the exploration noise of the episode with seed s comes from default_rng([NOISE_STREAM, s])


class NoisyVLA:
    """A `VLAPolicy` as a batched rollout policy (what `vlagym eval` runs), plus Gaussian noise of std `noise_std`
    in normalised action units on every executed action's arm dimensions (all but the last, the gripper); each
    draw is held for `hold` steps of its episode (steps 0..hold-1 share one draw, and so on).

    Row i's noise (and a flow head's sampling noise) comes from generators seeded by its episode's seed (see
    `reset`), so an episode depends on its seed alone. Try k of a seed (`repeats`, which `run_episodes` gives:
    k episodes of that seed come before it in the round) gets the noise of (seed, k), so the tries of one state
    differ whichever sub-env or worker runs them; try 0's noise is the seed's alone, and its flow noise the one
    `vlagym eval` draws."""

    def __init__(self, policy: VLAPolicy, noise_std: float, hold: int = 1):
        if int(hold) < 1:
            raise ValueError(f"hold must be >= 1 step, got {hold!r}")
        self.policy, self.noise_std, self.hold = policy, float(noise_std), int(hold)
        self.seconds = 0.0  # spent choosing actions (inference and noise), for the collection's time split
        self._noise: list[np.random.Generator | None] = []
        self._held: list[np.ndarray | None] = []  # each row's current draw (standard normal)
        self._age = np.zeros(0, np.int64)  # each row's steps since its episode started
        self._flow: list[torch.Generator | None] = []

    def new_round(self) -> None:
        """Nothing to forget: each episode's try comes with it (the collection's actor protocol)."""

    def reset(self, mask: np.ndarray, seeds: np.ndarray, repeats: np.ndarray | None = None) -> None:
        """Start the episodes of the rows in `mask`: row i is try `repeats[i]` (None: 0) of seed `seeds[i]`."""
        mask = np.asarray(mask, bool)
        if len(self._noise) != len(mask):
            self._noise, self._flow, self._held = [None] * len(mask), [None] * len(mask), [None] * len(mask)
            self._age = np.zeros(len(mask), np.int64)
        self.policy.reset(mask=mask)
        self._age[mask] = 0
        for i in np.flatnonzero(mask):
            seed, k = int(seeds[i]), 0 if repeats is None else int(repeats[i])
            key = [NOISE_STREAM, seed] if k == 0 else [NOISE_STREAM, seed, k]
            self._noise[i] = np.random.default_rng(key)
            if k == 0:
                self._flow[i] = episode_noise_generator(seed)  # as `vlagym eval` draws it
            else:
                state = np.random.SeedSequence(key).generate_state(1, np.uint64)[0]
                self._flow[i] = torch.Generator().manual_seed(int(state))

    def __call__(self, obs: Any) -> np.ndarray:
        t0 = time.perf_counter()
        with torch.inference_mode():
            batch = self.policy.batch_from_obs(obs)
            flow = self.policy.config.head == "flow"
            action = self.policy.select_action(batch, self._flow if flow else None)
        action = action.float().cpu().numpy().astype(np.float32)
        if self.noise_std > 0:
            scale = self.policy.action_scale.cpu().numpy()[:-1]
            for i, g in enumerate(self._noise):
                if self._age[i] % self.hold == 0:
                    self._held[i] = g.standard_normal(scale.shape)
                action[i, :-1] += (self.noise_std * scale * self._held[i]).astype(np.float32)
            self._age += 1
        self.seconds += time.perf_counter() - t0
        return action


def make_collection_envs(cfg: FilteredBCConfig, env_kwargs: dict[str, Any]) -> gym.vector.VectorEnv:
    """The collection vector env: autoreset disabled (as `run_episodes` needs), a `RolloutRecorder` in every
    sub-env."""
    wrappers: list[Any] = [
        functools.partial(RolloutRecorder, hindsight=cfg.hindsight, close_delays=tuple(cfg.close_delays))
    ]
    if cfg.vectorization == "async":
        wrappers.append(functools.partial(ignore_sigint, main_pid=os.getpid()))
    return make_vec(
        cfg.task,
        num_envs=cfg.n_envs,
        vectorization_mode=cfg.vectorization,
        vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED},
        wrappers=wrappers,
        **env_kwargs,
    )


def round_seeds(cfg: FilteredBCConfig, round_: int) -> list[int]:
    """The reset seeds of round r's episodes: episodes_per_round / group_size fresh states, each `group_size`
    times in a row (state k of round r has seed collect_seed + r * states + k)."""
    states = cfg.episodes_per_round // cfg.group_size
    first = cfg.collect_seed + round_ * states
    return [first + k for k in range(states) for _ in range(cfg.group_size)]


def load_policy(cfg: FilteredBCConfig, folder: str | Path | None = None, device: str | None = None) -> VLAPolicy:
    """The BC checkpoint (from `folder`, default `cfg.policy`) as the run trains and collects with it."""
    policy = VLAPolicy.from_pretrained(folder or cfg.policy).to(device or resolve_device(cfg.device))
    if cfg.n_action_steps is not None:  # how the policy acts from here on, saved with its checkpoints
        policy.config = dataclasses.replace(policy.config, n_action_steps=cfg.n_action_steps, temporal_ensemble=False)
    if cfg.freeze_encoders:
        policy.vision.requires_grad_(False)
        policy.text.requires_grad_(False)
    return policy
