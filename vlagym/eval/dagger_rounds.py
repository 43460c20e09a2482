"""`train_dagger`: DAgger rounds with the scripted experts as labellers, one command (`vlagym train-dagger`).

    summary = train_dagger(DaggerConfig(init="runs/mt/bc/checkpoints/step_20000",
                                        bc=BCConfig(dataset=["mt/PickCup.hdf5", ...], steps=6000, lr=1e-4),
                                        rounds=2, suite="vlagym-10", out="runs/dagger"))

Round r runs the latest checkpoint (the init for round 1) on fresh seeds of every labelled task, the task's
expert labelling each state it visits (`vlagym.eval.dagger`), then fine-tunes that checkpoint on the demos plus
the DAgger files of rounds 1..r (Ross et al. 2011: train on the aggregate), and optionally evaluates the result
on a benchmark suite. Layout:

    OUT/dagger_config.json
    OUT/round_R/demos/<Task>.hdf5   the policy's episodes, the expert's labels (`vlagym demos --policy`'s files)
    OUT/round_R/bc/                 the fine-tuning (`vlagym train-bc --init`'s run folder)
    OUT/round_R/suite/              the suite's bundle of the round's checkpoint (with `suite`)
    OUT/round_R/seconds.json        the round's stages' seconds so far (a resume reports finished ones as they took)
    OUT/dagger_summary.json         per round: the acting policy's success in collection, the checkpoint, the
                                    suite's averages, seconds; rewritten after every round

A killed run resumes (`resume`): finished rounds are skipped, an unfinished one continues its demo files, its
fine-tuning and its suite where they stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import vlagym
from vlagym.eval.dagger_config import DaggerConfig, DaggerError
from vlagym.io import atomic_write_json

logger = logging.getLogger(__name__)

CONFIG_NAME = "dagger_config.json"
SUMMARY_NAME = "dagger_summary.json"


def labelled_tasks(cfg: DaggerConfig) -> list[str]:
    """`cfg.tasks`, or every task of the demos whose expert can label another policy's states."""
    if cfg.tasks:
        return list(cfg.tasks)
    from vlagym.envs.expert import labels_others
    from vlagym.train.bc import demo_env

    tasks = set()
    for path in cfg.bc.dataset:
        try:
            tasks.add(demo_env(path)[0])
        except (OSError, KeyError, ValueError) as e:
            raise DaggerError(f"dataset {path!r} is not a vlagym demo file: {e}") from e
    tasks = sorted(tasks)
    labelled = [task for task in tasks if task in vlagym.TASKS and labels_others(task)]
    if not labelled:
        raise DaggerError(f"no task of the demos ({tasks}) has an expert that can label another policy's states")
    extra = sorted(set(cfg.task_episodes) - set(labelled))
    if extra:
        raise DaggerError(f"task_episodes names tasks that are not collected: {extra} (collected: {labelled})")
    skipped = sorted(set(tasks) - set(labelled))
    if skipped:
        logger.info("DAgger leaves out %s: their experts do not label another policy's states", skipped)
    return labelled


def _prepare(cfg: DaggerConfig, out: Path) -> dict[str, Any]:
    """The summary so far (empty for a new run); refuses a folder that holds another run."""
    config_path, summary_path = out / CONFIG_NAME, out / SUMMARY_NAME
    if config_path.is_file():
        if not cfg.resume:
            raise DaggerError(f"{out} already holds a DAgger run: resume it (--resume) or choose another out")
        differ = cfg.same_run(json.loads(config_path.read_text()))
        if differ:
            raise DaggerError(f"resume needs the run's settings; these differ from {config_path}: {differ}")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(config_path, cfg.to_dict())
    if summary_path.is_file():
        return json.loads(summary_path.read_text())
    return {}


def train_dagger(cfg: DaggerConfig) -> dict[str, Any]:
    """Run `cfg.rounds` DAgger rounds (those a resumed run lacks); the summary (also OUT/dagger_summary.json)."""
    tasks, policy = labelled_tasks(cfg), cfg.policy()
    out = Path(cfg.out)
    summary = _prepare(cfg, out)
    summary.setdefault("init", cfg.init)
    summary["tasks"] = tasks
    rounds: list[dict[str, Any]] = summary.setdefault("rounds", [])
    datasets, checkpoint = list(cfg.bc.dataset), cfg.init
    for r in range(1, cfg.rounds + 1):
        folder = out / f"round_{r}"
        files = {task: folder / "demos" / f"{_short(task)}.hdf5" for task in tasks}
        datasets += [str(path) for path in files.values()]
        if r <= len(rounds):  # finished before a resume
            checkpoint = rounds[r - 1]["checkpoint"]
            continue
        record: dict[str, Any] = {"round": r, "acting": checkpoint}
        seconds = _StageSeconds(folder, cfg.resume)
        with seconds.stage("collect"):
            record["collection"] = {
                task: _collect(cfg, task, checkpoint, policy, path, cfg.round_seed(r)) for task, path in files.items()
            }
        with seconds.stage("train"):
            checkpoint = _fine_tune(cfg, datasets, folder / "bc", checkpoint, policy)
        record["checkpoint"] = checkpoint
        if cfg.suite is not None:
            with seconds.stage("evaluate"):
                record["suite"] = _evaluate(cfg, checkpoint, folder / "suite")
        record["seconds"] = seconds.done
        rounds.append(record)
        summary["checkpoint"] = checkpoint
        atomic_write_json(out / SUMMARY_NAME, summary)
        logger.info("DAgger round %d of %d done: %s", r, cfg.rounds, checkpoint)
    return summary


class _StageSeconds:
    """Wall-clock seconds of a round's stages, kept in ``round_R/seconds.json`` as each one finishes: a resumed
    round reports a stage finished before the interruption with its own time, not the time its skip took (a stage
    cut off midway counts from the resume only)."""

    def __init__(self, folder: Path, resume: bool):
        self.path = folder / "seconds.json"
        self.before = json.loads(self.path.read_text()) if resume and self.path.is_file() else {}
        self.done: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.done[name] = float(self.before.get(name, time.perf_counter() - start))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, self.done)


def _short(task: str) -> str:
    """VLA-PickCup-v0 -> PickCup."""
    return task.removeprefix("VLA-").rsplit("-v", 1)[0]


def _collect(cfg: DaggerConfig, task: str, checkpoint: str, policy: Any, path: Path, seed: int) -> dict[str, Any]:
    """One task's DAgger demos of a round: the acting checkpoint's episodes, the expert's labels."""
    from vlagym.eval.dagger import collect_dagger_demos
    from vlagym.train.configs import DemoConfig

    demo_cfg = DemoConfig(
        task=task,
        policy=checkpoint,
        episodes=cfg.episodes_of(task),
        seed=seed,
        num_envs=cfg.num_envs,
        vectorization=cfg.vectorization,
        image_size=policy.image_size,
        cameras=tuple(policy.cameras),
        keep_failures=True,
        env_kwargs=dict(cfg.env_kwargs),
        out=str(path),
        resume=cfg.resume,
        progress=cfg.progress,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    done = collect_dagger_demos(demo_cfg)
    logger.info("%s: the policy solved %d of %d episodes (%s)", task, done.successes, done.episodes, path)
    return {
        "episodes": done.demos,
        "policy_successes": _file_successes(path),
        "steps": done.steps,
        "seconds": done.seconds,
    }


def _file_successes(path: Path) -> int:
    """Episodes of a demo file whose `success` attribute is true (a resumed file's earlier ones included)."""
    import h5py

    with h5py.File(path, "r") as f:
        return sum(bool(demo.attrs.get("success", False)) for demo in f["data"].values())


def _fine_tune(cfg: DaggerConfig, datasets: list[str], out: Path, init: str, policy: Any) -> str:
    """`init` fine-tuned on `datasets` with the round's BC settings; the last checkpoint."""
    from vlagym.eval.evaluate import checkpoint_success_rate
    from vlagym.train.bc import train_bc
    from vlagym.train.run_files import latest_checkpoint

    bc = dataclasses.replace(
        cfg.bc, dataset=datasets, out=str(out), init=init, policy=policy, resume=cfg.resume, progress=cfg.progress
    )
    train_bc(bc, evaluator=checkpoint_success_rate)
    last = latest_checkpoint(out)
    if last is None:
        raise RuntimeError(f"the fine-tuning in {out} ended without a checkpoint")
    return str(last)


def _evaluate(cfg: DaggerConfig, checkpoint: str, out: Path) -> dict[str, Any]:
    """The round's checkpoint on `cfg.suite`: the mean over every task and split, and each split's average."""
    from vlagym.eval.configs import SuiteRunConfig
    from vlagym.eval.journal import has_journal
    from vlagym.eval.suite_run import run_suite

    bundle = run_suite(
        SuiteRunConfig(
            suite=str(cfg.suite),
            policy=checkpoint,
            out=str(out),
            num_envs=cfg.num_envs,
            vectorization=cfg.vectorization,
            sequential_width=cfg.sequential_width,
            resume=cfg.resume and has_journal(out),  # a round added by the resume starts its suite afresh
            progress=cfg.progress,
        )
    )
    return suite_summary(bundle)


def suite_summary(bundle: dict[str, Any]) -> dict[str, Any]:
    """A suite bundle in brief: its average with the interval, each split's mean over the tasks, and every
    task's success rate on the train split."""
    results = bundle["results"]
    splits: dict[str, list[float]] = {}
    for cells in results.values():
        for split, cell in cells.items():
            splits.setdefault(split, []).append(float(cell["success_rate"]))
    average = bundle["suite_average"]["success"]
    return {
        "mean": average["mean"],
        "ci95": average["ci95"],
        "splits": {split: sum(rates) / len(rates) for split, rates in splits.items()},
        "train": {task: cells["train"]["success_rate"] for task, cells in results.items() if "train" in cells},
    }
