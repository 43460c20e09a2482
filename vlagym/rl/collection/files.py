"""Rollout files: recorded episodes as an ordinary demo file (`vlagym.train.layout`; `vlagym dataset check` accepts
it, `vlagym train-bc` trains on it). Each demo may also carry ``weight`` (a sampling weight), and where they apply
``hindsight_target_xy`` (where a hindsight replay put the target: the seed alone does not remake that scene),
``close_delay`` (a delayed-close replay's delay) and ``close_distance`` (the reach distance at the first close).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vlagym.rl.collection.episodes import RolloutEpisode
from vlagym.train import layout
from vlagym.train.demo_writer import DemoEpisode, write_demo, write_header

WEIGHT_ATTR = "weight"
HINDSIGHT_ATTR = "hindsight_target_xy"
DELAY_ATTR = "close_delay"
CLOSE_DISTANCE_ATTR = "close_distance"


def write_rollouts(
    path: Path,
    episodes: list[RolloutEpisode],
    env_id: str,
    env_kwargs: dict[str, Any],
    weights: list[float] | None = None,
) -> None:
    """The episodes as a demo file, written to a temporary name and renamed; `weights` (one per episode) are
    stored as each demo's ``weight`` attribute."""
    if weights is not None and len(weights) != len(episodes):
        raise ValueError(f"{len(weights)} weights for {len(episodes)} episodes")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with h5py.File(tmp, "w") as f:
            images = [layout.image_key(c) for c in (episodes[0].images if episodes else [])]
            obs_keys = [*images, "proprio", "state"]  # the order `vlagym demos` writes
            data = write_header(f, env_id, env_kwargs, obs_keys, total=sum(len(e.actions) for e in episodes))
            for k, e in enumerate(episodes):
                _write_episode(data, k, e, None if weights is None else weights[k])
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_episode(data: h5py.Group, k: int, e: RolloutEpisode, weight: float | None) -> None:
    demo = DemoEpisode(
        index=k,
        seed=e.seed,
        instruction=e.instruction,
        task=e.task,
        images=e.images,
        proprio=e.proprio,
        state=e.state,
        sim_states=e.states,
        actions=e.actions,
        rewards=e.rewards,
        success=True,
    )
    write_demo(data, layout.demo_name(k), demo, "gzip")  # the writer of `vlagym demos`
    attrs = data[layout.demo_name(k)].attrs
    if weight is not None:
        attrs[WEIGHT_ATTR] = float(weight)
    if e.target_xy is not None:
        attrs[HINDSIGHT_ATTR] = np.asarray(e.target_xy, np.float64)
    if e.close_delay:  # the seed remakes the scene; the actions hold the delay
        attrs[DELAY_ATTR] = int(e.close_delay)
    if e.close_distance is not None:
        attrs[CLOSE_DISTANCE_ATTR] = float(e.close_distance)
