"""`distill`'s rollouts on Ray workers (`vlagym distill --backend ray`): the teacher's episodes, and each DAgger
round's student episodes labelled by the teacher.

A worker (`TeacherWorker`, a Ray actor) loads the teacher once: its two files and its base checkpoint's arrive
through Ray's object store, SHA-256 checked (`vlagym.distributed.ship_folder`), and the base is given to
`load_teacher` by its local path (the recorded one is the driver's). A DAgger round ships the student's
checkpoint the same way. Units are runs of consecutive seeds; the collections come back whole and are joined in
seed order; each episode runs on the sub-env it has in the local run (`collect_round`'s `first`), so the files
written are the local run's, episode by episode, whatever the number of workers.
"""

from __future__ import annotations

import logging
from typing import Any

from vlagym.eval.adapters import CheckpointPolicy
from vlagym.eval.layout import CHECKPOINT_FILES
from vlagym.rl.collection.episodes import RolloutEpisode
from vlagym.rl.collection.rollouts import Collection, collect_round, join_collections
from vlagym.rl.residual.config import DistillConfig
from vlagym.rl.residual.dagger import DaggerActor, recording_envs
from vlagym.rl.residual.teacher import ACTOR_NAME, TEACHER_NAME, load_teacher

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


__all__ = ["RayTeacher", "TeacherWorker"]
