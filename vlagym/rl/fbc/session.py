"""What the phases of a run share (`Run`): the policy and its optimiser, the demos, the collection envs and the
counters; how a run starts or resumes (`open_run`) and how a round is checkpointed (`checkpoint_round`).

A checkpoint ``OUT/checkpoints/step_<updates>/`` is a VLA checkpoint `vlagym eval` loads, plus the training
state exact resume needs: weights, optimiser, counters and the global random streams. The rounds' seeds are
fixed by the config, so a resumed run equals an uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vlagym.io import file_sha256
from vlagym.policies.checkpoint import WEIGHTS_NAME, read_checkpoint_config
from vlagym.policies.vla import VLAPolicy
from vlagym.rl.fbc.buffer import demo_dataset
from vlagym.rl.fbc.collect import NoisyVLA, load_policy
from vlagym.rl.fbc.collectors import LocalCollector, RayCollector
from vlagym.rl.fbc.config import ROLLOUTS_DIR, FilteredBCConfig
from vlagym.train.dataset import DemoDataset
from vlagym.train.run import load_state, param_groups, rng_state, seed_everything, set_rng_state
from vlagym.train.run_files import (
    CURVE_NAME,
    EVAL_DIR,
    STATE_NAME,
    checkpoint_dir,
    commit_checkpoint,
    latest_checkpoint,
)

logger = logging.getLogger(__name__)


@dataclass
class Progress:
    """The counters a checkpoint saves."""

    round: int = 0
    """rounds completed"""
    updates: int = 0
    env_steps: int = 0
    train_s: float = 0.0
    """wall-clock seconds of collection and training so far, evaluations excluded"""
    success_rounds: list[int] = field(default_factory=list)
    """the rounds that kept successes (each has its OUT/rollouts file)"""
    curve: list[dict[str, Any]] = field(default_factory=list)
    """the evaluations so far (OUT/eval/curve.json)"""


@dataclass
class Run:
    """A run in progress: what every phase reads, and the counters they advance."""

    cfg: FilteredBCConfig
    out: Path
    policy: VLAPolicy
    """trained in place; it collects, is saved and is evaluated"""
    optimizer: torch.optim.Optimizer
    demos: DemoDataset | None
    env_kwargs: dict[str, Any]
    """of the collection and evaluation env (the checkpoint's, then the config's)"""
    extra: dict[str, Any]
    """what every checkpoint's config.json records of the run"""
    progress: Progress
    resumed_from: Path | None
    collector: LocalCollector | RayCollector
    """runs each round's episodes, here or on Ray workers"""

    def close(self) -> None:
        self.collector.close()


def open_run(cfg: FilteredBCConfig, out: Path) -> Run:
    """Load the BC checkpoint, make the optimiser, the demos and the collection envs, and resume from the last
    checkpoint when `cfg.resume` finds one (a fresh run drops an old run's rollouts)."""
    seed_everything(cfg.seed)
    policy = load_policy(cfg)
    meta = read_checkpoint_config(cfg.policy)
    env_kwargs = {"obs_mode": "rgb", "image_size": policy.config.image_size, "cameras": list(policy.config.cameras)}
    env_kwargs.update((meta.get("extra") or {}).get("env_kwargs") or {})
    env_kwargs.update(cfg.env_kwargs)
    extra = {
        "env_id": cfg.task,
        "env_kwargs": env_kwargs,
        "rl_config": cfg.to_dict(),
        "bc_checkpoint": cfg.policy,
        "bc_sha256": file_sha256(Path(cfg.policy) / WEIGHTS_NAME),
    }
    optimizer = torch.optim.AdamW(param_groups(policy, cfg.weight_decay), lr=cfg.lr)
    demos = demo_dataset(cfg.demos, policy, cfg.augmentation if cfg.augment else None, cfg.seed)
    last = latest_checkpoint(out) if cfg.resume else None
    if last is not None:
        progress = _resume(last, out, policy, optimizer, extra["bc_sha256"], cfg.policy)
    else:
        if cfg.resume:
            logger.info("no checkpoint in %s: starting afresh", checkpoint_dir(out))
        progress = Progress()
        shutil.rmtree(out / ROLLOUTS_DIR, ignore_errors=True)  # a fresh run: an old run's rollouts are not ours
    collector: LocalCollector | RayCollector
    if cfg.backend == "ray":
        collector = RayCollector(cfg, env_kwargs, policy)
    else:
        collector = LocalCollector(cfg, env_kwargs, NoisyVLA(policy, cfg.noise_std, cfg.noise_hold))
    return Run(cfg, out, policy, optimizer, demos, env_kwargs, extra, progress, last, collector)


def _resume(
    last: Path, out: Path, policy: VLAPolicy, optimizer: torch.optim.Optimizer, bc_sha256: str, bc: str
) -> Progress:
    """Restore the weights, the optimiser and the random streams of checkpoint `last`; its counters."""
    state = load_state(last)
    if state.get("bc_sha256") != bc_sha256:
        raise ValueError(f"{last} was post-trained from other BC weights than {bc} now holds; resume with the original")
    policy.load_state_dict(state["model"], strict=True)
    optimizer.load_state_dict(state["optimizer"])
    progress = Progress(
        round=int(state["round"]),
        updates=int(state["updates"]),
        env_steps=int(state["env_steps"]),
        train_s=float(state["train_s"]),
        success_rounds=[int(k) for k in state["success_rounds"]],
    )
    curve_path = out / EVAL_DIR / CURVE_NAME
    if curve_path.is_file():
        progress.curve = [c for c in json.loads(curve_path.read_text()) if c["updates"] <= progress.updates]
    set_rng_state(state["rng"])
    logger.info("resumed from %s after round %d", last, progress.round)
    return progress


def checkpoint_round(run: Run) -> Path:
    """``OUT/checkpoints/step_<updates>``: the policy as a VLA checkpoint and the training state; committed
    atomically (`vlagym.train.run.commit_checkpoint`)."""
    progress = run.progress

    def fill(folder: Path) -> None:
        extra = {**run.extra, "num_updates": progress.updates, "round": progress.round}
        run.policy.save_pretrained(folder, extra=extra)
        state = {
            "model": run.policy.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "round": progress.round,
            "updates": progress.updates,
            "env_steps": progress.env_steps,
            "train_s": progress.train_s,
            "success_rounds": list(progress.success_rounds),
            "bc_sha256": run.extra["bc_sha256"],
            "rng": rng_state(),
        }
        torch.save(state, folder / STATE_NAME)

    return commit_checkpoint(run.out, progress.updates, fill)
