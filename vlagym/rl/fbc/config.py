"""`FilteredBCConfig`: the options of `vlagym train-fbc`, and the names of its run folder's files.

Imported by the CLI to build its options and help, so nothing heavy at import time: the checks that read the
checkpoint or the task registry import what they need inside `__post_init__`.
"""

from __future__ import annotations

import logging
import os
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from vlagym.checks import check_float, check_int
from vlagym.config import Config, nested_config
from vlagym.distributed import backend_problem
from vlagym.rl.common import check_n_action_steps, check_task_and_env_kwargs, read_base_checkpoint
from vlagym.train.configs import AugmentConfig, BCConfig

logger = logging.getLogger(__name__)

ROLLOUTS_DIR = "rollouts"
Weighting = Literal["episode", "state"]
LrSchedule = Literal["constant", "cosine"]
Vectorization = Literal["sync", "async", "pool"]
Backend = Literal["local", "ray"]
Device = Literal["auto", "cpu", "cuda"]
# the policy's observations fix these env kwargs; the task's registered limit is the episodes' time limit
RESERVED_ENV_KWARGS = ("obs_mode", "render_mode", "image_size", "cameras", "max_episode_steps")

# Options an old ``rl_config.json`` may hold (``train-rl --algo filtered-bc``, last in commit 2b05d45): each
# switch with its "off" value, which `from_dict` drops; a run that turned one on cannot resume here.
RETIRED_SWITCHES: dict[str, Any] = {
    "preference_weight": 0.0,
    "hindsight_make_room": False,
    "retry_noise_std": 0.0,
    "buffer_rounds": None,
    "ema": 0.0,
    "max_episode_steps": None,
    "collect_env_kwargs": {},
}
# ... and the settings of those switches (and of the retired "advantage" weighting), dropped whatever they hold
RETIRED_SETTINGS = (
    "preference_beta",
    "preference_pairs",
    "preference_chunks",
    "preference_rounds",
    "retry_noise_hold",
    "advantage_beta",
    "advantage_max_weight",
    "critic_rounds",
    "critic_updates",
)
# ... and the retired values of options that stay
RETIRED_VALUES = {"weighting": "advantage", "lr_schedule": "cosine-time"}
OLD_ALGO = "filtered-bc"  # the "algo" key of an old rl_config.json


@dataclass
class FilteredBCConfig(Config):
    """Options of `train_filtered_bc` (``vlagym train-fbc``); saved as ``OUT/rl_config.json``."""

    policy: str
    """BC checkpoint folder to post-train (model.safetensors + config.json)"""
    task: str | None = None
    """registered env id; unset: the checkpoint's task"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra env kwargs on top of the checkpoint's, for collection and evaluation alike"""
    out: str = "runs/rl"
    """run folder: config, rollouts, TensorBoard logs, checkpoints, evaluations"""
    rounds: int = 40
    """collect-then-train rounds"""
    max_minutes: float | None = None
    """stop before a round that would take training past this many minutes, judged by the length of the round
    before it (wall clock, evaluations excluded, resumed runs included); unset: no time limit"""
    episodes_per_round: int = 200
    """collection episodes per round"""
    group_size: int = 1
    """tries of each initial state per round, each with noise of its own (`episodes_per_round` must be a
    multiple); 1: every episode a fresh state"""
    weighting: Weighting = "episode"
    """how the successes weigh in the batches: "episode", each successful episode alike; "state", the
    successes of one initial state share one unit, so a success on a state the policy seldom solves counts as
    much as all of them on a state it always solves (use with `group_size` > 1)"""
    gamma: float = 1.0
    """discount of the 0/1 success reward: a success after T steps weighs gamma^T, so quick successes count
    more than slow ones (e.g. ones that dropped the object and picked it up again); 1: every success alike"""
    max_gripper_reopens: int | None = None
    """drop the successes whose gripper opened again after closing more than this many times: 0 for a pick
    (a success that let go and grasped again teaches the chatter behind drops), 1 for a place; unset: keep all"""
    max_close_distance: float | None = None
    """drop the successes (own and replayed) whose gripper was first commanded to close farther than this, in
    metres, from the task's reach point: lucky grasps at a cup's rim are not imitated (the expert closes within
    1 cm; e.g. 0.04). Successes that never closed, or of a task with no reach point, are kept; unset: keep all"""
    n_action_steps: int | None = None
    """actions executed of each predicted chunk before the policy predicts again (1..chunk size), in
    collection, validation and the saved checkpoints; unset: the checkpoint's"""
    n_envs: int = 4
    """parallel sub-envs of the collection"""
    vectorization: Vectorization = "sync"
    """"sync" (one process), "async" (one worker process per sub-env) or "pool" (a worker per CPU, each stepping
    a slice of the sub-envs; `vlagym.envs.pool`)"""
    backend: Backend = "local"
    """where the collection runs: "local" (n_envs sub-envs here) or "ray" (workers on a Ray cluster, each with
    n_envs sub-envs and the round's weights; docs/ray.md): the same episodes"""
    address: str | None = None
    """Ray cluster to join ("auto", "HOST:6379", "ray://HOST:10001"); unset: $RAY_ADDRESS, else a new local one"""
    workers: int | None = None
    """Ray workers of the collection (one CPU each); unset: one per CPU of the cluster"""
    unit_size: int | None = None
    """Ray: episodes per work unit, whole groups (unset: about twice n_envs); the driver hands out a few hundred
    units a second, so a large cluster wants larger units (docs/ray.md). The episodes do not depend on it"""
    noise_std: float = 0.1
    """std of the Gaussian exploration noise on the executed arm actions, in normalised action units (never on
    the gripper); 0: none"""
    noise_hold: int = 1
    """steps each noise draw is held: 1, fresh noise every step; the policy's `n_action_steps`, one offset per
    executed chunk (the arm explores other paths instead of jittering around its own)"""
    hindsight: bool = False
    """replay each failed collection episode whose gripper closed away from the target, with the target moved
    to where the gripper first closed and the episode's own actions; the replays that succeed join the round's
    successes. Needs a task whose target can move (PickCup, PickObject)"""
    close_delays: list[int] = field(default_factory=list)
    """replay each failed collection episode whose gripper closed, in its own scene, from its first close put
    off by k steps (the arm going on as it went), for each k in turn; the first replay that succeeds joins the
    round's successes. Aimed at grasps closed too early. E.g. 2 4 6 8; empty: off"""
    updates_per_round: int = 300
    """optimiser steps per round"""
    batch_size: int = 64
    """samples per optimiser step"""
    lr: float = 1e-4
    """AdamW (peak) learning rate"""
    lr_schedule: LrSchedule = "constant"
    """"constant", or "cosine": decay from lr to 0 over the run's `rounds` x `updates_per_round` updates (a
    run that `max_minutes` stops early never decays all the way)"""
    weight_decay: float = 1e-4
    """AdamW weight decay of the weight matrices, as `vlagym train-bc`"""
    grad_clip: float = 1.0
    """clip the global gradient norm to this; 0: no clipping"""
    freeze_encoders: bool = False
    """keep the vision and instruction encoders at their BC weights and train the proprio projection, trunk
    and head: no backward pass through the image encoders, so updates cost far less"""
    demos: list[str] | None = None
    """demo files mixed into every batch; unset: the BC checkpoint's training data (when the files still
    exist); an empty list: none"""
    demo_fraction: float = 0.5
    """share of each batch drawn from the demos (the rest from the successes); ignored without demos"""
    augment: bool = True
    """augment the training images (zoom, shift and colour jitter, as `augmentation` says), as `vlagym train-bc`"""
    augmentation: AugmentConfig = field(default_factory=AugmentConfig)
    """the image augmentation's ranges (an `AugmentConfig`, or its dict); the defaults are `train-bc`'s"""
    prefetch: bool = True
    """draw (read, augment) the next batches in a background thread while the current update runs; the
    batches are the same either way"""
    seed: int = 0
    """seeds the batch draws and the augmentation"""
    collect_seed: int = 10_000_000
    """first collection seed: round r tries the states collect_seed + r x episodes_per_round / group_size
    onwards (keep it away from every evaluation seed)"""
    eval_every: int = 1
    """evaluate every this many rounds and after the last; 0: never"""
    eval_episodes: int = 20
    """episodes per evaluation; episode i uses seed eval_seed + i, as `vlagym eval`"""
    eval_num_envs: int = 1
    """parallel sub-envs of the evaluation"""
    eval_seed: int = 100_000
    """first seed of the evaluation episodes"""
    device: Device = "auto"
    """"auto" (CUDA when available), "cpu" or "cuda\""""
    torch_threads: int | None = None
    """CPU threads of torch in this process; unset: torch's default"""
    resume: bool = False
    """continue from OUT/checkpoints/last.json when it exists (otherwise start afresh)"""
    progress: bool = True
    """show a progress bar"""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FilteredBCConfig:
        """Inverse of `to_dict`; also reads the ``rl_config.json`` of an older run (``algo``, retired options
        left off), so that it resumes."""
        if not isinstance(d, dict):
            return super().from_dict(d)
        d = dict(d)
        algo = d.pop("algo", OLD_ALGO)
        if algo != OLD_ALGO:
            raise ValueError(f"this is the config of a {algo!r} run, not of filtered BC (train-fbc)")
        for name in RETIRED_SETTINGS:
            d.pop(name, None)
        used = [name for name, off in RETIRED_SWITCHES.items() if d.pop(name, off) != off]
        used += [f"{name}={value!r}" for name, value in RETIRED_VALUES.items() if d.get(name) == value]
        if used:
            raise ValueError(
                f"{', '.join(used)}: retired (no measured gain; see docs/post-training.md, 'Retired options'); a "
                "run that used it resumes only with the vlagym of commit 2b05d45"
            )
        return super().from_dict(d)

    def __post_init__(self) -> None:
        meta = self._check_source()
        self._check_numbers()
        self._check_choices()
        self.augmentation = nested_config("augmentation", self.augmentation, AugmentConfig)
        extra = meta.get("extra") or {}
        self._resolve_demos(extra)
        _warn_unreproduced(extra.get("bc_config") or {})
        collect = (self.collect_seed, self.collect_seed + self.rounds * self.episodes_per_round)
        evals = (self.eval_seed, self.eval_seed + self.eval_episodes)
        if collect[0] < evals[1] and evals[0] < collect[1]:
            raise ValueError(
                f"collection seeds {collect[0]}..{collect[1] - 1} overlap the evaluation seeds {evals[0]}.."
                f"{evals[1] - 1}: move collect_seed"
            )

    def _check_source(self) -> dict[str, Any]:
        """Check the checkpoint, the task and its env kwargs; returns the checkpoint's config.json."""
        from vlagym.envs import TASKS, can_move_target

        self.policy, meta, self.task = read_base_checkpoint(
            self.policy, self.task, "filtered BC post-trains a BC checkpoint: give its folder (policy)"
        )
        why = "the policy's observations and the task's time limit fix them"
        self.task = check_task_and_env_kwargs(self.task, self.env_kwargs, RESERVED_ENV_KWARGS, why)
        if self.hindsight is True and not can_move_target(self.task):
            movable = ", ".join(t for t in TASKS if can_move_target(t))
            raise ValueError(
                f"hindsight moves the task's target (reset option target_xy), which {self.task} cannot; tasks "
                f"that can: {movable}"
            )
        check_n_action_steps(self.n_action_steps, meta)
        return meta

    def _check_numbers(self) -> None:
        for name, low in (
            ("rounds", 1),
            ("episodes_per_round", 1),
            ("group_size", 1),
            ("n_envs", 1),
            ("noise_hold", 1),
            ("updates_per_round", 0),
            ("batch_size", 1),
            ("seed", 0),
            ("collect_seed", 0),
            ("eval_every", 0),
            ("eval_episodes", 1),
            ("eval_num_envs", 1),
            ("eval_seed", 0),
        ):
            check_int(name, getattr(self, name), low)
        if self.episodes_per_round % self.group_size:
            raise ValueError(
                f"episodes_per_round ({self.episodes_per_round}) must be a multiple of group_size ({self.group_size})"
            )
        for name in ("torch_threads", "n_action_steps"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        if self.max_gripper_reopens is not None:
            check_int("max_gripper_reopens", self.max_gripper_reopens, 0)
        for name in ("max_close_distance", "max_minutes"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name), 0.0, low_open=True)
        check_float("noise_std", self.noise_std, 0.0)
        check_float("lr", self.lr, 0.0, low_open=True)
        check_float("weight_decay", self.weight_decay, 0.0)
        check_float("grad_clip", self.grad_clip, 0.0)
        check_float("demo_fraction", self.demo_fraction, 0.0, 1.0)
        check_float("gamma", self.gamma, 0.0, 1.0, low_open=True)
        self._check_close_delays()

    def _check_close_delays(self) -> None:
        if not isinstance(self.close_delays, (list, tuple)):
            raise ValueError(f"close_delays must be a list of steps, e.g. [2, 4, 6, 8], got {self.close_delays!r}")
        self.close_delays = list(self.close_delays)
        for k in self.close_delays:
            check_int("each of close_delays", k, 1)
        if len(set(self.close_delays)) != len(self.close_delays):
            raise ValueError(f"close_delays repeats a delay: {self.close_delays}")

    def _check_choices(self) -> None:
        for name, hint in typing.get_type_hints(type(self)).items():
            if typing.get_origin(hint) is Literal and getattr(self, name) not in typing.get_args(hint):
                raise ValueError(f"{name} must be one of {list(typing.get_args(hint))}, got {getattr(self, name)!r}")
        for name in ("augment", "prefetch", "freeze_encoders", "hindsight", "resume", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        problem = backend_problem(self.backend, self.address, self.workers, self.unit_size, self.group_size)
        if problem:
            raise ValueError(problem)

    def _resolve_demos(self, extra: dict[str, Any]) -> None:
        if self.demos is None:
            trained_on = [str(p) for p in (extra.get("bc_config") or {}).get("dataset") or []]
            missing = [p for p in trained_on if not Path(p).is_file()]
            if missing:
                logger.warning("the BC checkpoint's demos %s are gone: training on the successes alone", missing)
            self.demos = [] if missing else trained_on
        if isinstance(self.demos, (str, os.PathLike)):
            self.demos = [self.demos]
        self.demos = [str(p) for p in self.demos]
        for path in self.demos:
            if not Path(path).is_file():
                raise ValueError(f"demo file {path!r} does not exist")


# BC settings whose effect these updates do not reproduce; `train-bc`'s default for each is "off".
UNREPRODUCED_BC = ("ema", "task_balance", "padded_actions")


def _warn_unreproduced(bc_config: dict[str, Any]) -> None:
    """Log which of the checkpoint's BC settings the updates leave out: on the ten-task recipe's checkpoint, the
    updates on its demos alone lost StackBlocks 39 -> 28% (docs/multitask.md, session 57)."""
    off = {f.name: f.default for f in fields(BCConfig) if f.name in UNREPRODUCED_BC}
    used = {k: bc_config[k] for k in UNREPRODUCED_BC if bc_config.get(k, off[k]) != off[k]}
    if used:
        settings = ", ".join(f"{k}={v!r}" for k, v in used.items())
        logger.warning(
            "the BC checkpoint was trained with %s, which these updates do not reproduce (raw weights, demos drawn "
            "uniformly, padded chunk steps masked); on the ten-task recipe's checkpoint, updates on its demos alone "
            "lowered tasks (docs/multitask.md, 'Filtered BC for the task BC leaves lowest')",
            settings,
        )
