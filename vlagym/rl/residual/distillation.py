"""`distill`: the residual teacher's behaviour, cloned into an image-only VLA (success-filtered BC on the
teacher's rollouts).

The teacher (base VLA + residual, which reads the simulator's privileged state) cannot be deployed; the student
can: a VLA of the base's architecture, trained from scratch by behaviour cloning on the teacher's successful
episodes (the images, proprioception and instruction it saw, and the actions it executed), optionally together
with the base's own demos. The output is an ordinary VLA checkpoint that `vlagym eval` loads.

    OUT/distill_config.json
    OUT/teacher_rollouts.hdf5       the teacher's successes, a demo file (`vlagym.rl.collection.files`)
    OUT/bc/                         the student's `train-bc` run (checkpoints, TensorBoard)
    OUT/eval/                       the student on seeds eval_seed + i (results.json, results.md)
    OUT/distill_summary.json        counts, success rates and the time split
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from gymnasium.vector import AutoresetMode

from vlagym.envs.pool import make_vec
from vlagym.io import atomic_write_json
from vlagym.policies.checkpoint import read_checkpoint_config
from vlagym.policies.config import VLAConfig
from vlagym.rl.collection.files import write_rollouts
from vlagym.rl.collection.recorder import RolloutRecorder
from vlagym.rl.collection.rollouts import collect_round
from vlagym.rl.residual.config import DistillConfig
from vlagym.rl.residual.teacher import ResidualTeacher, load_teacher
from vlagym.train.configs import BCConfig
from vlagym.train.run_files import latest_checkpoint

logger = logging.getLogger(__name__)

CONFIG_NAME = "distill_config.json"
ROLLOUTS_NAME = "teacher_rollouts.hdf5"
SUMMARY_NAME = "distill_summary.json"


def collect_teacher_rollouts(teacher: ResidualTeacher, cfg: DistillConfig, path: Path) -> dict[str, Any]:
    """Run the teacher on seeds collect_seed + i and write its successes to `path`; counts and seconds."""
    envs = make_vec(
        teacher.task,
        num_envs=cfg.n_envs,
        vectorization_mode=cfg.vectorization,
        vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED},
        wrappers=[RolloutRecorder],
        **teacher.env_kwargs,
    )
    start = time.perf_counter()
    try:
        collection = collect_round(envs, teacher, [cfg.collect_seed + i for i in range(cfg.episodes)], cfg.progress)
    finally:
        envs.close()
    student_env = student_env_kwargs(teacher)
    write_rollouts(path, collection.successes, teacher.task, student_env)
    kept = len(collection.successes)
    logger.info("teacher: %d of %d episodes succeeded (%s)", kept, cfg.episodes, path)
    return {"episodes": cfg.episodes, "successes": kept, "collect_s": time.perf_counter() - start}


def student_env_kwargs(teacher: ResidualTeacher) -> dict[str, Any]:
    """The env the student observes: the teacher's, with rgb observations only and the default reward."""
    kwargs = dict(teacher.env_kwargs)
    kwargs["obs_mode"] = "rgb"
    kwargs.pop("reward_mode", None)
    return kwargs


def distill(cfg: DistillConfig) -> dict[str, Any]:
    """Collect the teacher's rollouts, train the student on them, evaluate it; the summary."""
    from vlagym.eval.evaluate import EvalConfig, evaluate
    from vlagym.train.bc import train_bc

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / CONFIG_NAME, cfg.to_dict())
    teacher = load_teacher(cfg.teacher)
    rollouts = out / ROLLOUTS_NAME
    summary_path = out / SUMMARY_NAME
    if cfg.resume and rollouts.is_file() and summary_path.is_file():
        collected = json.loads(summary_path.read_text())["teacher"]
    else:
        collected = collect_teacher_rollouts(teacher, cfg, rollouts)
        atomic_write_json(summary_path, {"teacher": collected})
    if collected["successes"] == 0:
        raise ValueError(f"the teacher succeeded in none of its {cfg.episodes} episodes: nothing to distil")
    policy = VLAConfig.from_dict(read_checkpoint_config(teacher.description["base"])["config"])
    start = time.perf_counter()
    train_bc(
        BCConfig(
            dataset=[str(rollouts), *cfg.demos],
            out=str(out / "bc"),
            policy=policy,
            steps=cfg.steps,
            ema=cfg.ema,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            checkpoint_every=max(cfg.steps // 3, 1),
            resume=cfg.resume,
            progress=cfg.progress,
        )
    )
    train_s = time.perf_counter() - start
    checkpoint = latest_checkpoint(out / "bc")
    start = time.perf_counter()
    results = evaluate(
        EvalConfig(
            policy=str(checkpoint),
            episodes=cfg.eval_episodes,
            num_envs=cfg.n_envs,
            seed=cfg.eval_seed,
            out=str(out / "eval"),
            vectorization=cfg.vectorization,
            progress=cfg.progress,
        )
    )
    student = next(iter(results["tasks"].values()))
    summary = {
        "teacher": collected,
        "student": {"checkpoint": str(checkpoint), "success_rate": student["success_rate"], "ci95": student["ci95"]},
        "seconds": {"collect": collected["collect_s"], "train": train_s, "evaluate": time.perf_counter() - start},
    }
    atomic_write_json(summary_path, summary)
    return summary
