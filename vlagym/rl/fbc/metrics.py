"""`log_round`: a round's TensorBoard scalars (``OUT/tb``, at its last update count) and its log line.

rollout/success_rate, ep_len_mean      the round's collection episodes (noisy; replays not counted)
rollout/outcome_<outcome>              how they ended, as shares (`vlagym eval`'s diagnostics)
rollout/success_reopen_share           successes whose gripper opened again (kept or not)
rollout/successes_filtered             successes `max_gripper_reopens` dropped
rollout/success_close_distance_p50     median reach distance at the successes' first close
far_close/{rollout,hindsight,delay}    successes `max_close_distance` dropped, by source (when set)
hindsight/replays, success_rate, successes_kept, skipped_{no_close,at_target,layout}      (with hindsight)
delay/replayed, success_rate, successes_kept, steps, by_k/<k>, skipped_{no_close,at_start}  (close_delays)
buffer/episodes, samples, mean_episode_length                  the successes trained on
train/loss, grad_norm, lr
time/collect_s, collect_policy_s, collect_env_s, learn_s       collection: choosing actions vs the rest
time/env_steps_per_s, env_steps                                (simulation, rendering, replays, the file)
eval/success_rate                                              (rounds with an evaluation)
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from vlagym.eval.diagnostics import outcome_counts
from vlagym.rl.fbc.config import FilteredBCConfig
from vlagym.rl.fbc.phases import Collected, Evaluated, Kept, Updated
from vlagym.rl.fbc.session import Progress

logger = logging.getLogger(__name__)

HINDSIGHT_SKIPS = ("no_close", "at_target", "layout")
DELAY_SKIPS = ("no_close", "at_start")


def log_round(
    writer: Any,
    cfg: FilteredBCConfig,
    progress: Progress,
    collected: Collected,
    kept: Kept,
    updated: Updated,
    evaluated: Evaluated | None,
) -> None:
    """Write the scalars of the round just done to `writer` (a TensorBoard ``SummaryWriter``) at the run's
    update count, and log its summary."""
    scalars = {
        **_rollout_scalars(collected, kept),
        **(_far_close_scalars(kept) if cfg.max_close_distance is not None else {}),
        **(_hindsight_scalars(collected, kept) if cfg.hindsight else {}),
        **(_delay_scalars(cfg, collected, kept) if cfg.close_delays else {}),
        **_update_scalars(updated),
        **_time_scalars(collected, kept, updated, progress.env_steps),
    }
    if evaluated is not None:
        scalars["eval/success_rate"] = evaluated.success_rate
    for tag, value in scalars.items():
        writer.add_scalar(tag, value, progress.updates)
    r, records = progress.round - 1, collected.collection.records
    logger.info(
        "round %d: %d/%d collection episodes succeeded (%d kept, %d of them hindsight and %d delayed-close "
        "replays), %d updates, loss %.4f",
        r,
        sum(rec.success for rec in records),
        len(records),
        len(kept.successes),
        kept.hindsight,
        kept.delayed,
        updated.updates,
        math.nan if updated.loss is None else updated.loss,
    )
    if evaluated is not None:
        logger.info("round %d: evaluation success rate %.3f", r, evaluated.success_rate)


def _rollout_scalars(collected: Collected, kept: Kept) -> dict[str, float]:
    records = collected.collection.records
    scalars = {
        "rollout/success_rate": float(np.mean([rec.success for rec in records])),
        "rollout/ep_len_mean": sum(rec.length for rec in records) / len(records),
    }
    for outcome, count in outcome_counts(rec.outcome for rec in records).items():
        scalars[f"rollout/outcome_{outcome}"] = count / len(records)
    if kept.reopens:
        scalars["rollout/success_reopen_share"] = float(np.mean(np.array(kept.reopens) > 0))
    scalars["rollout/successes_filtered"] = kept.dropped_reopens
    if kept.close_distances:  # the expert closes within 1 cm of the reach point
        scalars["rollout/success_close_distance_p50"] = float(np.median(kept.close_distances))
    return scalars


def _far_close_scalars(kept: Kept) -> dict[str, float]:
    return {f"far_close/{source}": dropped for source, dropped in kept.far_closes.items()}


def _hindsight_scalars(collected: Collected, kept: Kept) -> dict[str, float]:
    replays = collected.collection.hindsight
    ran = [x for x in replays if not x.skipped]
    scalars = {"hindsight/replays": len(ran), "hindsight/successes_kept": kept.hindsight}
    if ran:
        scalars["hindsight/success_rate"] = sum(x.episode is not None for x in replays) / len(ran)
    for why in HINDSIGHT_SKIPS:
        scalars[f"hindsight/skipped_{why}"] = sum(x.skipped == why for x in replays)
    return scalars


def _delay_scalars(cfg: FilteredBCConfig, collected: Collected, kept: Kept) -> dict[str, float]:
    replays = collected.collection.delayed
    ran = [x for x in replays if not x.skipped]
    succeeded = [x.episode for x in replays if x.episode is not None]
    scalars = {
        "delay/replayed": len(ran),
        "delay/successes_kept": kept.delayed,
        "delay/steps": sum(x.steps for x in replays),
    }
    if ran:
        scalars["delay/success_rate"] = len(succeeded) / len(ran)
    for k in cfg.close_delays:
        scalars[f"delay/by_k/{k}"] = sum(e.close_delay == k for e in succeeded)
    for why in DELAY_SKIPS:
        scalars[f"delay/skipped_{why}"] = sum(x.skipped == why for x in replays)
    return scalars


def _update_scalars(updated: Updated) -> dict[str, float]:
    lengths = updated.buffer_episode_lengths
    scalars = {"buffer/episodes": len(lengths), "buffer/samples": updated.buffer_samples}
    if lengths:  # slow successes (e.g. dropped and picked up again) are most samples of a buffer
        scalars["buffer/mean_episode_length"] = float(np.mean(lengths))
    if updated.updates:
        scalars.update({"train/loss": updated.loss, "train/grad_norm": updated.grad_norm, "train/lr": updated.lr})
    return scalars


def _time_scalars(collected: Collected, kept: Kept, updated: Updated, env_steps: int) -> dict[str, float]:
    collect_s = collected.seconds + kept.seconds  # the episodes, their replays and writing the round's file
    return {
        "time/collect_s": collect_s,
        "time/collect_policy_s": collected.policy_s,
        "time/collect_env_s": collect_s - collected.policy_s,
        "time/learn_s": updated.seconds,
        "time/env_steps_per_s": collected.env_steps / collect_s,
        "time/env_steps": env_steps,
    }
