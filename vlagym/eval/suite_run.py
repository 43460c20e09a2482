"""Run a benchmark protocol (`vlagym.eval.suites`) and write one results bundle.

`run_suite` evaluates a policy on every task x split of a protocol, episode i
with seed `base_seed + i`, and writes (atomically, `vlagym.eval.bundle`):

    OUT/bundle.json   protocol (name, version, every setting), per task x split
                      results (rates, Wilson 95% CI, one record per episode),
                      suite average with its bootstrap interval, fingerprint of
                      the software, machine and checkpoint, and the one-line
                      command that reproduces the bundle
    OUT/bundle.md     the same as Markdown tables (task x split matrix, suite average,
                      failure taxonomy, language controls)
    OUT/heatmap.png   the task x split success matrix (`vlagym.eval.diagnostics`)
    OUT/report.html   one self-contained page of all of it (`vlagym.eval.report`)
    OUT/videos/*.mp4  with `videos`: per task x split, episodes of each outcome in turn

With `language_controls`, each task whose env can swap its target also runs the
protocol's seeds (train split) with the correct, an empty and a swapped
instruction; the rates, paired tests and a one-line reading go in the bundle.

With `sequential_width`, each task x split keeps only the first n episodes in
seed order, n chosen by a stopping rule on the outcomes in that order
(`vlagym.eval.sequential`). Language controls always run every seed.

Re-running the recorded command on the same machine reproduces every episode's
outcome: the seeds fix the initial states, the expert is deterministic, and a
checkpoint's outcomes depend only on its weights, its per-episode noise rule
(`policy_noise_stream` in the fingerprint: a flow head's noise comes from a
generator seeded from that stream and the episode seed) and `num_envs`
(recorded: batched inference rounds differently at other batch sizes, which can
flip an episode that sits on a knife's edge, though rarely).

Bundles are read back and paired by `vlagym.eval.runs` and compared by `vlagym.eval.compare`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vlagym.eval.adapters import CheckpointPolicy
from vlagym.eval.backends import make_rollouts
from vlagym.eval.bundle import fingerprint, format_bundle, reproduction_command, suite_average, write_outputs
from vlagym.eval.configs import (
    EXPERT,
    METRICS,
    RUN_ONLY_FIELDS,
    SEQUENTIAL_MIN_EPISODES,
    EvalError,
    SuiteRunConfig,
)
from vlagym.eval.diagnostics import (
    CONTROL_ENV_KWARGS,
    CONTROL_OPTIONS,
    CONTROLS,
    OUTCOMES,
    summarize_controls,
    supports_language_controls,
)
from vlagym.eval.evaluate import record_videos
from vlagym.eval.journal import remove_journals
from vlagym.eval.layout import BUNDLE_FORMAT, BUNDLE_FORMAT_VERSION, BUNDLE_JSON, BUNDLE_MD, HEATMAP_PNG, VIDEOS_DIR
from vlagym.eval.loading import load_eval_policy
from vlagym.eval.local_rollouts import Job, Journaled, Rollouts
from vlagym.eval.rollout import EpisodeRecord
from vlagym.eval.runs import check_comparable, paired_outcomes, version_differences
from vlagym.eval.runs import read_eval_run as read_run
from vlagym.eval.sequential import run_sequential, sequential_settings
from vlagym.eval.stats import can_stop
from vlagym.eval.suites import SuiteProtocol, get_suite
from vlagym.eval.summary import episode_dict, summarize

logger = logging.getLogger(__name__)

CONTROL_SPLIT = "train"

__all__ = [
    "CONTROL_SPLIT",
    "cell_env_kwargs",
    "chunk_settings",
    "run_language_controls",
    "run_suite",
    "video_seeds",
    # defined in configs, layout, bundle and runs; the command line imports them from here
    "BUNDLE_JSON",
    "BUNDLE_MD",
    "HEATMAP_PNG",
    "METRICS",
    "SEQUENTIAL_MIN_EPISODES",
    "SuiteRunConfig",
    "check_comparable",
    "format_bundle",
    "paired_outcomes",
    "read_run",
    "version_differences",
]


# ---------------------------------------------------------------------------- running
def _load_checkpoint(cfg: SuiteRunConfig, protocol: SuiteProtocol) -> CheckpointPolicy:
    try:
        checkpoint = load_eval_policy(cfg.policy, cfg.served_mapping)
    except ValueError as e:  # a checkpoint this vlagym cannot rebuild (format, weights that do not fit)
        raise EvalError(f"cannot load the checkpoint {cfg.policy!r}: {e}") from e
    if protocol.n_action_steps is not None and not isinstance(checkpoint, CheckpointPolicy):
        try:
            checkpoint.execute_chunks(protocol.n_action_steps)
        except ValueError as e:
            raise EvalError(f"{protocol.label} executes {protocol.n_action_steps} actions per chunk: {e}") from e
    elif protocol.n_action_steps is not None:  # the protocol fixes chunk execution: override the checkpoint's
        try:
            checkpoint.policy.config = dataclasses.replace(
                checkpoint.policy.config, n_action_steps=protocol.n_action_steps
            )
        except ValueError as e:
            raise EvalError(f"{protocol.label} executes {protocol.n_action_steps} actions per chunk: {e}") from e
    return checkpoint


def chunk_settings(checkpoint: CheckpointPolicy | None, protocol: SuiteProtocol) -> dict[str, Any]:
    """How actions were executed: the policy's chunk size, actions run per chunk, temporal ensembling."""
    if checkpoint is None:
        return {"policy": "scripted expert: one action per step", "protocol_n_action_steps": protocol.n_action_steps}
    return {**(checkpoint.chunk_execution() or {}), "protocol_n_action_steps": protocol.n_action_steps}


def cell_env_kwargs(checkpoint: CheckpointPolicy | None, split: str) -> dict[str, Any]:
    """Env kwargs of one task x split: what the policy observes, and the split (its instruction set implied)."""
    kwargs: dict[str, Any] = {"obs_mode": "state"} if checkpoint is None else dict(checkpoint.env_kwargs)
    kwargs.pop("instruction_split", None)  # the split decides the wording (heldout_paraphrase: held-out)
    kwargs["split"] = split
    return kwargs


def _run_cell(
    task: str,
    split: str,
    seeds: list[int],
    cfg: SuiteRunConfig,
    checkpoint: CheckpointPolicy | None,
    rollouts: Rollouts,
    sequential: bool = False,
) -> tuple[list[EpisodeRecord], dict[str, Any], int]:
    """The records of one cell (every seed, or with `sequential` the stopped prefix), its env kwargs, and the
    number of episodes simulated (more than the records when a block ran past the stopping point)."""
    kwargs = cell_env_kwargs(checkpoint, split)
    if sequential:
        records, simulated = run_sequential(rollouts, task, kwargs, seeds, cfg)
    else:
        records = rollouts.run(task, kwargs, seeds)
        simulated = len(records)
    return records, kwargs, simulated


# ---------------------------------------------------------------------------- videos and language controls
def video_seeds(records: list[EpisodeRecord], count: int) -> list[int]:
    """Up to `count` seeds, one outcome after another (failures before success), in episode order within each."""
    by_outcome = {o: [r.seed for r in records if r.outcome == o] for o in (*OUTCOMES[1:], OUTCOMES[0])}
    chosen: list[int] = []
    while len(chosen) < count and any(by_outcome.values()):
        for seeds in by_outcome.values():
            if seeds and len(chosen) < count:
                chosen.append(seeds.pop(0))
    return chosen


def _cell_videos(
    task: str,
    split: str,
    records: list[EpisodeRecord],
    episodes: list[dict[str, Any]],
    kwargs: dict[str, Any],
    cfg: SuiteRunConfig,
    checkpoint: CheckpointPolicy | None,
) -> None:
    """Record the chosen episodes of one cell; each episode record gets its video's path relative to OUT."""
    out = Path(cfg.out)
    seeds = video_seeds(records, cfg.videos)
    paths = record_videos(task, kwargs, checkpoint, seeds, out / VIDEOS_DIR, name=f"{task}_{split}")
    by_seed = {seed: os.path.relpath(p, out) for seed, p in zip(seeds, paths, strict=True)}
    for e in episodes:
        if e["seed"] in by_seed:
            e["video"] = by_seed[e["seed"]]


def run_language_controls(
    protocol: SuiteProtocol,
    seeds: list[int],
    cfg: SuiteRunConfig,
    checkpoint: CheckpointPolicy | None,
    rollouts: Rollouts,
) -> dict[str, Any]:
    """Per task of the protocol: the three controls on the train split (or why they do not apply)."""
    controls: dict[str, Any] = {}
    applicable = [task for task in protocol.tasks if supports_language_controls(task)]
    pairs = [(task, control) for task in applicable for control in CONTROLS]
    logger.info("language controls %s: %s on %s, %d episodes each", list(CONTROLS), cfg.policy, applicable, len(seeds))
    jobs = [
        Job(task, {**cell_env_kwargs(checkpoint, CONTROL_SPLIT), **CONTROL_ENV_KWARGS.get(task, {})}, seeds,
            CONTROL_OPTIONS[control])
        for task, control in pairs
    ]  # fmt: skip
    ran = dict(zip(pairs, rollouts.run_many(jobs), strict=True))  # on Ray, all at once
    for task in protocol.tasks:
        if task not in applicable:
            controls[task] = {"note": "not applicable (the task has no target swap: VLAEnv.swap_candidates)"}
            continue
        outcomes = {control: [r.success for r in ran[task, control]] for control in CONTROLS}
        episodes = {
            control: [
                {"seed": r.seed, "instruction": r.instruction, "success": r.success, "outcome": r.outcome}
                for r in ran[task, control]
            ]
            for control in CONTROLS
        }
        controls[task] = {
            "split": CONTROL_SPLIT,
            "env_kwargs": CONTROL_ENV_KWARGS.get(task, {}),
            "reset_options": CONTROL_OPTIONS,
            **summarize_controls(outcomes),
            "episodes": episodes,
        }
    return controls


# ---------------------------------------------------------------------------- the protocol
def _suite_cell(
    label: str,
    task: str,
    split: str,
    seeds: list[int],
    cfg: SuiteRunConfig,
    checkpoint: CheckpointPolicy | None,
    rollouts: Rollouts,
    ran: list[EpisodeRecord] | None = None,
) -> dict[str, Any]:
    """One task x split of the protocol: its summary, where it stopped, env kwargs, time, episodes (and videos).
    `ran`: the cell's records when it ran together with the others (its "seconds" is then None)."""
    t_cell = time.perf_counter()
    if ran is None:
        logger.info("%s: %s on %s / %s, %d episodes", label, cfg.policy, task, split, len(seeds))
        records, kwargs, simulated = _run_cell(
            task, split, seeds, cfg, checkpoint, rollouts, sequential=cfg.sequential_width is not None
        )
    else:
        records, kwargs, simulated = ran, cell_env_kwargs(checkpoint, split), len(ran)
    cell = summarize(records)
    if cfg.sequential_width is not None:
        cell["sequential"] = {
            "stopped_early": len(records) < len(seeds),
            "width_reached": can_stop(cell["successes"], cell["n"], cfg.sequential_width, cfg.sequential_min_episodes),
            "episodes_simulated": simulated,
            "episodes_discarded": simulated - len(records),
        }
    cell["env_kwargs"] = kwargs
    cell["seconds"] = round(time.perf_counter() - t_cell, 3) if ran is None else None
    cell["episodes"] = [episode_dict(r) for r in records]
    if cfg.videos:
        _cell_videos(task, split, records, cell["episodes"], kwargs, cfg, checkpoint)
    return cell


def _bundle(
    cfg: SuiteRunConfig,
    protocol: SuiteProtocol,
    checkpoint: CheckpointPolicy | None,
    seeds: list[int],
    results: dict[str, dict[str, Any]],
    started: datetime,
    wall: float,
    backend: dict[str, Any],
) -> dict[str, Any]:
    """bundle.json's content (see the module docstring), language controls aside."""
    rendered = checkpoint is not None and "rgb" in str(checkpoint.env_kwargs.get("obs_mode", "rgb"))
    return {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_FORMAT_VERSION,
        "protocol": protocol.to_dict(),
        "episodes": len(seeds),
        "partial": len(seeds) != protocol.episodes,
        "policy": cfg.policy,
        "config": dataclasses.asdict(cfg),
        "seeds": {"base_seed": protocol.base_seed, "count": len(seeds), "first": seeds[0], "last": seeds[-1]},
        "chunk_settings": chunk_settings(checkpoint, protocol),
        "sequential": sequential_settings(cfg, len(seeds)),
        "results": results,
        "suite_average": {metric: suite_average(results, metric) for metric in METRICS},
        "outcome_definitions": "vlagym.eval.diagnostics (module docstring): " + ", ".join(OUTCOMES),
        "fingerprint": {**fingerprint(cfg, rendered), "backend": backend},
        "started_utc": started.isoformat(timespec="seconds"),
        "wall_clock_s": round(wall, 3),
        "reproduce": reproduction_command(cfg),
    }


def run_suite(cfg: SuiteRunConfig) -> dict[str, Any]:
    """Run the protocol `cfg.suite` for `cfg.policy`; writes OUT/bundle.json and OUT/bundle.md, returns the bundle."""
    protocol = get_suite(cfg.suite)
    protocol.check_registered()
    checkpoint = None if cfg.policy == EXPERT else _load_checkpoint(cfg, protocol)
    rollouts = None
    try:
        rollouts = make_rollouts(
            checkpoint, cfg.policy, cfg.backend, cfg.num_envs, cfg.vectorization, cfg.progress, cfg.address,
            cfg.workers, cfg.served_mapping, protocol.n_action_steps, unit_size=cfg.unit_size,
        )  # fmt: skip
        return _run_suite(cfg, protocol, checkpoint, rollouts)
    finally:
        if rollouts is not None:
            rollouts.close()
        if hasattr(checkpoint, "close"):  # a policy server's connection
            latencies = getattr(checkpoint, "latencies", None)
            if latencies:
                from vlagym.eval.served import latency_summary

                logger.info("policy server round trips: %s", latency_summary(latencies))
            checkpoint.close()


def _run_suite(
    cfg: SuiteRunConfig, protocol: SuiteProtocol, checkpoint: CheckpointPolicy | None, backend: Rollouts
) -> dict[str, Any]:
    out = Path(cfg.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EvalError(f"cannot create the output folder {cfg.out!r}: {e.strerror or e}") from e
    run_config = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in RUN_ONLY_FIELDS}
    rollouts = Journaled(backend, cfg.out, run_config, cfg.resume)
    seeds = protocol.seeds(cfg.episodes)
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    cells = [(task, split) for task in protocol.tasks for split in protocol.splits]
    ran: dict[tuple[str, str], list[EpisodeRecord]] = {}
    if rollouts.concurrent and cfg.sequential_width is None:  # Ray: every cell's episodes handed out at once
        logger.info("%s: %s on %d cells of %d episodes, together", protocol.label, cfg.policy, len(cells), len(seeds))
        jobs = [Job(task, cell_env_kwargs(checkpoint, split), seeds) for task, split in cells]
        ran = dict(zip(cells, rollouts.run_many(jobs), strict=True))
    results: dict[str, dict[str, Any]] = {task: {} for task in protocol.tasks}
    for task, split in cells:
        results[task][split] = _suite_cell(
            protocol.label, task, split, seeds, cfg, checkpoint, rollouts, ran.get((task, split))
        )
    controls = run_language_controls(protocol, seeds, cfg, checkpoint, rollouts) if cfg.language_controls else None
    wall = time.perf_counter() - t0
    bundle = _bundle(cfg, protocol, checkpoint, seeds, results, started, wall, rollouts.describe())
    if controls is not None:
        bundle["language_controls"] = controls
    write_outputs(bundle, out)
    remove_journals(out)
    return bundle
