"""Sequential stopping of a suite run's cells (`SuiteRunConfig.sequential_width`).

Each task x split keeps only the first n episodes in seed order, n the first count >= `sequential_min_episodes`
at which `vlagym.eval.stats.can_stop` holds on those n outcomes (the Wilson 95% interval is at most
`sequential_width` wide), or all of them if it never holds. The rule is checked after every episode of the
ordered prefix, never per batch: the episodes run in blocks of seeds (at least as many as run at once, `num_envs`
per worker, and never short of the first count at which the rule could hold), and episodes a block ran past n
are discarded, not counted. So n depends only on the outcomes in seed order, and for a policy whose episodes
depend only on their seed (the expert; a checkpoint run with `num_envs=1`) the cell is exactly the first n
episodes of a full run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from vlagym.eval.configs import EvalError, SuiteRunConfig
from vlagym.eval.local_rollouts import Rollouts
from vlagym.eval.rollout import EpisodeRecord
from vlagym.eval.stats import can_stop

logger = logging.getLogger(__name__)


def stopping_index(outcomes: Sequence[bool], target_width: float, min_episodes: int) -> int | None:
    """The first n at which `can_stop` holds on `outcomes[:n]`, checked after every episode in order; else None."""
    successes = 0
    for n, success in enumerate(outcomes, start=1):
        successes += bool(success)
        if can_stop(successes, n, target_width, min_episodes):
            return n
    return None


def earliest_stop(done: int, successes: int, total: int, target_width: float, min_episodes: int) -> int:
    """The least n > `done` at which the rule could hold, whatever the outcomes after the first `done`; `total` if none.

    For a fixed n the Wilson interval narrows as the rate moves away from 1/2, so the most favourable
    continuations are all failures or all successes: checking those two is enough.
    """
    n = max(done + 1, min_episodes)
    while n < total and not (
        can_stop(successes, n, target_width, min_episodes)
        or can_stop(successes + n - done, n, target_width, min_episodes)
    ):
        n += 1
    return min(n, total)


def run_sequential(
    rollouts: Rollouts,
    task: str,
    env_kwargs: dict[str, Any],
    seeds: list[int],
    cfg: SuiteRunConfig,
    reset_options: dict[str, Any] | None = None,
) -> tuple[list[EpisodeRecord], int]:
    """Episodes in blocks of seeds (in order) until `stopping_index` finds n; the records of the first n, and how
    many episodes ran.

    A block spans at least `rollouts.parallel` seeds (every sub-env of every worker busy) and reaches at least
    `earliest_stop`, so no block ends where the rule cannot hold yet. Which block the rule holds in never changes
    n: the rule is checked on every prefix, and the episodes after n are dropped.
    """
    width, least = cfg.sequential_width, cfg.sequential_min_episodes
    if width is None:
        raise EvalError("sequential stopping needs sequential_width")
    records: list[EpisodeRecord] = []
    bar = tqdm(total=len(seeds), desc="episodes (sequential)", unit="ep", disable=not cfg.progress)
    try:
        while len(records) < len(seeds):
            done = len(records)
            successes = sum(r.success for r in records)
            end = max(earliest_stop(done, successes, len(seeds), width, least), done + rollouts.parallel)
            block = rollouts.run(task, env_kwargs, seeds[done:end], reset_options)
            records += block
            bar.update(len(block))
            n = stopping_index([r.success for r in records], width, least)
            if n is not None:
                logger.info("sequential stopping: %d of %d episodes (%d run)", n, len(seeds), len(records))
                return records[:n], len(records)
    finally:
        bar.close()
    return records, len(records)


def sequential_settings(cfg: SuiteRunConfig, episodes: int) -> dict[str, Any] | None:
    """The bundle's record of the stopping rule; None when every episode runs."""
    if cfg.sequential_width is None:
        return None
    return {
        "target_width": cfg.sequential_width,
        "min_episodes": cfg.sequential_min_episodes,
        "max_episodes": episodes,
        "rule": "per task x split, keep the first n episodes in seed order, n the first count >= min_episodes whose "
        "Wilson 95% interval is at most target_width wide (vlagym.eval.stats.can_stop), else all max_episodes; "
        "episodes run past n are discarded",
    }
