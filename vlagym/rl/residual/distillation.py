"""`distill`: the residual teacher's behaviour, cloned into an image-only VLA (success-filtered BC on the
teacher's rollouts, then optionally DAgger rounds with the teacher as labeller).

The teacher (base VLA + residual, which reads the simulator's privileged state) cannot be deployed; the student
can: a VLA of the base's architecture, trained from scratch by behaviour cloning on the teacher's successful
episodes (the images, proprioception and instruction it saw, and the actions it executed), optionally together
with the base's own demos. Each DAgger round then runs the student, labels the states it visits with the
teacher's actions (`vlagym.rl.residual.dagger`) and fine-tunes the student on everything so far. The output is
an ordinary VLA checkpoint that `vlagym eval` loads.

    OUT/distill_config.json
    OUT/teacher_rollouts.hdf5       the teacher's successes, a demo file (`vlagym.rl.collection.files`)
    OUT/bc/                         the student's `train-bc` run (checkpoints, TensorBoard)
    OUT/eval/                       the student on seeds eval_seed + i (results.json, results.md)
    OUT/dagger/round_R/             DAgger round R: labelled.hdf5 (the student's episodes, the teacher's
                                    actions), bc/ (the fine-tuning) and eval/
    OUT/distill_summary.json        counts, success rates per round and the time split
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from vlagym.eval.adapters import CheckpointPolicy
from vlagym.io import atomic_write_json
from vlagym.policies.checkpoint import read_checkpoint_config
from vlagym.policies.config import VLAConfig
from vlagym.rl.collection.files import write_rollouts
from vlagym.rl.collection.rollouts import collect_round
from vlagym.rl.residual.config import DistillConfig
from vlagym.rl.residual.dagger import collect_labelled, recording_envs
from vlagym.rl.residual.remote import RayTeacher
from vlagym.rl.residual.teacher import ResidualTeacher, load_teacher
from vlagym.train.configs import BCConfig
from vlagym.train.run_files import latest_checkpoint

logger = logging.getLogger(__name__)

CONFIG_NAME = "distill_config.json"
ROLLOUTS_NAME = "teacher_rollouts.hdf5"
LABELS_NAME = "labelled.hdf5"
SUMMARY_NAME = "distill_summary.json"


def collect_teacher_rollouts(
    teacher: ResidualTeacher, cfg: DistillConfig, path: Path, remote: RayTeacher | None = None
) -> dict[str, Any]:
    """Run the teacher on seeds collect_seed + i (here, or on `remote`'s Ray workers) and write its successes to
    `path`; counts and seconds."""
    seeds = [cfg.collect_seed + i for i in range(cfg.episodes)]
    start = time.perf_counter()
    if remote is not None:
        collection = remote.teach(seeds)
    else:
        envs = recording_envs(teacher, cfg.n_envs, cfg.vectorization)
        try:
            collection = collect_round(envs, teacher, seeds, cfg.progress)
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
    """Collect the teacher's rollouts, train the student on them and evaluate it; then the DAgger rounds, each
    evaluated. The summary, rewritten after every stage (a resumed run skips the stages it records)."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / CONFIG_NAME, cfg.to_dict())
    teacher = load_teacher(cfg.teacher)
    remote = RayTeacher(cfg, teacher.description["base"]) if cfg.backend == "ray" else None
    try:
        return _distill(cfg, out, teacher, remote)
    finally:
        if remote is not None:
            remote.close()


def _distill(cfg: DistillConfig, out: Path, teacher: ResidualTeacher, remote: RayTeacher | None) -> dict[str, Any]:
    rollouts, summary_path = out / ROLLOUTS_NAME, out / SUMMARY_NAME
    summary: dict[str, Any] = {}
    if cfg.resume and rollouts.is_file() and summary_path.is_file():
        summary = json.loads(summary_path.read_text())
    if "teacher" not in summary:
        summary = {"teacher": collect_teacher_rollouts(teacher, cfg, rollouts, remote)}
        atomic_write_json(summary_path, summary)
    if summary["teacher"]["successes"] == 0:
        raise ValueError(f"the teacher succeeded in none of its {cfg.episodes} episodes: nothing to distil")
    policy = VLAConfig.from_dict(read_checkpoint_config(teacher.description["base"])["config"])
    datasets = [str(rollouts), *cfg.demos]
    rounds: list[dict[str, Any]] = summary.setdefault("rounds", [])
    for r in range(cfg.dagger_rounds + 1):
        folder = out if r == 0 else out / "dagger" / f"round_{r}"
        if r > 0:
            datasets.append(str(folder / LABELS_NAME))
        if r < len(rounds):  # done before a resume
            continue
        record: dict[str, Any] = {"round": r, "seconds": {}}
        if r > 0:
            record["labelled"] = _dagger_data(teacher, cfg, r, rounds[-1]["checkpoint"], folder / LABELS_NAME, remote)
            record["seconds"]["collect"] = record["labelled"].pop("collect_s")
        start = time.perf_counter()
        steps, init = (cfg.steps, None) if r == 0 else (cfg.dagger_steps, rounds[-1]["checkpoint"])
        checkpoint = _train_student(cfg, datasets, folder / "bc", policy, steps, init)
        record["seconds"]["train"] = time.perf_counter() - start
        start = time.perf_counter()
        record.update(_evaluate_student(cfg, checkpoint, folder / "eval"))
        record["seconds"]["evaluate"] = time.perf_counter() - start
        rounds.append(record)
        summary["student"] = {k: record[k] for k in ("checkpoint", "success_rate", "ci95")}
        summary["seconds"] = _total_seconds(summary)
        atomic_write_json(summary_path, summary)
        logger.info("student of round %d: %.1f%% (%s)", r, 100 * record["success_rate"], checkpoint)
    return summary


def _dagger_data(
    teacher: ResidualTeacher, cfg: DistillConfig, r: int, student: str, path: Path, remote: RayTeacher | None
) -> dict[str, Any]:
    """DAgger round `r`'s data: the student's episodes on fresh seeds, labelled by the teacher, written to `path`."""
    start = time.perf_counter()
    seeds = [cfg.dagger_seed(r) + i for i in range(cfg.dagger_episodes)]
    if remote is not None:
        collection, episodes = remote.label(student, seeds)
    else:
        collection, episodes = collect_labelled(
            CheckpointPolicy(student), teacher, seeds, cfg.n_envs, cfg.vectorization, cfg.progress
        )
    write_rollouts(path, episodes, teacher.task, student_env_kwargs(teacher))
    successes = sum(record.success for record in collection.records)
    logger.info("DAgger round %d: the student succeeded in %d of %d episodes (%s)", r, successes, len(seeds), path)
    return {
        "episodes": len(seeds),
        "student_successes": successes,
        "steps": sum(len(e.actions) for e in episodes),
        "collect_s": time.perf_counter() - start,
    }


def _train_student(
    cfg: DistillConfig, datasets: list[str], out: Path, policy: VLAConfig, steps: int, init: str | None
) -> str:
    """Behaviour cloning of the student (from scratch, or fine-tuning `init`); its last checkpoint."""
    from vlagym.train.bc import train_bc

    train_bc(
        BCConfig(
            dataset=datasets,
            out=str(out),
            policy=policy,
            init=init,
            steps=steps,
            ema=cfg.ema,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            checkpoint_every=max(steps // 3, 1),
            resume=cfg.resume,
            progress=cfg.progress,
        )
    )
    return str(latest_checkpoint(out))


def _evaluate_student(cfg: DistillConfig, checkpoint: str, out: Path) -> dict[str, Any]:
    """The student on seeds eval_seed + i (`vlagym eval`'s files in `out`): checkpoint, success rate, interval."""
    from vlagym.eval.evaluate import EvalConfig, evaluate

    results = evaluate(
        EvalConfig(
            policy=checkpoint,
            episodes=cfg.eval_episodes,
            num_envs=cfg.n_envs,
            seed=cfg.eval_seed,
            out=str(out),
            vectorization=cfg.vectorization,
            progress=cfg.progress,
        )
    )
    task = next(iter(results["tasks"].values()))
    return {"checkpoint": checkpoint, "success_rate": task["success_rate"], "ci95": task["ci95"]}


def _total_seconds(summary: dict[str, Any]) -> dict[str, float]:
    """Collection (teacher and DAgger rounds), training and evaluation seconds over the stages so far."""
    total = {"collect": float(summary["teacher"]["collect_s"]), "train": 0.0, "evaluate": 0.0}
    for record in summary["rounds"]:
        for key, seconds in record["seconds"].items():
            total[key] += seconds
    return total
