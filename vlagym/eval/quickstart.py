"""The whole loop on built-in defaults: scripted demos -> behaviour cloning -> evaluation.

    vlagym quickstart            # about 15 minutes on a 2-core laptop CPU

Every stage writes into one run folder (demos.hdf5, bc/ with checkpoints and
TensorBoard logs, eval/ and eval_heldout/ with results and videos), and the
run's config is saved beside them. quickstart_summary.json adds the stages' times
and the machine's fingerprint (package versions, CPU): the same seeds train the
same weights on one machine, not on every machine (docs/speed.md). Evaluation
seeds start at `eval_seed`, far from the demo seeds 0..demos-1, so the policy is
scored on scenes it never saw.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlagym.io import atomic_write_json
from vlagym.policies.config import VLAConfig
from vlagym.train.run_files import TB_DIR

logger = logging.getLogger(__name__)

CHUNK_SIZE = VLAConfig.chunk_size  # the policy's default chunk: the quickstart trains with it


@dataclass
class QuickstartConfig:
    """Options of `vlagym quickstart`; the defaults are the documented main job."""

    task: str = "VLA-PickCup-v0"
    """task to learn"""
    demos: int = 1000
    """scripted-expert episodes to collect (seeds 0..demos-1; those the noisy expert fails are dropped)"""
    action_noise: float = 0.3
    """std of the noise on the demos' executed arm actions (DART): the demos then show the expert recovering
    from small errors, the ones a cloned policy makes"""
    num_envs: int = 2
    """parallel sub-envs for collection and evaluation"""
    image_size: int = 64
    """camera image side, for the demos and the policy"""
    steps: int = 5000
    """behaviour-cloning optimiser steps"""
    batch_size: int = 64
    """behaviour-cloning batch size"""
    ema: float = 0.999
    """decay of the EMA of the weights that is evaluated and saved (0: off)"""
    temporal_ensemble: bool = True
    """act with ACT's temporal ensembling: predict a 10-action chunk every step and average every chunk's
    action for this step (measured better than executing chunks open-loop)"""
    n_action_steps: int = 5
    """without temporal ensembling: actions of each predicted chunk executed before predicting again"""
    eval_episodes: int = 200
    """evaluation episodes per instruction split"""
    eval_seed: int = 1_000_000
    """first evaluation seed (episode i uses eval_seed + i)"""
    videos: int = 2
    """mp4s of the first evaluation episodes"""
    out: str = "runs/quickstart"
    """run folder"""
    seed: int = 0
    """training seed"""
    progress: bool = True
    """show progress bars"""

    def __post_init__(self) -> None:
        for name in ("demos", "num_envs", "steps", "batch_size", "eval_episodes", "n_action_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 1 <= self.n_action_steps <= CHUNK_SIZE:
            raise ValueError(f"n_action_steps must be in 1..{CHUNK_SIZE} (the chunk size), got {self.n_action_steps!r}")
        if not 0.0 <= self.action_noise <= 1.0:
            raise ValueError(f"action_noise must be in [0, 1], got {self.action_noise!r}")
        if not 0.0 <= self.ema < 1.0:
            raise ValueError(f"ema must be in [0, 1), got {self.ema!r}")
        if self.eval_seed < self.demos:
            raise ValueError(f"eval_seed ({self.eval_seed}) must not overlap the demo seeds 0..{self.demos - 1}")


def evaluations(task: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(folder, label, env kwargs) of the quickstart's evaluations of `task`.

    Every task is scored with its train and its held-out instruction wordings; PickCup also on scenes that
    always hold three cups, where only the instruction says which one to lift (instruction following).
    """
    runs = [
        ("eval", "train instructions", {}),
        ("eval_heldout", "held-out paraphrases", {"split": "heldout_paraphrase"}),
    ]
    if task == "VLA-PickCup-v0":
        runs.append(("eval_three_cups", "three cups (instruction following)", {"num_cups": 3}))
    return runs


def run_quickstart(cfg: QuickstartConfig) -> dict[str, Any]:
    """Collect demos, train the VLA, evaluate it on the train and held-out wordings; returns a summary."""
    # Heavy imports here: `vlagym.cli` must load without torch.
    from vlagym.eval.evaluate import EvalConfig, evaluate
    from vlagym.policies.config import VLAConfig
    from vlagym.train.bc import BCConfig, train_bc
    from vlagym.train.demos import DemoConfig, collect_demos
    from vlagym.train.run_files import latest_checkpoint

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "quickstart_config.json", dataclasses.asdict(cfg))
    timings: dict[str, float] = {}

    start = time.perf_counter()
    demo_path = out / "demos.hdf5"
    demos = collect_demos(
        DemoConfig(
            task=cfg.task,
            episodes=cfg.demos,
            num_envs=cfg.num_envs,
            out=str(demo_path),
            image_size=cfg.image_size,
            env_kwargs={},
            action_noise=cfg.action_noise,
            overwrite=True,
            progress=cfg.progress,
        )
    )
    timings["demos"] = time.perf_counter() - start

    start = time.perf_counter()
    bc_out = out / "bc"
    train_bc(
        BCConfig(
            dataset=[str(demo_path)],
            out=str(bc_out),
            policy=VLAConfig(
                image_size=cfg.image_size,
                temporal_ensemble=cfg.temporal_ensemble,
                n_action_steps=1 if cfg.temporal_ensemble else cfg.n_action_steps,
            ),
            steps=cfg.steps,
            ema=cfg.ema,
            # A tiny demo set (a smoke run) may hold fewer samples than one batch.
            batch_size=min(cfg.batch_size, demos.steps),
            seed=cfg.seed,
            checkpoint_every=max(cfg.steps // 3, 1),
            progress=cfg.progress,
        )
    )
    checkpoint = latest_checkpoint(bc_out)
    timings["train"] = time.perf_counter() - start

    results, labels = {}, {}
    for name, label, env_kwargs in evaluations(cfg.task):
        start = time.perf_counter()
        results[name] = evaluate(
            EvalConfig(
                policy=str(checkpoint),
                tasks=[cfg.task],
                episodes=cfg.eval_episodes,
                num_envs=cfg.num_envs,
                seed=cfg.eval_seed,
                out=str(out / name),
                env_kwargs=env_kwargs,
                videos=cfg.videos if name == "eval" else 0,
                progress=cfg.progress,
            )
        )
        labels[name] = label
        timings[name] = time.perf_counter() - start
    summary = {
        "out": str(out),
        "demos": {"path": str(demo_path), "demos": demos.demos, "steps": demos.steps, "failures": demos.failures},
        "checkpoint": str(checkpoint),
        "tensorboard": str(bc_out / TB_DIR),
        "results": results,
        "labels": labels,
        "timings_s": timings,
        "total_s": sum(timings.values()),
        "machine": next(iter(results.values()))["machine"],  # this process's, as its evaluations recorded it
    }
    atomic_write_json(out / "quickstart_summary.json", {k: v for k, v in summary.items() if k != "results"})
    return summary
