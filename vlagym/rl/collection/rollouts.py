"""`collect_round`: run a batched actor on vector envs whose sub-envs record their episodes (`RolloutRecorder`),
and gather what the recorders hand over: every episode's record, the successful episodes, the replays.

The actor is any batched policy with ``new_round()``, ``reset(mask, seeds)`` (plus ``repeats=``, each row's try
of its seed, when it takes it) and ``__call__(obs)``: filtered BC's noisy VLA, the residual teacher. What a
method keeps and how it trains on it is the method's own.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import gymnasium as gym
import numpy as np

from vlagym.eval.rollout import EpisodeRecord, run_episodes
from vlagym.rl.collection.episodes import Replay, RolloutEpisode
from vlagym.rl.collection.recorder import DELAY_KEY, FAILURE_KEY, HINDSIGHT_KEY, RECORD_KEY


class Actor(Protocol):
    """A batched rollout policy that learns where each episode starts and when a round starts."""

    def new_round(self) -> None: ...

    def reset(self, mask: np.ndarray, seeds: np.ndarray) -> None: ...

    def __call__(self, obs: Any) -> np.ndarray: ...


class Collection(NamedTuple):
    """What `collect_round` gathered, each list in seed order."""

    records: list[EpisodeRecord]
    """every episode's record (outcome, length, ...)"""
    successes: list[RolloutEpisode]
    """the successful episodes"""
    hindsight: list[Replay]
    """each failed episode's hindsight replay (when the recorders run them)"""
    delayed: list[Replay]
    """each failed episode's delayed-close replays (when the recorders run them)"""
    failures: list[RolloutEpisode]
    """the failed episodes (when the recorders record them)"""


def join_collections(parts: list[Collection]) -> Collection:
    """Collections of consecutive runs of seeds (e.g. Ray workers' units) as one, in seed order."""
    return Collection(*([x for part in parts for x in getattr(part, f)] for f in Collection._fields))


def collect_round(
    envs: gym.vector.VectorEnv, actor: Actor, seeds: list[int], progress: bool = False, first: int = 0
) -> Collection:
    """Run one episode per entry of `seeds` (a seed may repeat: the tries of a group). The tries of one seed
    come in an order of their content, so that the result does not depend on which sub-env finished first.
    `first`: the position of `seeds[0]` in the whole round when these are a part of it (a Ray worker's unit), so
    each episode runs on the sub-env it has in the whole (`vlagym.eval.rollout.run_episodes`)."""
    wanted = set(seeds)
    found: dict[str, dict[int, list[Any]]] = {RECORD_KEY: {}, FAILURE_KEY: {}, HINDSIGHT_KEY: {}, DELAY_KEY: {}}

    def on_step(info: dict[str, Any]) -> None:
        for key, into in found.items():
            if key not in info:
                continue
            for i in np.flatnonzero(info.get(f"_{key}", np.ones(len(info[key]), bool))):
                item = info[key][i]
                if isinstance(item, (RolloutEpisode, Replay)) and item.seed in wanted:  # not a throw-away episode
                    into.setdefault(item.seed, []).append(item)

    actor.new_round()  # e.g. DAgger's labels are per round
    positions = range(first, first + len(seeds))
    records = run_episodes(
        envs, actor, seeds, on_episode_start=actor.reset, progress=progress, on_step=on_step, positions=positions
    )
    episodes, failed = found[RECORD_KEY], found[FAILURE_KEY]
    replays, delays = found[HINDSIGHT_KEY], found[DELAY_KEY]
    for tries in (*episodes.values(), *failed.values()):
        tries.sort(key=lambda e: (len(e.actions), e.actions.tobytes()))
    for tries in (*replays.values(), *delays.values()):
        tries.sort(key=Replay.order)
    successes = [episodes[r.seed].pop(0) for r in records if r.success and episodes.get(r.seed)]
    hindsight, delayed, failures = (
        [by_seed[r.seed].pop(0) for r in records if not r.success and by_seed.get(r.seed)]
        for by_seed in (replays, delays, failed)
    )
    return Collection(records, successes, hindsight, delayed, failures)
