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
from typing import Any, Protocol

from vlagym.eval.adapters import ExpertPolicy
from vlagym.eval.journal import EpisodeJournal, check_run
from vlagym.eval.rollout import EpisodeRecord, make_rollout_envs, run_episodes

logger = logging.getLogger(__name__)

OnRecord = Callable[[int, EpisodeRecord], None]


class Rollouts(Protocol):
    """Runs episodes of a fixed policy: `run` returns one record per seed, in the order of `seeds`."""

    parallel: int
    """episodes in flight at once (sub-envs over all workers): a sequential block keeps them all busy"""

    def run(
        self,
        task: str,
        env_kwargs: dict[str, Any],
        seeds: Sequence[int],
        reset_options: dict[str, Any] | None = None,
        on_record: OnRecord | None = None,
    ) -> list[EpisodeRecord]: ...

    def describe(self) -> dict[str, Any]:
        """What a results file records of where the episodes ran."""

    def close(self) -> None: ...


class LocalRollouts:
    """Episodes in this process: `policy` (None: each task's scripted expert) in a rollout vector env."""

    def __init__(self, policy: Any, num_envs: int = 1, vectorization: str = "sync", progress: bool = False):
        self.policy, self.num_envs, self.vectorization, self.progress = policy, num_envs, vectorization, progress
        self.parallel = num_envs
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

    def run(
        self,
        task: str,
        env_kwargs: dict[str, Any],
        seeds: Sequence[int],
        reset_options: dict[str, Any] | None = None,
        on_record: OnRecord | None = None,
    ) -> list[EpisodeRecord]:
        envs, policy = self._envs_for(task, env_kwargs)
        return run_episodes(
            envs, policy, seeds, on_episode_start=policy.reset, progress=self.progress,
            reset_options=reset_options, on_record=on_record,
        )  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {"name": "local", "num_envs": self.num_envs}

    def close(self) -> None:
        if self._envs is not None:
            self._envs.close()
        self._key = self._envs = self._acting = None


class Journaled:
    """`rollouts` with every episode journaled under `out`; with `resume`, journaled episodes are reused.

    `run_config` is what makes two runs the same (the policy, seeds, settings; not where they ran): a resume
    whose `run_config` differs from the journaled run's is refused (`EvalError`)."""

    def __init__(self, rollouts: Rollouts, out: str, run_config: dict[str, Any], resume: bool):
        self.rollouts, self.out, self.resume = rollouts, out, resume
        self.parallel = rollouts.parallel
        check_run(out, run_config, resume)

    def run(
        self,
        task: str,
        env_kwargs: dict[str, Any],
        seeds: Sequence[int],
        reset_options: dict[str, Any] | None = None,
        on_record: OnRecord | None = None,
    ) -> list[EpisodeRecord]:
        seeds = [int(s) for s in seeds]
        journal = EpisodeJournal(self.out, task, env_kwargs, reset_options)
        done = {s: r for s, r in journal.load().items() if s in set(seeds)} if self.resume else {}
        journal.start(keep=self.resume)
        todo = [s for s in seeds if s not in done]
        if done:
            logger.info(
                "%s: %d of %d episodes journaled, %d to run", task, len(seeds) - len(todo), len(seeds), len(todo)
            )

        position = {s: k for k, s in enumerate(seeds)}

        def record(k: int, r: EpisodeRecord) -> None:
            journal.append(r)
            if on_record is not None:
                on_record(position[r.seed], r)

        if todo:
            done.update(zip(todo, self.rollouts.run(task, env_kwargs, todo, reset_options, record), strict=True))
        return [done[s] for s in seeds]

    def describe(self) -> dict[str, Any]:
        return self.rollouts.describe()

    def close(self) -> None:
        self.rollouts.close()


__all__ = ["Journaled", "LocalRollouts", "OnRecord", "Rollouts"]
