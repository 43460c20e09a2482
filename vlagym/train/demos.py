"""Scripted-expert demonstrations, collected in a vector env and written in the layout of `vlagym.train.layout`.

    summary = collect_demos(DemoConfig(task="VLA-PickCup-v0", episodes=200, num_envs=2, out="pick.hdf5"))

Episode i (0, 1, ...) is reset with seed `seed + i` whichever sub-env runs it, and demos are written in
episode order, so the file is the same for any `num_envs` and vectorization mode. The pieces:

    vlagym.train.configs          `DemoConfig`, checked on construction
    vlagym.train.demo_collector   the vector env, the expert inside each sub-env, episodes in order
    vlagym.train.demo_writer      the file, committed atomically after each episode (crash safety)

An interrupted run (Ctrl-C, or the process killed) leaves a valid file holding every episode committed so far;
`resume=True` continues it from the episode after its last demo. Episodes are deterministic given their seed,
so the result equals an uninterrupted run's.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlagym.train.configs import COMPRESSIONS, CONFIG_SUFFIX, VECTORIZATION_MODES, DemoConfig, DemoError
from vlagym.train.demo_collector import DemoCollector, close_envs, ignore_sigint, make_demo_envs
from vlagym.train.demo_writer import DemoEpisode, DemoJournal, write_config, write_demo, write_header

logger = logging.getLogger(__name__)


@dataclass
class DemoSummary:
    """What `collect_demos` did."""

    path: str
    """the demo file"""
    first_episode: int
    """index of the first episode this call ran (0 unless resumed)"""
    episodes: int
    """episodes this call ran"""
    successes: int
    """episodes of this call the expert solved"""
    failures: int
    """episodes of this call the expert failed (dropped unless keep_failures)"""
    failed_seeds: list[int]
    """their seeds"""
    cut_short: int
    """of those, episodes a policy acted in that ended where the expert could no longer finish the task (a cup
    knocked over: `ScriptedExpert.hopeless`), recorded up to there"""
    demos: int
    """complete demos in the file now"""
    steps: int
    """samples (steps) in those demos"""
    seconds: float
    """wall time of this call"""
    file_bytes: int
    """size of the file"""


def _prepare_output(cfg: DemoConfig) -> tuple[DemoJournal, int]:
    """Create or reopen the file; returns the journal and the first episode index to run."""
    path = Path(cfg.out)
    if path.is_dir():
        raise DemoError(f"out {cfg.out!r} is a folder; give a file path ending in .hdf5")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DemoError(f"cannot create the output folder {str(path.parent)!r}: {e.strerror or e}") from e
    if not os.access(path.parent, os.W_OK):
        raise DemoError(f"cannot write to the output folder {str(path.parent)!r}")
    journal = DemoJournal(path, cfg.compression)
    if path.exists() and cfg.resume:
        journal.reopen(cfg)
        first = 0 if journal.last_seed is None else journal.last_seed - cfg.seed + 1
        logger.info("resuming %s: %d demos, continuing at episode %d (seed %d)", path, journal.demos, first, first)
    elif path.exists() and not cfg.overwrite:
        raise DemoError(f"{path} exists; pass resume to continue it or overwrite to replace it")
    else:
        journal.create(cfg)
        first = 0
    write_config(path, cfg)
    return journal, first


def _run_episodes(cfg: DemoConfig, journal: DemoJournal, first: int, remaining: int, bar, policy=None) -> Any:
    """Episodes first .. cfg.episodes - 1, committed to `journal` as they finish; the collector, local or Ray
    (None: none ran), for its `successes` and `failed_seeds`."""
    if not remaining:
        return None
    if cfg.backend == "ray":
        from vlagym.distributed import DistributedError
        from vlagym.train.demo_ray import RayDemoCollection

        collection = RayDemoCollection(cfg, journal, first, bar)
        try:
            collection.run()
        except DistributedError as e:
            raise DemoError(str(e)) from e
        return collection
    envs = make_demo_envs(cfg, min(cfg.num_envs, remaining))
    finished = False
    try:
        collector = DemoCollector(envs, cfg, journal, first, bar, policy)
        collector.run()
        finished = True
    finally:
        close_envs(envs, graceful=finished)
    return collector


def _log_summary(cfg: DemoConfig, summary: DemoSummary) -> None:
    failed = summary.failed_seeds
    if failed:
        what = "kept" if cfg.keep_failures else "dropped"
        # With action noise the perturbed expert fails now and then by design, and a policy acting fails
        # often; the plain expert's failure is news.
        level = logging.INFO if cfg.action_noise > 0 or cfg.policy is not None else logging.WARNING
        logger.log(level, "%d of %d episodes failed (%s); seeds %s", len(failed), summary.episodes, what, failed[:20])
    logger.info(
        "%s: %d demos, %d steps; this run: %d episodes, %d successes, %d failures, %.1f s",
        summary.path,
        summary.demos,
        summary.steps,
        summary.episodes,
        summary.successes,
        len(failed),
        summary.seconds,
    )


def collect_demos(cfg: DemoConfig, policy=None) -> DemoSummary:
    """Run the task's scripted expert for `cfg.episodes` episodes and write them to `cfg.out`.

    `policy` is the loaded `cfg.policy` (a batched policy as `vlagym.eval.adapters.CheckpointPolicy`; DAgger:
    it acts, the expert labels); `vlagym.eval.dagger.collect_dagger_demos` loads it and calls this.
    Raises `DemoError` for an output that exists (without resume/overwrite) or that a resume cannot continue.
    An interrupted call (KeyboardInterrupt, or the process killed) leaves a valid file holding every episode
    committed so far; `resume=True` continues it.
    """
    from tqdm.auto import tqdm

    if (cfg.policy is None) != (policy is None):
        raise DemoError(
            "cfg.policy names a checkpoint: collect with vlagym.eval.dagger.collect_dagger_demos, which loads it"
            if policy is None
            else "a policy was given but cfg.policy is unset: set it to the checkpoint folder (it is recorded)"
        )
    start = time.perf_counter()
    journal, first = _prepare_output(cfg)
    remaining = max(0, cfg.episodes - first)
    bar = tqdm(total=cfg.episodes, initial=min(first, cfg.episodes), desc=cfg.task, unit="ep", disable=not cfg.progress)
    try:
        collector = _run_episodes(cfg, journal, first, remaining, bar, policy)
    except KeyboardInterrupt:
        logger.warning(
            "interrupted: %s holds %d complete demos; resume=True (vlagym demos --resume) continues it",
            journal.path,
            journal.demos,
        )
        raise
    finally:
        bar.close()
        journal.remove_scratch()
    failed = collector.failed_seeds if collector else []
    summary = DemoSummary(
        path=str(journal.path),
        first_episode=first,
        episodes=remaining,
        successes=collector.successes if collector else 0,
        failures=len(failed),
        failed_seeds=failed,
        cut_short=collector.cut_short if collector else 0,
        demos=journal.demos,
        steps=journal.total,
        seconds=time.perf_counter() - start,
        file_bytes=journal.path.stat().st_size,
    )
    _log_summary(cfg, summary)
    return summary


# Re-exported: the config lives in `vlagym.train.configs` (light, for the CLI), the writer's and the
# collector's pieces in their own modules; importers of this module keep their names.
__all__ = [
    "COMPRESSIONS",
    "CONFIG_SUFFIX",
    "VECTORIZATION_MODES",
    "DemoConfig",
    "DemoEpisode",
    "DemoError",
    "DemoSummary",
    "collect_demos",
    "ignore_sigint",
    "write_demo",
    "write_header",
]
