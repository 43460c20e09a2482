"""Success-rate evaluation of a policy (a VLA checkpoint or the scripted expert) on fixed seed lists.

Episode i of every task uses seed `seed + i`, whatever `num_envs` is, so two
policies evaluated with the same `seed` meet identical initial states (a paired
comparison). Per task: success rate with `n` and a Wilson 95% interval,
success at the last step, mean episode length and return, counts of the failure
taxonomy (`vlagym.eval.diagnostics`), and one record per episode (seed, task,
instruction, success, outcome and the predicate flags behind it, the video when
one was recorded): `vlagym.eval.summary`. The options are `EvalConfig`
(`vlagym.eval.configs`); the policies, `vlagym.eval.adapters`. Outputs, all written atomically:

    OUT/eval_config.json   the EvalConfig and the env kwargs actually used (written first)
    OUT/results.json       per-task summaries and per-episode records, and the machine's fingerprint
    OUT/results.md         the Markdown table of `vlagym.eval.summary.format_results`
    OUT/videos/*.mp4       optional: the first `videos` episodes of each task

A sampling policy (a flow-matching checkpoint) draws each episode's noise
from a generator seeded from that episode's seed (`episode_noise_generator`),
created when its sub-env resets: re-running an evaluation reproduces every
episode, and an episode's noise does not depend on `num_envs` or on which
episodes share the batch. (What `num_envs` can still change is floating-point
rounding: batched matrix products need not round a row as they would alone.)

Videos re-run those seeds in a separate single env with rendering on (the
vectorised evaluation itself renders nothing it does not need, e.g. the
expert runs on state observations). `reset(seed=...)` fully determines an
episode and the policy's noise comes from the same seed, so the recorded
episode is the evaluated one (with `num_envs=1` exactly; otherwise up to that
rounding).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

import vlagym
from vlagym.eval.adapters import CheckpointPolicy, ExpertPolicy, episode_noise_generator
from vlagym.eval.backends import make_rollouts
from vlagym.eval.configs import RUN_ONLY_FIELDS, EvalConfig, EvalError
from vlagym.eval.journal import remove_journals
from vlagym.eval.layout import EVAL_CONFIG_JSON, RESULTS_JSON, RESULTS_MD, VIDEOS_DIR
from vlagym.eval.loading import load_eval_policy
from vlagym.eval.local_rollouts import Journaled, Rollouts
from vlagym.eval.machine import machine_fingerprint
from vlagym.eval.rollout import make_rollout_envs
from vlagym.eval.summary import episode_dict, format_results, summarize
from vlagym.io import atomic_write_json, atomic_write_text, temp_path

# EvalConfig, EvalError, episode_* and the summary functions live in configs/adapters/summary; importable here too
__all__ = [
    "EvalConfig",
    "EvalError",
    "episode_dict",
    "episode_noise_generator",
    "format_results",
    "summarize",
    "checkpoint_success_rate",
    "evaluate",
    "record_videos",
]

logger = logging.getLogger(__name__)

VIDEO_FPS = 20  # the default control rate: videos play in real time


def _env_kwargs(cfg: EvalConfig, checkpoint: CheckpointPolicy | None) -> dict[str, Any]:
    """Checkpoint env kwargs, then image_size/cameras, then cfg.env_kwargs (last wins)."""
    if checkpoint is None:
        kwargs: dict[str, Any] = {"obs_mode": "state"}  # the expert reads simulator state: render nothing
    else:
        kwargs = dict(checkpoint.env_kwargs)
    if cfg.image_size is not None:
        kwargs["image_size"] = cfg.image_size
    if cfg.cameras is not None:
        kwargs["cameras"] = list(cfg.cameras)
    kwargs.update(cfg.env_kwargs)
    return kwargs


def record_videos(
    task: str,
    env_kwargs: dict[str, Any],
    checkpoint: CheckpointPolicy | None,
    seeds: list[int],
    folder: Path,
    name: str = "",
    reset_options: dict[str, Any] | None = None,
) -> list[str]:
    """Re-run `seeds` of `task` in one rendering env; one mp4 per episode, FOLDER/{name or task}_seed{seed}.mp4."""
    import imageio.v2 as imageio  # here: evaluation without videos should not pay for ffmpeg

    kwargs = dict(env_kwargs)
    if kwargs.get("obs_mode", "state") == "state":
        kwargs["obs_mode"] = "rgb"
        kwargs.setdefault("cameras", ["front"])
    camera = list(kwargs.get("cameras") or ["front"])[0]
    folder.mkdir(parents=True, exist_ok=True)
    envs = make_rollout_envs(task, 1, "sync", **kwargs)
    paths = []
    try:
        policy = ExpertPolicy(envs) if checkpoint is None else checkpoint
        for seed in seeds:
            path = folder / f"{name or task}_seed{seed}.mp4"
            tmp = temp_path(path)
            try:
                obs, _ = envs.reset(seed=[seed], options=dict(reset_options) if reset_options else None)
                policy.reset(np.ones(1, bool), seeds=[seed])  # the evaluated episode's noise, too
                # macro_block_size=2 keeps the exact (even) frame size instead of resizing to a multiple of 16.
                with imageio.get_writer(
                    tmp, format="FFMPEG", mode="I", fps=VIDEO_FPS, codec="libx264", macro_block_size=2,
                    ffmpeg_log_level="error",
                ) as writer:  # fmt: skip
                    writer.append_data(obs["images"][camera][0])
                    done = False
                    while not done:
                        obs, _, terminated, truncated, _ = envs.step(policy(obs))
                        writer.append_data(obs["images"][camera][0])
                        done = bool(terminated[0] or truncated[0])
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            paths.append(str(path))
    finally:
        envs.close()
    return paths


def _load_policy(cfg: EvalConfig) -> CheckpointPolicy | None:
    """The checkpoint of `cfg` with its chunk execution set as `cfg` says; None for the expert."""
    checkpoint = load_eval_policy(cfg.policy, cfg.served_mapping)
    if checkpoint is not None and (cfg.n_action_steps is not None or cfg.temporal_ensemble):
        try:  # the config checks the steps against the chunk size
            checkpoint.execute_chunks(cfg.n_action_steps, cfg.temporal_ensemble)
        except ValueError as e:
            raise EvalError(f"cannot execute {cfg.policy}'s chunks that way: {e}") from e
    return checkpoint


def _tasks(cfg: EvalConfig, checkpoint: CheckpointPolicy | None) -> list[str]:
    """`cfg.tasks`, or the checkpoint's own task."""
    tasks = list(cfg.tasks)
    if not tasks:
        if checkpoint is None or not checkpoint.env_id:
            raise EvalError("no tasks given and the checkpoint names no env_id; pass tasks")
        tasks = [checkpoint.env_id]
    if tasks[0] not in vlagym.TASKS:
        raise EvalError(f"unknown task {tasks[0]!r}; known tasks: {', '.join(sorted(vlagym.TASKS))}")
    return tasks


def _evaluate_task(
    task: str,
    cfg: EvalConfig,
    checkpoint: CheckpointPolicy | None,
    env_kwargs: dict[str, Any],
    out: Path,
    rollouts: Rollouts,
) -> dict[str, Any]:
    """The summary of one task: its numbers, per drawn task for a multi-task env, its episodes and videos."""
    seeds = [cfg.seed + i for i in range(cfg.episodes)]
    logger.info("evaluating %s on %s: %d episodes from seed %d", cfg.policy, task, cfg.episodes, cfg.seed)
    records = rollouts.run(task, env_kwargs, seeds)
    summary = summarize(records)
    drawn = sorted({r.task for r in records})
    if drawn != [task]:  # a multi-task env: also per drawn task
        summary["by_task"] = {t: summarize([r for r in records if r.task == t]) for t in drawn}
    summary["episodes"] = [episode_dict(r) for r in records]
    if cfg.videos:
        shown = seeds[: cfg.videos]
        summary["videos"] = record_videos(task, env_kwargs, checkpoint, shown, out / VIDEOS_DIR)
        for episode, path in zip(summary["episodes"], summary["videos"], strict=False):
            episode["video"] = os.path.relpath(path, out)
    return summary


def evaluate(cfg: EvalConfig) -> dict[str, Any]:
    """Evaluate `cfg.policy` on every task; writes the outputs into `cfg.out` and returns results.json's content."""
    checkpoint = _load_policy(cfg)
    rollouts = None
    try:
        rollouts = make_rollouts(
            checkpoint, cfg.policy, cfg.backend, cfg.num_envs, cfg.vectorization, cfg.progress, cfg.address,
            cfg.workers, cfg.served_mapping, cfg.n_action_steps, cfg.temporal_ensemble, cfg.unit_size,
        )  # fmt: skip
        return _evaluate(cfg, checkpoint, rollouts)
    finally:
        if rollouts is not None:
            rollouts.close()
        if hasattr(checkpoint, "close"):  # a policy server's connection
            checkpoint.close()


def _evaluate(cfg: EvalConfig, checkpoint: CheckpointPolicy | None, backend: Rollouts) -> dict[str, Any]:
    tasks = _tasks(cfg, checkpoint)
    env_kwargs = _env_kwargs(cfg, checkpoint)
    out = Path(cfg.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EvalError(f"cannot create the output folder {cfg.out!r}: {e.strerror or e}") from e
    run_config = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in RUN_ONLY_FIELDS}
    rollouts = Journaled(backend, cfg.out, {**run_config, "env_kwargs_used": env_kwargs}, cfg.resume)
    atomic_write_json(
        out / EVAL_CONFIG_JSON,
        {
            "config": dataclasses.asdict(cfg),
            "tasks": tasks,
            "env_kwargs": env_kwargs,
            "vlagym_version": vlagym.__version__,
        },
    )
    results: dict[str, Any] = {
        "policy": cfg.policy,
        "seed": cfg.seed,
        "episodes": cfg.episodes,
        "env_kwargs": env_kwargs,
        "chunk_execution": None if checkpoint is None else checkpoint.chunk_execution(),
        "vlagym_version": vlagym.__version__,
        "backend": rollouts.describe(),
        "tasks": {task: _evaluate_task(task, cfg, checkpoint, env_kwargs, out, rollouts) for task in tasks},
        # other machines and package builds give other floating-point results: the figures carry theirs
        "machine": machine_fingerprint(rendered="rgb" in str(env_kwargs.get("obs_mode", "")) or cfg.videos > 0),
    }
    latencies = getattr(checkpoint, "latencies", None)
    if latencies is not None and hasattr(backend, "served_latencies"):  # the workers made the requests
        latencies = backend.served_latencies()
    if latencies is not None:  # a served policy: the round trip of every request
        from vlagym.eval.served import latency_summary

        results["served_latency"] = latency_summary(latencies)
        logger.info("policy server round trips: %s", results["served_latency"])
    atomic_write_json(out / RESULTS_JSON, results)
    atomic_write_text(out / RESULTS_MD, format_results(results) + "\n")
    remove_journals(out)
    return results


def checkpoint_success_rate(
    checkpoint: str | os.PathLike, out: str | os.PathLike, episodes: int, num_envs: int
) -> float:
    """The success rate of a checkpoint on its own task (`evaluate` with default seeds; results under `out`): the
    evaluator `vlagym.train.bc.train_bc` calls every ``eval_every`` steps."""
    cfg = EvalConfig(policy=str(checkpoint), episodes=episodes, num_envs=num_envs, out=str(out), progress=False)
    results = evaluate(cfg)
    return float(next(iter(results["tasks"].values()))["success_rate"])
