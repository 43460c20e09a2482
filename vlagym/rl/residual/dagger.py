"""DAgger with the residual teacher as labeller: the student acts, the teacher says what it would have done.

`DaggerActor` is a collection actor (`vlagym.rl.collection.rollouts.Actor`): on every step it executes the
student's action and records the teacher's (base + residual on the same observation, the teacher's base
following the student's trajectory with its own chunking state). `collect_labelled` runs it on vector envs whose
recorders keep every episode and returns the episodes with the teacher's actions in place of the executed
ones: the states the student visits, labelled by the teacher (Ross et al. 2011).
"""

from __future__ import annotations

import dataclasses
import functools

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from vlagym.envs.pool import make_vec
from vlagym.eval.adapters import CheckpointPolicy
from vlagym.rl.collection.episodes import RolloutEpisode
from vlagym.rl.collection.recorder import RolloutRecorder
from vlagym.rl.collection.rollouts import Collection, collect_round
from vlagym.rl.residual.teacher import ResidualTeacher


class DaggerActor:
    """Executes the student's actions and keeps the teacher's action of every step, per episode seed."""

    def __init__(self, student: CheckpointPolicy, teacher: ResidualTeacher):
        self.student, self.teacher = student, teacher
        self.labels: dict[int, list[np.ndarray]] = {}
        self._seeds = np.zeros(0, np.int64)  # the seed of each sub-env's current episode

    def new_round(self) -> None:
        self.labels = {}

    def reset(self, mask: np.ndarray, seeds: np.ndarray) -> None:
        self.student.reset(mask, seeds)
        self.teacher.reset(mask, seeds)
        self._seeds = np.array(seeds, np.int64)
        for i in np.flatnonzero(mask):
            self.labels[int(self._seeds[i])] = []

    def __call__(self, obs) -> np.ndarray:
        labels = self.teacher(obs)
        for seed, label in zip(self._seeds, labels, strict=True):
            self.labels[int(seed)].append(np.array(label, np.float32))
        return self.student(obs)

    def relabel(self, episode: RolloutEpisode) -> RolloutEpisode:
        """`episode` (recorded with the student's actions) with the teacher's actions on its states."""
        labels = self.labels.get(episode.seed, [])
        if len(labels) != len(episode.actions):
            raise RuntimeError(
                f"episode of seed {episode.seed}: {len(episode.actions)} steps recorded, {len(labels)} labelled"
            )
        return dataclasses.replace(episode, actions=np.stack(labels))


def recording_envs(
    teacher: ResidualTeacher, n_envs: int, vectorization: str, record_failures: bool = False
) -> gym.vector.VectorEnv:
    """Vector envs of the teacher's env (rgb + state) for `collect_round`: autoreset off, a `RolloutRecorder` in
    every sub-env (handing over the failed episodes too with `record_failures`)."""
    return make_vec(
        teacher.task,
        num_envs=n_envs,
        vectorization_mode=vectorization,
        vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED},
        wrappers=[functools.partial(RolloutRecorder, record_failures=record_failures)],
        **teacher.env_kwargs,
    )


def collect_labelled(
    student: CheckpointPolicy,
    teacher: ResidualTeacher,
    seeds: list[int],
    n_envs: int,
    vectorization: str,
    progress: bool = False,
) -> tuple[Collection, list[RolloutEpisode]]:
    """Run the student on `seeds` (the teacher's env: rgb + state) and label every step with the teacher's
    action: the collection (the student's own records) and every episode, relabelled, in seed order."""
    envs = recording_envs(teacher, n_envs, vectorization, record_failures=True)
    actor = DaggerActor(student, teacher)
    try:
        collection = collect_round(envs, actor, seeds, progress)
    finally:
        envs.close()
    by_seed = {e.seed: e for e in (*collection.successes, *collection.failures)}
    missing = [r.seed for r in collection.records if r.seed not in by_seed]
    if missing:
        raise RuntimeError(f"the recorders handed over no episode for seeds {missing[:5]}")
    return collection, [actor.relabel(by_seed[r.seed]) for r in collection.records]
