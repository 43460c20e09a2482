"""The options of `vlagym train-dagger` (`DaggerConfig`): DAgger rounds with the scripted experts as labellers.

Importing this module loads neither torch nor mujoco (the command line builds its options from it); checks that
need the envs import them where they run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import vlagym
from vlagym.checks import check_float, check_int
from vlagym.config import Config, nested_config
from vlagym.envs.constants import VECTORIZATION_MODES
from vlagym.eval.configs import check_checkpoint_folder
from vlagym.train.configs import RESERVED_ENV_KWARGS, BCConfig

#: round r's episodes of a task have seeds collect_seed + (r - 1) * ROUND_SEEDS + i: rounds never share a scene
ROUND_SEEDS = 100_000
#: fields of the nested `bc` config that every round sets itself (no command-line option of their own)
ROUND_SET_BC_FIELDS = ("out", "init", "policy", "resume", "progress")


class DaggerError(ValueError):
    """Bad DAgger settings, or an output folder that does not fit them; the message says which."""


@dataclass
class DaggerConfig(Config):
    """Options of `train_dagger` (and `vlagym train-dagger`); saved as ``OUT/dagger_config.json``."""

    init: str
    """the VLA checkpoint folder that acts in round 1 and is fine-tuned by it (each later round acts with, and
    fine-tunes, the checkpoint of the round before)"""
    bc: BCConfig
    """each round's fine-tuning (a `BCConfig`, or its dict): `dataset` is the demos every round trains on, and
    every round adds its own DAgger files and those of the rounds before; `steps` are per round. Its out, init,
    policy, resume and progress are set by the round (the policy is the checkpoint's)"""
    out: str = "runs/dagger"
    """run folder: round_R/demos/<task>.hdf5, round_R/bc/ (the fine-tuning), round_R/suite/, dagger_summary.json"""
    rounds: int = 2
    """DAgger rounds: collect with the latest checkpoint, then fine-tune it on everything so far"""
    tasks: list[str] = field(default_factory=list)
    """tasks whose DAgger demos each round collects; empty: every task of bc.dataset whose expert can label
    another policy's states (`vlagym.envs.expert.labels_others`)"""
    episodes: int = 150
    """episodes per task and round (the policy's failures kept: their labels teach it to recover)"""
    task_episodes: dict[str, int] = field(default_factory=dict)
    """episodes per round of particular tasks, overriding `episodes`, e.g. {"VLA-StackBlocks-v0": 300}"""
    collect_seed: int = 500_000
    """round r's episode i of a task is reset with seed collect_seed + (r - 1) * 100000 + i"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """further keyword arguments of the collection envs, e.g. {"max_episode_steps": 300}; JSON-serialisable"""
    num_envs: int = 2
    """parallel sub-envs of the collection and the evaluation"""
    vectorization: str = "sync"
    """"sync", "async" or "pool" (a worker per CPU, each stepping a slice of the sub-envs; `vlagym.envs.pool`)"""
    n_action_steps: int | None = None
    """actions of each predicted chunk every round's checkpoint executes (its DAgger episodes in the next round and
    its suite), without temporal ensembling; unset: as init (round 1's episodes always act as init)"""
    temporal_ensemble: bool = False
    """every round's checkpoint acts with ACT's temporal ensemble (+2.6 and +2.8 points on `vlagym-10` for two
    fine-tuned checkpoints, docs/multitask.md); off with n_action_steps unset: as init"""
    suite: str | None = None
    """evaluate every round's checkpoint on this benchmark suite (`vlagym bench-suite list`), into round_R/suite;
    unset: no evaluation"""
    sequential_width: float | None = 0.25
    """the suite's sequential stopping: a task x split stops once its Wilson 95% interval is at most this wide
    (unset: every episode of the protocol)"""
    resume: bool = False
    """continue an interrupted run in `out` with the same settings (finished stages are skipped, the rest resume
    where they stopped); `rounds` may be raised to add rounds"""
    progress: bool = True
    """show progress bars"""

    def __post_init__(self) -> None:
        self.init = str(self.init)
        if not isinstance(self.temporal_ensemble, bool):
            raise DaggerError(f"temporal_ensemble must be a bool, got {self.temporal_ensemble!r}")
        if self.n_action_steps is not None and self.temporal_ensemble:
            raise DaggerError("give n_action_steps or temporal_ensemble, not both (the ensemble predicts every step)")
        if self.n_action_steps is not None:
            try:
                check_int("n_action_steps", self.n_action_steps, 1)
            except ValueError as e:
                raise DaggerError(str(e)) from e
        try:
            check_checkpoint_folder(self.init)
            init = self._init_policy()
        except (KeyError, TypeError, ValueError) as e:
            raise DaggerError(f"init: {e}") from e
        try:
            init.executing(self.n_action_steps, self.temporal_ensemble)
        except ValueError as e:  # more actions than a chunk holds
            raise DaggerError(str(e)) from e
        try:
            self.bc = nested_config("bc", self.bc, BCConfig)
        except (TypeError, ValueError) as e:
            raise DaggerError(f"bc: {e}") from e
        if self.bc.init is not None:
            raise DaggerError("bc.init is set by each round: give the starting checkpoint as init")
        try:
            self._check_numbers()
        except ValueError as e:
            raise DaggerError(str(e)) from e
        self.tasks = [str(t).removeprefix("vlagym:") for t in self.tasks]
        self.task_episodes = {str(t).removeprefix("vlagym:"): n for t, n in self.task_episodes.items()}
        self._check_tasks()
        self.env_kwargs = dict(self.env_kwargs)
        clash = sorted(set(self.env_kwargs) & set(RESERVED_ENV_KWARGS))
        if clash:
            raise DaggerError(f"env_kwargs may not set {clash}: the collection takes them from the checkpoint")
        if self.vectorization not in VECTORIZATION_MODES:
            raise DaggerError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {self.vectorization!r}")
        if self.suite is not None:
            from vlagym.eval.suites import get_suite  # the suites check their tasks' env classes (mujoco)

            get_suite(self.suite)  # SuiteError (a ValueError) naming the known suites

    def _check_numbers(self) -> None:
        check_int("rounds", self.rounds, 1)
        check_int("num_envs", self.num_envs, 1)
        check_int("collect_seed", self.collect_seed, 0)
        for task, n in {"episodes": self.episodes, **self.task_episodes}.items():
            name = task if task == "episodes" else f"task_episodes[{task!r}]"
            check_int(name, n, 1)
            if n > ROUND_SEEDS:
                raise ValueError(f"{name} must be at most {ROUND_SEEDS} (a round's seed range), got {n}")
        if self.sequential_width is not None:
            check_float("sequential_width", self.sequential_width, 0.0, 1.0, low_open=True)

    def _check_tasks(self) -> None:
        from vlagym.envs.expert import labels_others  # the task modules: mujoco

        for task in [*self.tasks, *self.task_episodes]:
            if task not in vlagym.TASKS:
                raise DaggerError(f"unknown task {task!r}; known tasks: {sorted(vlagym.TASKS)}")
        for task in self.tasks:
            if not labels_others(task):
                raise DaggerError(
                    f"{task}'s expert cannot label another policy's states (its recovery is not written or not "
                    "measured): leave it out of tasks"
                )
        if self.tasks:
            extra = sorted(set(self.task_episodes) - set(self.tasks))
            if extra:
                raise DaggerError(f"task_episodes names tasks that are not collected: {extra}")

    def policy(self) -> Any:
        """The init checkpoint's `VLAConfig` (the architecture every round fine-tunes), acting as `n_action_steps`
        or `temporal_ensemble` say when set."""
        return self._init_policy().executing(self.n_action_steps, self.temporal_ensemble)

    def _init_policy(self) -> Any:
        from vlagym.policies.checkpoint import read_checkpoint_config  # torch
        from vlagym.policies.config import VLAConfig

        return VLAConfig.from_dict(dict(read_checkpoint_config(self.init)["config"]))

    def episodes_of(self, task: str) -> int:
        """Episodes per round of `task`."""
        return int(self.task_episodes.get(task, self.episodes))

    def round_seed(self, round_: int) -> int:
        """The seed of round `round_`'s first episode (of every task)."""
        return self.collect_seed + (round_ - 1) * ROUND_SEEDS

    def same_run(self, other: dict[str, Any]) -> list[str]:
        """The settings in which `other` (a saved config's dict) differs from this one, apart from those a resume
        may change (rounds, resume, progress)."""
        mine = json.loads(json.dumps(self.to_dict()))  # as the saved file holds it: tuples become lists
        free = {"rounds", "resume", "progress"}
        return sorted(k for k in set(mine) | set(other) if k not in free and mine.get(k) != other.get(k))
