"""The phases of a round, each returning what it did for the logs: collect → relabel → update → evaluate.

`collect` runs the round's noisy episodes (the sub-envs' recorders replay the failures as they end);
`relabel` keeps the successes and the successful replays that pass the filters and writes them as the round's
rollout file; `update` trains on the demos and every rollout file so far; `evaluate` scores a checkpoint with
the `vlagym eval` protocol.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlagym.io import atomic_write_json
from vlagym.rl.collection.episodes import RolloutEpisode, gripper_reopens, near_closes, without_reopens
from vlagym.rl.collection.files import write_rollouts
from vlagym.rl.collection.rollouts import Collection
from vlagym.rl.fbc.buffer import (
    Mixture,
    Prefetch,
    demo_dataset,
    read_sample_weights,
    rollout_path,
    success_weights,
)
from vlagym.rl.fbc.collect import round_seeds
from vlagym.rl.fbc.config import FilteredBCConfig
from vlagym.rl.fbc.session import Run
from vlagym.train.bc import lr_factor
from vlagym.train.dataset import DemoDataset
from vlagym.train.run import preserved_rng
from vlagym.train.run_files import CURVE_NAME, EVAL_DIR

logger = logging.getLogger(__name__)


@dataclass
class Collected:
    """The round's collection."""

    collection: Collection
    env_steps: int
    """episodes' and replays' steps"""
    policy_s: float
    """spent choosing actions (VLA inference, noise); the rest is stepping the sub-envs (and their replays)"""
    seconds: float


@dataclass
class Kept:
    """The successes the round keeps, and what the filters dropped."""

    successes: list[RolloutEpisode]
    """everything written to the round's rollout file: own successes, then hindsight and delayed-close replays"""
    own: int
    hindsight: int
    delayed: int
    reopens: list[int]
    """each own success's gripper reopens (before `max_gripper_reopens` filters them)"""
    close_distances: list[float]
    """each own success's reach distance at its first close, where it has one"""
    dropped_reopens: int
    far_closes: dict[str, int]
    """successes `max_close_distance` dropped, by source: rollout, hindsight, delay"""
    seconds: float


@dataclass
class Updated:
    """The round's optimiser steps."""

    updates: int
    loss: float | None
    """mean BC loss (None without updates)"""
    grad_norm: float | None
    """of the last update"""
    lr: float | None
    """of the last update"""
    buffer_episode_lengths: list[int]
    buffer_samples: int
    seconds: float


@dataclass
class Evaluated:
    """A point of the learning curve (``OUT/eval/curve.json``)."""

    round: int
    updates: int
    env_steps: int
    train_minutes: float
    success_rate: float
    ci95: list[float]
    n: int
    checkpoint: str


def collect(run: Run, r: int) -> Collected:
    """Run round `r`'s episodes with the current policy; counts their env steps into the run's."""
    t0 = time.perf_counter()
    run.policy.eval()
    collection, policy_s = run.collector.collect(round_seeds(run.cfg, r))
    steps = sum(rec.length for rec in collection.records)
    steps += sum(x.steps for x in collection.hindsight + collection.delayed)
    run.progress.env_steps += steps
    return Collected(collection, steps, policy_s, time.perf_counter() - t0)


def relabel(run: Run, r: int, collected: Collected) -> Kept:
    """Keep the round's successes and successful replays that pass `max_gripper_reopens` and
    `max_close_distance`, and write them with their weights as the round's rollout file (when there are any)."""
    t0 = time.perf_counter()
    cfg, c = run.cfg, collected.collection
    successes = without_reopens(c.successes, cfg.max_gripper_reopens)
    own = near_closes(successes, cfg.max_close_distance)
    far_closes = {"rollout": len(successes) - len(own)}
    replayed = {}
    for source, replays in (("hindsight", c.hindsight), ("delay", c.delayed)):
        found = without_reopens([x.episode for x in replays if x.episode is not None], cfg.max_gripper_reopens)
        replayed[source] = near_closes(found, cfg.max_close_distance)
        far_closes[source] = len(found) - len(replayed[source])
    kept = own + replayed["hindsight"] + replayed["delay"]
    if kept:
        weights = success_weights(kept, cfg.weighting, cfg.gamma)
        write_rollouts(rollout_path(run.out, r), kept, cfg.task, run.env_kwargs, weights)
        run.progress.success_rounds.append(r)
    return Kept(
        successes=kept,
        own=len(own),
        hindsight=len(replayed["hindsight"]),
        delayed=len(replayed["delay"]),
        reopens=[gripper_reopens(e.actions) for e in c.successes],
        close_distances=[e.close_distance for e in c.successes if e.close_distance is not None],
        dropped_reopens=len(c.successes) - len(successes),
        far_closes=far_closes,
        seconds=time.perf_counter() - t0,
    )


def update(run: Run, r: int) -> Updated:
    """`updates_per_round` AdamW steps on batches of demos and of every round's kept successes (none when there
    is nothing to train on yet); counts them into the run's updates."""
    t0 = time.perf_counter()
    cfg, policy = run.cfg, run.policy
    paths = [str(rollout_path(run.out, k)) for k in run.progress.success_rounds]
    buffer = demo_dataset(paths, policy, cfg.augmentation if cfg.augment else None, cfg.seed + 1)
    for dataset in (run.demos, buffer):
        if dataset is not None:
            dataset.set_epoch(r)
    draw, n = None, 0
    if run.demos is None and buffer is None:
        logger.warning("round %d: no demos and no successful episode yet: nothing to train on", r)
    else:
        weights = _sample_weights(cfg, paths, buffer)
        mixture = Mixture(run.demos, buffer, cfg.demo_fraction, cfg.batch_size, weights)
        draw, n = functools.partial(mixture.batch, np.random.default_rng([cfg.seed, r])), cfg.updates_per_round
    policy.train()
    losses, norm, lr = [], None, None
    with Prefetch(draw, n, depth=2 if cfg.prefetch else 0) as batches:
        for batch in batches:
            lr = lr_at(cfg, run.progress.updates)
            for group in run.optimizer.param_groups:
                group["lr"] = lr
            loss, _ = policy(batch)
            run.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip or math.inf)
            run.optimizer.step()
            losses.append(float(loss.detach()))
            run.progress.updates += 1
    policy.eval()
    return Updated(
        updates=len(losses),
        loss=float(np.mean(losses)) if losses else None,
        grad_norm=None if norm is None else float(norm),
        lr=lr,
        buffer_episode_lengths=[] if buffer is None else buffer.episode_lengths.tolist(),
        buffer_samples=0 if buffer is None else len(buffer),
        seconds=time.perf_counter() - t0,
    )


def _sample_weights(cfg: FilteredBCConfig, paths: list[str], buffer: DemoDataset | None) -> np.ndarray | None:
    """One weight per success sample, its episode's; None for uniform draws ("episode" weighting, no discount)."""
    if buffer is None or (cfg.weighting == "episode" and cfg.gamma == 1.0):
        return None
    return np.repeat(np.concatenate([read_sample_weights(p) for p in paths]), buffer.episode_lengths)


def lr_at(cfg: FilteredBCConfig, update: int) -> float:
    """The learning rate of optimiser step `update` (a function of it alone, so resume needs no other state)."""
    if cfg.lr_schedule == "cosine":
        return cfg.lr * lr_factor(update, 0, cfg.rounds * cfg.updates_per_round)
    return cfg.lr


def evaluate(run: Run, checkpoint: Path) -> Evaluated:
    """Score `checkpoint` as `vlagym eval` does, on `eval_episodes` seeds from `eval_seed`, without moving the
    training's random streams; the point joins the learning curve ``OUT/eval/curve.json``."""
    from vlagym.eval.configs import EvalConfig
    from vlagym.eval.evaluate import evaluate as run_eval

    cfg, progress = run.cfg, run.progress
    with preserved_rng():
        ecfg = EvalConfig(
            policy=str(checkpoint),
            episodes=cfg.eval_episodes,
            num_envs=cfg.eval_num_envs,
            vectorization=cfg.vectorization,
            seed=cfg.eval_seed,
            out=str(run.out / EVAL_DIR / checkpoint.name),
            progress=False,
        )
        summary: dict[str, Any] = next(iter(run_eval(ecfg)["tasks"].values()))
    point = Evaluated(
        round=progress.round,
        updates=progress.updates,
        env_steps=progress.env_steps,
        train_minutes=progress.train_s / 60,
        success_rate=summary["success_rate"],
        ci95=summary["ci95"],
        n=summary["n"],
        checkpoint=str(checkpoint),
    )
    progress.curve = [c for c in progress.curve if c["updates"] != progress.updates] + [dataclasses.asdict(point)]
    atomic_write_json(run.out / EVAL_DIR / CURVE_NAME, progress.curve)
    return point
