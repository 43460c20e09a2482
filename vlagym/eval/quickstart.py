"""The whole loop on built-in defaults: scripted demos -> behaviour cloning -> one DAgger round -> evaluation.

    vlagym quickstart            # 10-20 minutes on a 2-core laptop CPU

Every stage writes into one run folder (demos.hdf5, bc/ with checkpoints and
TensorBoard logs, dagger/ with the round's episodes and its fine-tuning, eval/ and
eval_heldout/ with results and videos), and the run's config is saved beside them.
quickstart_summary.json adds the stages' times and the machine's fingerprint
(package versions, CPU): the same seeds train the same weights on one machine, not
on every machine (docs/speed.md). The demos, the DAgger round and the evaluations
each have seeds of their own, so the policy is scored on scenes it never saw.

The DAgger round (Ross et al. 2011) lets the cloned policy act on fresh seeds while
the scripted expert labels every state it visits, then fine-tunes the policy on the
demos plus those labels: the states a cloned policy drifts into, which the expert's
own demos never visit, get the expert's way out of them.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlagym.eval.dagger_config import DaggerConfig
from vlagym.io import atomic_write_json
from vlagym.policies.config import VLAConfig
from vlagym.train.run_files import TB_DIR

logger = logging.getLogger(__name__)

CHUNK_SIZE = VLAConfig.chunk_size  # the policy's default chunk: the quickstart trains with it
#: the DAgger round's episode i is reset with seed DAGGER_SEED + i (`vlagym train-dagger`'s default first seed)
DAGGER_SEED = DaggerConfig.collect_seed
#: peak learning rate of the DAgger round's fine-tuning (the multi-task recipe's, docs/multitask.md)
DAGGER_LR = 1e-4


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
    steps: int = 4000
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
    shading: float = 0.15
    """the training images' gain field (`train-bc --shading`; the hand camera left out): light falling differently
    across the scene. Over training seeds 0-2 it took the `lighting` split from 77.5 / 81.0 / 91.5% to
    89.5 / 90.5 / 92.0%, the other evaluations within the noise; 0.3 did as much for `lighting` and cost `camera`
    4 points against 0.15 (docs/speed.md) (0: off)"""
    dagger_episodes: int = 300
    """episodes of the DAgger round after behaviour cloning: the policy acts on fresh seeds, the scripted expert
    labels every state it visits, and the policy is fine-tuned on the demos plus these (0: no round; skipped for a
    task whose expert cannot label another policy's states)"""
    dagger_steps: int = 2000
    """optimiser steps of the DAgger round's fine-tuning"""
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
        if not 0.0 <= self.shading <= 1.0:
            raise ValueError(f"shading must be in [0, 1], got {self.shading!r}")
        if not 0.0 <= self.ema < 1.0:
            raise ValueError(f"ema must be in [0, 1), got {self.ema!r}")
        for name in ("dagger_episodes", "dagger_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.dagger_episodes and not self.dagger_steps:
            raise ValueError("dagger_steps must be positive when dagger_episodes is (or set dagger_episodes 0)")
        seeds = {
            "the demo seeds": (0, self.demos),
            "the DAgger seeds": (DAGGER_SEED, DAGGER_SEED + self.dagger_episodes),
            "the evaluation seeds": (self.eval_seed, self.eval_seed + self.eval_episodes),
        }
        ranges = sorted((first, end, name) for name, (first, end) in seeds.items() if end > first)
        for (a0, a1, a), (b0, b1, b) in itertools.pairwise(ranges):
            if b0 < a1:
                raise ValueError(f"{a} {a0}..{a1 - 1} overlap {b} {b0}..{b1 - 1}: every stage needs fresh scenes")


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
    from vlagym.train.configs import AugmentConfig
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
    batch_size = min(cfg.batch_size, demos.steps)  # a tiny demo set (a smoke run) may hold fewer samples than one batch
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
            batch_size=batch_size,
            seed=cfg.seed,
            augmentation=AugmentConfig(shading=cfg.shading),
            checkpoint_every=max(cfg.steps // 3, 1),
            progress=cfg.progress,
        )
    )
    checkpoint = latest_checkpoint(bc_out)
    timings["train"] = time.perf_counter() - start

    dagger = None
    if dagger_applies(cfg):
        start = time.perf_counter()
        dagger = _dagger_round(cfg, demo_path, checkpoint, batch_size)
        checkpoint = dagger["checkpoint"]
        timings["dagger"] = time.perf_counter() - start

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
        "dagger": dagger,
        "tensorboard": str(bc_out / TB_DIR),
        "results": results,
        "labels": labels,
        "timings_s": timings,
        "total_s": sum(timings.values()),
        "machine": next(iter(results.values()))["machine"],  # this process's, as its evaluations recorded it
    }
    atomic_write_json(out / "quickstart_summary.json", {k: v for k, v in summary.items() if k != "results"})
    return summary


def dagger_applies(cfg: QuickstartConfig) -> bool:
    """Whether the quickstart runs its DAgger round: asked for, and the task's expert can label another policy's
    states (`vlagym.envs.expert.labels_others`); otherwise the BC checkpoint is evaluated as it is."""
    from vlagym.envs.expert import labels_others

    if not cfg.dagger_episodes:
        return False
    if not labels_others(cfg.task):
        logger.warning("%s's expert cannot label another policy's states: no DAgger round", cfg.task)
        return False
    return True


def _dagger_round(cfg: QuickstartConfig, demo_path: Path, checkpoint: Path, batch_size: int) -> dict[str, Any]:
    """One DAgger round from the BC checkpoint (`vlagym train-dagger`'s, into OUT/dagger): its episodes, how many
    the acting policy solved, and the fine-tuned checkpoint."""
    from vlagym.eval.dagger_rounds import CONFIG_NAME, train_dagger
    from vlagym.train.bc import BCConfig
    from vlagym.train.configs import AugmentConfig

    out = Path(cfg.out) / "dagger"
    if (out / CONFIG_NAME).is_file():  # an earlier quickstart's round in this folder: its demos and BC are replaced too
        logger.info("replacing the earlier run's DAgger round in %s", out)
        shutil.rmtree(out)
    summary = train_dagger(
        DaggerConfig(
            init=str(checkpoint),
            bc=BCConfig(
                dataset=[str(demo_path)],
                steps=cfg.dagger_steps,
                lr=DAGGER_LR,
                ema=cfg.ema,
                batch_size=batch_size,
                seed=cfg.seed,
                augmentation=AugmentConfig(shading=cfg.shading),
                checkpoint_every=cfg.dagger_steps,
            ),
            out=str(out),
            rounds=1,
            tasks=[cfg.task],
            episodes=cfg.dagger_episodes,
            collect_seed=DAGGER_SEED,
            num_envs=cfg.num_envs,  # the checkpoint acts, and is fine-tuned to act, as the BC run trained it to
            progress=cfg.progress,
        )
    )
    (record,) = summary["rounds"]
    (collected,) = record["collection"].values()
    return {
        "episodes": collected["episodes"],
        "policy_successes": collected["policy_successes"],
        "checkpoint": record["checkpoint"],
    }
