"""Where episodes run: one interface (`Rollouts`) over the local vector env and Ray workers, and a journal.

    rollouts = LocalRollouts(checkpoint, num_envs=4)                 # or vlagym.eval.backends.make_rollouts
    records = rollouts.run("VLA-PickCup-v0", env_kwargs, seeds)      # in seed order
    rollouts.close()

`LocalRollouts` runs `run_episodes` in this process (a vector env per task and settings, kept while they do
not change); `vlagym.eval.ray_rollouts.RayRollouts` spreads the seeds over Ray workers and returns the same
records (see its module docstring for when exactly). `Journaled` wraps either: every finished episode is
appended to OUT/.episodes/ (`vlagym.eval.journal`), and with `resume` the episodes found there are not run
again. `vlagym eval`, `vlagym eval --suite` (cells, sequential blocks, language controls) and their callers go
through this interface only; `vlagym.eval.backends.make_rollouts` picks the backend.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from vlagym.eval.adapters import ExpertPolicy
from vlagym.eval.journal import EpisodeJournal, check_run
from vlagym.eval.rollout import EpisodeRecord, make_rollout_envs, run_episodes

logger = logging.getLogger(__name__)

OnRecord = Callable[[int, EpisodeRecord], None]
OnJobRecord = Callable[[int, int, EpisodeRecord], None]


class Job(NamedTuple):
    """Episodes of one task and env settings: one record per seed."""

    task: str
    env_kwargs: dict[str, Any]
    seeds: Sequence[int]
    reset_options: dict[str, Any] | None = None
    positions: Sequence[int] | None = None
    """each seed's position in the whole run (None: 0, 1, ...): a part of a run keeps the sub-env, and so the
    batch row, each episode had in the whole (`vlagym.eval.rollout.run_episodes`)"""

    def part(self, keep: Sequence[int]) -> Job:
        """The job of the seeds at indices `keep`, each keeping its position."""
        positions = range(len(self.seeds)) if self.positions is None else self.positions
        return self._replace(seeds=[int(self.seeds[k]) for k in keep], positions=[int(positions[k]) for k in keep])


class Rollouts:
    """Runs episodes of a fixed policy. `run_many` (each backend's own) returns each job's records, one per
    seed in the order of its seeds; on Ray the jobs run at once, so a suite's cells keep a cluster busy. `run`
    is one job."""

    parallel: int
    """episodes in flight at once (sub-envs over all workers): a sequential block keeps them all busy"""
    concurrent: bool
    """whether `run_many` runs its jobs at once (Ray) rather than one after another (here)"""

    def run(
        self,
        task: str,
        env_kwargs: dict[str, Any],
        seeds: Sequence[int],
        reset_options: dict[str, Any] | None = None,
        on_record: OnRecord | None = None,
    ) -> list[EpisodeRecord]:
        """The records of `seeds` in their order; `on_record(k, record)` as episodes finish."""
        on_job_record = None if on_record is None else (lambda i, k, r: on_record(k, r))
        return self.run_many([Job(task, env_kwargs, seeds, reset_options)], on_job_record)[0]

    def run_many(self, jobs: Sequence[Job], on_record: OnJobRecord | None = None) -> list[list[EpisodeRecord]]:
        """Each job's records; `on_record(job, k, record)` as episodes finish."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What a results file records of where the episodes ran."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the envs or workers."""


class LocalRollouts(Rollouts):
    """Episodes in this process: `policy` (None: each task's scripted expert) in a rollout vector env."""

    def __init__(self, policy: Any, num_envs: int = 1, vectorization: str = "sync", progress: bool = False):
        self.policy, self.num_envs, self.vectorization, self.progress = policy, num_envs, vectorization, progress
        self.parallel = num_envs
        self.concurrent = False
        self._key: str | None = None
        self._envs: Any = None
        self._acting: Any = None

    def _envs_for(self, task: str, env_kwargs: dict[str, Any]) -> tuple[Any, Any]:
        key = json.dumps([task, env_kwargs], sort_keys=True, default=str)
        if key != self._key:
            self.close()
            expert = self.policy is None
            self._envs = make_rollout_envs(task, self.num_envs, self.vectorization, expert=expert, **env_kwargs)
            self._acting = ExpertPolicy(self._envs) if expert else self.policy
            self._key = key
        return self._envs, self._acting

    def run_many(self, jobs: Sequence[Job], on_record: OnJobRecord | None = None) -> list[list[EpisodeRecord]]:
        out = []
        for i, job in enumerate(jobs):  # one after another
            envs, policy = self._envs_for(job.task, job.env_kwargs)
            on_episode = None if on_record is None else (lambda k, r, i=i: on_record(i, k, r))
            out.append(
                run_episodes(
                    envs,
                    policy,
                    job.seeds,
                    on_episode_start=policy.reset,
                    progress=self.progress,
                    reset_options=job.reset_options,
                    on_record=on_episode,
                    positions=job.positions,
                )  # fmt: skip
            )
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": "local", "num_envs": self.num_envs}

    def close(self) -> None:
        if self._envs is not None:
            self._envs.close()
        self._key = self._envs = self._acting = None


class Journaled(Rollouts):
    """`rollouts` with every episode journaled under `out`; with `resume`, journaled episodes are reused.

    `run_config` is what makes two runs the same (the policy, seeds, settings; not where they ran): a resume
    whose `run_config` differs from the journaled run's is refused (`EvalError`)."""

    def __init__(self, rollouts: Rollouts, out: str, run_config: dict[str, Any], resume: bool):
        self.rollouts, self.out, self.resume = rollouts, out, resume
        self.parallel, self.concurrent = rollouts.parallel, rollouts.concurrent
        check_run(out, run_config, resume)

    def run_many(self, jobs: Sequence[Job], on_record: OnJobRecord | None = None) -> list[list[EpisodeRecord]]:
        journals = [EpisodeJournal(self.out, job.task, job.env_kwargs, job.reset_options) for job in jobs]
        done: list[dict[int, EpisodeRecord]] = []
        todo: list[int] = []  # the jobs with episodes left to run
        for i, (job, journal) in enumerate(zip(jobs, journals, strict=True)):
            wanted = {int(s) for s in job.seeds}
            done.append({s: r for s, r in journal.load().items() if s in wanted} if self.resume else {})
            journal.start()
            if len(done[i]) < len(wanted):
                todo.append(i)
            if done[i]:
                logger.info("%s: %d of %d episodes journaled, the rest run", job.task, len(done[i]), len(wanted))
        positions = [{int(s): k for k, s in enumerate(job.seeds)} for job in jobs]
        left = [jobs[i].part([k for k, s in enumerate(jobs[i].seeds) if int(s) not in done[i]]) for i in todo]

        def record(t: int, k: int, r: EpisodeRecord) -> None:
            i = todo[t]
            journals[i].append(r)
            if on_record is not None:
                on_record(i, positions[i][r.seed], r)

        for t, records in enumerate(self.rollouts.run_many(left, record)):
            done[todo[t]].update(zip(left[t].seeds, records, strict=True))
        return [[done[i][int(s)] for s in job.seeds] for i, job in enumerate(jobs)]

    def describe(self) -> dict[str, Any]:
        return self.rollouts.describe()

    def close(self) -> None:
        self.rollouts.close()


__all__ = ["Job", "Journaled", "LocalRollouts", "OnJobRecord", "OnRecord", "Rollouts"]
