"""The residual method on Ray workers: `distill`'s rollouts (`vlagym distill --backend ray`: the teacher's
episodes, and each DAgger round's student episodes labelled by the teacher), and `train-residual`'s sub-envs
(`RaySubEnvs`, `vlagym train-residual --backend ray`).

A worker (`TeacherWorker`, a Ray actor) loads the teacher once: its two files and its base checkpoint's arrive
through Ray's object store, SHA-256 checked (`vlagym.distributed.ship_folder`), and the base is given to
`load_teacher` by its local path (the recorded one is the driver's). A DAgger round ships the student's
checkpoint the same way. Units are runs of consecutive seeds; the collections come back whole and are joined in
seed order; each episode runs on the sub-env it has in the local run (`collect_round`'s `first`), so the files
written are the local run's, episode by episode, whatever the number of workers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from vlagym.eval.adapters import CheckpointPolicy
from vlagym.eval.layout import CHECKPOINT_FILES
from vlagym.eval.rollout import make_rollout_envs
from vlagym.rl.collection.episodes import RolloutEpisode
from vlagym.rl.collection.rollouts import Collection, collect_round, join_collections
from vlagym.rl.residual.config import DistillConfig
from vlagym.rl.residual.dagger import DaggerActor, recording_envs
from vlagym.rl.residual.teacher import ACTOR_NAME, TEACHER_NAME, load_base, load_teacher
from vlagym.rl.residual.venv import LocalSubEnvs, Stepped

logger = logging.getLogger(__name__)


class TeacherWorker:
    """A Ray actor: the teacher (loaded once) and its recording envs; runs teacher or DAgger units."""

    def __init__(self, teacher: Any, base: Any, n_envs: int, vectorization: str):
        self.teacher = load_teacher(teacher.materialize(), base=base.materialize())
        self.n_envs, self.vectorization = n_envs, vectorization
        self._envs: dict[bool, Any] = {}
        self._student: tuple[str, DaggerActor] | None = None

    def _envs_for(self, record_failures: bool) -> Any:
        if record_failures not in self._envs:
            self._envs[record_failures] = recording_envs(self.teacher, self.n_envs, self.vectorization, record_failures)
        return self._envs[record_failures]

    def teach(self, unit: tuple[int, tuple[int, ...]]) -> Collection:
        """The teacher's episodes on the unit's seeds (its first one at position `unit[0]` of the whole)."""
        first, seeds = unit
        return collect_round(self._envs_for(False), self.teacher, list(seeds), first=first)

    def label(self, unit: tuple[Any, tuple[int, tuple[int, ...]]]) -> tuple[Collection, list[RolloutEpisode]]:
        """The student's episodes on the unit's seeds, each step labelled with the teacher's action."""
        student, (first, seeds) = unit
        if self._student is None or self._student[0] != student.digest:
            self._student = (student.digest, DaggerActor(CheckpointPolicy(student.materialize()), self.teacher))
        actor = self._student[1]
        collection = collect_round(self._envs_for(True), actor, list(seeds), first=first)
        by_seed = {e.seed: e for e in (*collection.successes, *collection.failures)}
        missing = [r.seed for r in collection.records if r.seed not in by_seed]
        if missing:
            raise RuntimeError(f"the recorders handed over no episode for seeds {missing[:5]}")
        return collection, [actor.relabel(by_seed[r.seed]) for r in collection.records]

    def close(self) -> None:
        for envs in self._envs.values():
            envs.close()
        self._envs = {}


class RayTeacher:
    """`distill`'s collections on a pool of `TeacherWorker`s."""

    def __init__(self, cfg: DistillConfig, base: str):
        from vlagym.distributed import ActorPool, connect, ship_folder

        connect(cfg.address)
        self.unit = cfg.unit_size or 2 * cfg.n_envs
        teacher = ship_folder(cfg.teacher, (TEACHER_NAME, ACTOR_NAME))
        self.pool = ActorPool(
            TeacherWorker, (teacher, ship_folder(base, CHECKPOINT_FILES), cfg.n_envs, cfg.vectorization), cfg.workers
        )

    def _units(self, seeds: list[int]) -> list[tuple[int, tuple[int, ...]]]:
        return [(i, tuple(seeds[i : i + self.unit])) for i in range(0, len(seeds), self.unit)]

    def teach(self, seeds: list[int]) -> Collection:
        return join_collections(self.pool.map("teach", self._units(seeds)))

    def label(self, student: str, seeds: list[int]) -> tuple[Collection, list[RolloutEpisode]]:
        from vlagym.distributed import ship_folder

        shipped = ship_folder(student, CHECKPOINT_FILES)
        parts = self.pool.map("label", [(shipped, unit) for unit in self._units(seeds)])
        return join_collections([c for c, _ in parts]), [e for _, episodes in parts for e in episodes]

    def close(self) -> None:
        self.pool.close()


# ---------------------------------------------------------------------------- train-residual's sub-envs
class SubEnvWorker:
    """A Ray actor: a slice of `train-residual`'s sub-envs and its own copy of the frozen base (`LocalSubEnvs`)."""

    def __init__(self, base: Any, task: str, n_envs: int, vectorization: str, env_kwargs: dict[str, Any], alpha: float,
                 chunk_execution: dict[str, Any] | None = None):  # fmt: skip
        policy = load_base(base.materialize(), chunk_execution)
        envs = make_rollout_envs(task, n_envs, vectorization, **env_kwargs)
        self.local = LocalSubEnvs(envs, policy, alpha)

    def dims(self) -> tuple[int, int]:
        return self.local.feature_dim, self.local.action_dim

    def reset(self, seeds: Sequence[int]) -> tuple[np.ndarray, float, float]:
        return self.local.reset(seeds)

    def step(self, args: tuple[np.ndarray, Sequence[int]]) -> Stepped:
        return self.local.step(*args)

    def close(self) -> None:
        self.local.close()


class RaySubEnvs:
    """`SubEnvs` in slices of `n_envs` on Ray workers, stepped at once each vector step: worker w holds sub-envs
    w * n_envs .. (w + 1) * n_envs - 1, and its own copy of the base, which acts on its slice as one batch (so a
    run's base actions round as those of a local run with `n_envs` sub-envs per batch would; a local run of all
    the sub-envs batches them all). A worker that dies stops the run: the sub-envs' episodes die with it, and
    `--resume` continues from the last checkpoint."""

    def __init__(self, policy: str, task: str, env_kwargs: dict[str, Any], alpha: float, n_envs: int,
                 vectorization: str, workers: int | None, address: str | None,
                 chunk_execution: dict[str, Any] | None = None):  # fmt: skip
        from vlagym.distributed import ActorPool, connect, ship_folder

        connect(address)
        base = ship_folder(policy, CHECKPOINT_FILES)
        args = (base, task, n_envs, vectorization, env_kwargs, alpha, chunk_execution)
        self.pool = ActorPool(SubEnvWorker, args, workers)
        self.n = n_envs
        self.num_envs = n_envs * len(self.pool.actors)
        self.feature_dim, self.action_dim = self.pool.ask("dims")[0]

    def _slices(self, rows: Any) -> list[Any]:
        return [rows[w * self.n : (w + 1) * self.n] for w in range(len(self.pool.actors))]

    def reset(self, seeds: Sequence[int]) -> tuple[np.ndarray, float, float]:
        parts = self.pool.each("reset", [(s,) for s in self._slices(list(seeds))])
        return np.concatenate([p[0] for p in parts]), max(p[1] for p in parts), max(p[2] for p in parts)

    def step(self, residual: np.ndarray, next_seeds: Sequence[int]) -> Stepped:
        args = list(zip(self._slices(residual), self._slices(list(next_seeds)), strict=True))
        parts = self.pool.each("step", [(a,) for a in args])
        arrays = [np.concatenate([getattr(p, f) for p in parts]) for f in Stepped._fields[:6]]
        return Stepped(*arrays, max(p.env_s for p in parts), max(p.base_s for p in parts))

    def close(self) -> None:
        self.pool.close()


__all__ = ["RaySubEnvs", "RayTeacher", "SubEnvWorker", "TeacherWorker"]
