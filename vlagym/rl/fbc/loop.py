"""`train_filtered_bc`: the round loop, collect → relabel → update → checkpoint → evaluate, then log."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from vlagym.io import atomic_write_json
from vlagym.rl.fbc.config import FilteredBCConfig
from vlagym.rl.fbc.metrics import log_round
from vlagym.rl.fbc.phases import collect, evaluate, relabel, update
from vlagym.rl.fbc.session import Run, checkpoint_round, open_run
from vlagym.train.run import torch_threads
from vlagym.train.run_files import RL_CONFIG_NAME, TB_DIR

logger = logging.getLogger(__name__)


def train_filtered_bc(cfg: FilteredBCConfig) -> dict[str, Any]:
    """Run filtered-BC post-training as `cfg` says; returns {"rounds", "updates", "env_steps", "checkpoint" (the
    last one's folder, or None), "success_rate" (of the last evaluation, or None), "curve" (every evaluation)}."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / RL_CONFIG_NAME, cfg.to_dict())
    with torch_threads(cfg.torch_threads):
        run = open_run(cfg, out)
        try:
            return _rounds(run)
        finally:
            run.close()


def _rounds(run: Run) -> dict[str, Any]:
    """The rounds left to run; evaluation loads the checkpoint just saved, as `vlagym eval` would."""
    cfg, progress = run.cfg, run.progress
    writer = SummaryWriter(str(run.out / TB_DIR), purge_step=progress.updates or None)
    bar = tqdm(total=cfg.rounds, initial=progress.round, desc="train-fbc", disable=not cfg.progress)
    checkpoint, round_s = run.resumed_from, 0.0
    try:
        while progress.round < cfg.rounds and not _stop_for_time(cfg, progress.round, progress.train_s, round_s):
            r, t0 = progress.round, time.perf_counter()
            collected = collect(run, r)
            kept = relabel(run, r, collected)
            updated = update(run, r)
            round_s = time.perf_counter() - t0
            progress.train_s += round_s
            progress.round += 1
            checkpoint = checkpoint_round(run)
            done = progress.round >= cfg.rounds or out_of_time(cfg, progress.train_s, round_s)
            due = cfg.eval_every > 0 and (done or progress.round % cfg.eval_every == 0)
            evaluated = evaluate(run, checkpoint) if due else None
            log_round(writer, cfg, progress, collected, kept, updated, evaluated)
            bar.update(1)
        evaluated_last = any(c["updates"] == progress.updates for c in progress.curve)
        if cfg.eval_every > 0 and checkpoint is not None and not evaluated_last:  # e.g. resumed after the last round
            evaluate(run, checkpoint)
    finally:
        writer.close()
        bar.close()
    return {
        "rounds": progress.round,
        "updates": progress.updates,
        "env_steps": progress.env_steps,
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        "success_rate": progress.curve[-1]["success_rate"] if progress.curve else None,
        "curve": progress.curve,
    }


def out_of_time(cfg: FilteredBCConfig, train_s: float, round_s: float) -> bool:
    """Whether a round of `round_s` seconds, started after `train_s` seconds of training, would end past
    `cfg.max_minutes` (or they are already spent)."""
    if cfg.max_minutes is None:
        return False
    budget = 60.0 * cfg.max_minutes
    return train_s >= budget or train_s + round_s > budget


def _stop_for_time(cfg: FilteredBCConfig, round_: int, train_s: float, round_s: float) -> bool:
    if not out_of_time(cfg, train_s, round_s):
        return False
    logger.info(
        "max_minutes=%s: stopping after round %d (%.1f train-min; a round takes %.1f)",
        cfg.max_minutes,
        round_,
        train_s / 60,
        round_s / 60,
    )
    return True
