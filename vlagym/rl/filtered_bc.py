"""Success-filtered BC post-training of a VLA: ``vlagym train-rl --algo filtered-bc``.

The RL post-training recipe that needs no value function and no likelihood: each *round* rolls the current
policy out on fresh seeds with a little exploration noise, keeps the episodes that succeeded, and trains the
policy on them by behaviour cloning (mixed with the original demos), then repeats. With a binary reward this is
reward-weighted regression (each episode weighted by its 0/1 return), the M-step of EM policy search; robot
learning knows it as filtered BC or autonomous self-improvement, LLM post-training as rejection-sampling
fine-tuning. Each round the policy imitates the successes of its own state distribution, so what it does well
spreads to nearby states, and the noise finds successes the deterministic policy misses.

One readable script (CleanRL style): config, collection, the round loop.

Collection: `n_envs` sub-envs run the VLA as `vlagym eval` runs it (same head, chunking, gripper decode), with
Gaussian noise of std `noise_std` (in normalised action units, the units the VLA predicts in) added to the arm
dimensions of each executed action (a fresh draw every step, or held for `noise_hold` steps: one offset per
chunk explores paths rather than jitter); the gripper command is not perturbed. Episode i of round r is reset with seed
``collect_seed + r * episodes_per_round + i``, and its noise comes from a generator of its own seed, so a round's
episodes do not depend on `n_envs` (up to the last bits of batched inference, which contact-rich episodes can
amplify, as in `vlagym eval`). ``collect_env_kwargs`` changes the collection scenes alone (e.g. always three
cups, where a PickCup policy fails most), while validation and the saved checkpoint keep the evaluation env.
With ``group_size`` G > 1, a round tries each of its episodes_per_round / G
states (seeds ``collect_seed + r * episodes_per_round / G + k``) G times in a row, each try with noise of its
own, and ``weighting="state"`` lets the successes of one state share one unit of weight, so that successes on
the states the policy seldom solves count most. With ``retry_noise_std`` > 0, the states of a round that kept
no success get G more tries with larger, held noise (`retry_noise_hold` steps per draw): the policy's own
behaviour with a little jitter either solves a state on most tries or on none, so the states it cannot solve
otherwise give no data at all. With ``hindsight``, each failed episode whose gripper closed away from the target
is replayed at once with the target moved to where the gripper first closed (``reset(options={"target_xy":
...})``, only where the task could have drawn that layout) and the episode's own actions; the replays that
succeed join the round's successes: a miss becomes a demonstration of reaching the target where it stands
(hindsight relabelling, Andrychowicz et al. 2017, done by editing the scene and re-rendering, since the goal is
in the pixels). With ``close_delays``, each failed episode whose gripper closed is also replayed in its own
scene from the simulator's state at its first close, with that close put off by k steps (the arm going on as
it went), for each k in turn; the first replay that succeeds joins the round's successes: a relabel in time,
for the grasps closed too early (too high on the object). With ``max_close_distance``, a success (own or
replayed) whose gripper first closed farther than that from the task's reach point is dropped: the lucky grasps
at a cup's rim are not imitated. ``weighting="advantage"`` weighs each step of a success by
exp(A / beta) instead, with A from a success critic on the privileged state trained on every collection episode
(failures included; `vlagym.rl.advantage`). With ``preference_weight`` > 0 the failures teach too: each
kept success of a state is paired with each failed try of the same state, and a DPO term (weighted by
`preference_weight`, beside the BC loss) pulls the policy's chunks toward the success's executed actions and
away from the failure's, relative to the policy that collected them (`vlagym.rl.preference`). A recorder inside
each sub-env (it works in async vector envs
too) keeps what the demos layout holds, and the successful episodes of round r are written as a demo file,
``OUT/rollouts/round_<r>.hdf5`` (`vlagym dataset check` accepts it; `vlagym train-bc` can train on it).

Training: `updates_per_round` AdamW steps on batches of which a `demo_fraction` share is drawn from the demos
and the rest from the successes of the rounds so far (the last `buffer_rounds` rounds), with the BC loss and
image augmentation of `vlagym train-bc`. The demos default to the dataset the BC checkpoint was trained on (its
``bc_config``), when those files are still there.

Outputs of a run folder ``OUT``:

    OUT/rl_config.json                       the `FilteredBCConfig`
    OUT/rollouts/round_<r>.hdf5              the successful episodes of round r (demos layout)
    OUT/rollouts/round_<r>.states.npz        "advantage" weighting: every episode's privileged states and outcome
    OUT/rollouts/round_<r>.pairs.npz         preference_weight > 0: the round's (success, failed try) pairs of one
                                             state, as `vlagym.rl.preference.PairBank`
    OUT/tb/                                  TensorBoard: rollout/success_rate and rollout/outcome_* (how the
                                             noisy collection episodes ended: dropped, never_reached, ...),
                                             rollout/success_reopen_share and rollout/successes_filtered (the
                                             successes that re-open the gripper; how many max_gripper_reopens
                                             dropped), train/loss, buffer/*, time/*, eval/success_rate, critic/* (the
                                             "advantage" weighting's critic: loss, Brier score beside the
                                             constant predictor's, on its training data and, before it trains
                                             on them, on the round's new episodes (brier_new), mean V of the
                                             round's initial states, the weights' effective and capped share),
                                             retry/* (the second pass: states tried, states solved, successes
                                             kept, success rate); rollout/* counts the first pass alone;
                                             hindsight/* (replays run, their success rate, successes kept, and
                                             the failures not replayed: no_close, at_target, layout);
                                             delay/* (close_delays: failures replayed, successes kept and
                                             by k, steps simulated, the failures not replayed),
                                             rollout/success_close_distance_p50 (the median reach distance
                                             at the successes' first close) and far_close/* (the successes
                                             max_close_distance dropped, by source: rollout, retry,
                                             hindsight, delay), preference/* (preference_weight > 0: the
                                             pairs made this round and drawn from, the DPO loss, its mean margin
                                             and the share of pairs ordered right)
    OUT/checkpoints/step_<n>/                n = optimiser steps; model.safetensors + config.json (a VLA
                                             checkpoint `vlagym eval` loads), training_state.pt
    OUT/checkpoints/last.json                the latest complete checkpoint (one per round)
    OUT/eval/step_<n>/, OUT/eval/curve.json  evaluations with the `vlagym eval` protocol, as PPO's

Resume (``resume=True``) continues after the last checkpointed round: weights, optimiser, counters and random
streams are restored and the rounds' seeds are fixed, so a resumed run equals an uninterrupted one.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import math
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import h5py
import mujoco
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch.utils.data import default_collate

from vlagym.checks import check_float, check_int
from vlagym.config import Config
from vlagym.envs import TASKS, can_move_target
from vlagym.envs.base import TASK_STATE_SLOTS
from vlagym.envs.multitask import MultiTaskEnv
from vlagym.envs.robot import PROPRIO_EE_POS, Robot
from vlagym.eval.diagnostics import REACH_KEY, outcome_counts
from vlagym.io import atomic_write_json, file_sha256
from vlagym.policies.checkpoint import WEIGHTS_NAME, read_checkpoint_config
from vlagym.policies.vla import IMAGE_KEY, PROPRIO_KEY, VLAPolicy
from vlagym.rl.advantage import (
    STATES_KEY,
    EpisodeStates,
    advantage_weights,
    brier_scores,
    critic_state,
    effective_share,
    episode_advantages,
    make_critic,
    read_states,
    read_success_states,
    states_path,
    train_critic,
    write_states,
)
from vlagym.rl.envs import VECTORIZATION_MODES
from vlagym.rl.ppo import check_task_and_env_kwargs
from vlagym.rl.preference import (
    FAILURE_KEY,
    PairBank,
    build_bank,
    draw_pairs,
    pair_batch,
    pair_tries,
    pairs_path,
    preference_loss,
    read_bank,
    write_bank,
)
from vlagym.train import layout
from vlagym.train.augment import ImageAugment
from vlagym.train.bc import lr_factor
from vlagym.train.dataset import DemoDataset, complete_demos
from vlagym.train.demos import DemoEpisode, write_demo, write_header
from vlagym.train.run import (
    DEVICES,
    STATE_NAME,
    TB_DIR,
    checkpoint_dir,
    commit_checkpoint,
    ema_update,
    latest_checkpoint,
    load_state,
    param_groups,
    preserved_rng,
    resolve_device,
    rng_state,
    seed_everything,
    set_rng_state,
)

logger = logging.getLogger(__name__)

ALGO = "filtered-bc"
LR_SCHEDULES = ("constant", "cosine", "cosine-time")
WEIGHTINGS = ("episode", "state", "advantage")
WEIGHT_ATTR = "weight"  # a rollout file's demo attribute: the episode's sampling weight
CONFIG_NAME = "rl_config.json"
CURVE_NAME = "curve.json"
ROLLOUTS = "rollouts"
RECORD_KEY = "rollout_record"  # the info key the in-env recorder fills at the end of a successful episode
HINDSIGHT_KEY = "rollout_hindsight"  # ... and, with hindsight, at the end of a failed one (a `HindsightReplay`)
HINDSIGHT_ATTR = "hindsight_target_xy"  # a rollout file's demo attribute: where a hindsight replay put the target
HINDSIGHT_ROOM_ATTR = "hindsight_moved_aside"  # ... and how many objects it moved aside to make room (make_room)
DELAY_KEY = "rollout_close_delay"  # ... and, with close_delays, at the end of a failed one (a `HindsightReplay`)
DELAY_ATTR = "close_delay"  # a rollout file's demo attribute: the steps a delayed-close replay put the close off
CLOSE_DISTANCE_ATTR = "close_distance"  # ... and the reach distance at the first close (where the task reports one)
STATE_TARGET_XY = slice(Robot.PROPRIO_DIM, Robot.PROPRIO_DIM + 2)  # the target's x, y in `VLAEnv.state_vector`
_SLOTS = Robot.PROPRIO_DIM + TASK_STATE_SLOTS  # where each object slot starts in `VLAEnv.state_vector`
HINDSIGHT_MIN_MOVE = 0.01  # metres: a gripper that closed this near the target's start replays the same episode
NOISE_STREAM = 0xF17B  # the exploration noise of the episode with seed s comes from default_rng([NOISE_STREAM, s])
CRITIC_STREAM = 0xC817  # round r's critic minibatches come from default_rng([seed, r, CRITIC_STREAM])
CRITIC_BATCH = 256
PREFERENCE_STREAM = 0xD90  # round r's preference pair draws come from default_rng([seed, r, PREFERENCE_STREAM])
RESERVED_ENV_KWARGS = ("obs_mode", "render_mode", "image_size", "cameras", "max_episode_steps")
# what a batch item holds (DemoDataset items carry more: index, task, ...)
_LOWDIM = (PROPRIO_KEY, "action", "action_is_pad", "instruction")


# ---------------------------------------------------------------------------- config
@dataclass
class FilteredBCConfig(Config):
    """Options of `train_filtered_bc` (``vlagym train-rl --algo filtered-bc``); saved as ``OUT/rl_config.json``."""

    policy: str
    """BC checkpoint folder to post-train (model.safetensors + config.json)"""
    algo: str = ALGO
    """always "filtered-bc" (tells this config from PPO's `RLConfig` in rl_config.json)"""
    task: str | None = None
    """registered env id; None: the checkpoint's task"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra env kwargs on top of the checkpoint's (collection and evaluation alike)"""
    collect_env_kwargs: dict[str, Any] = field(default_factory=dict)
    """env kwargs on top of those for the collection episodes only, e.g. ``{"num_cups": 3}`` to practise on the
    hardest scenes; the validation episodes and the saved checkpoint keep the evaluation env"""
    out: str = "runs/rl"
    """run folder: config, rollouts, TensorBoard logs, checkpoints, evaluations"""
    rounds: int = 40
    """collect-then-train rounds"""
    max_minutes: float | None = None
    """also stop before a round that would take training past this many minutes, judged by the length of the
    round before it (wall clock, evaluations excluded, resumed runs included; a resumed run's first round
    always runs); None: no time limit"""
    episodes_per_round: int = 200
    """collection episodes per round"""
    group_size: int = 1
    """tries of each initial state per round, each with noise of its own (`episodes_per_round` must be a
    multiple): a round runs episodes_per_round / group_size states; 1: every episode a fresh state"""
    weighting: str = "episode"
    """how the successes weigh in the batches: "episode", each successful episode alike; "state", the
    successes of one initial state share one unit (with `group_size` > 1, one success on a state the policy
    seldom solves counts as much as all of them on a state it always solves); "advantage", each step by
    exp(A / advantage_beta), A the rise of a success critic on the privileged state over the chunk executed from
    there (AWR; see `vlagym.rl.advantage`)"""
    gamma: float = 1.0
    """discount of the 0/1 success reward: a success after T steps weighs gamma^T (times its `weighting`
    weight), so quick successes count more than slow ones (e.g. ones that dropped the object and picked it up
    again); 1: every success alike"""
    max_gripper_reopens: int | None = None
    """drop the successes whose gripper command (the last action entry, -1 open ... +1 closed) opens again
    after closing more than this many times, before they enter the buffer: 0 for a pick (a success that let go
    of the object and grasped it again teaches the chatter behind drops), 1 for a place (one release); None:
    keep every success"""
    max_close_distance: float | None = None
    """drop the successes (own and replayed) whose gripper was first commanded to close farther than this, in
    metres, from the task's reach point (its ``info["reach_distance"]``: a cup's axis at half its height), before
    they enter the buffer: a success that closed at the rim and lifted the cup by luck teaches the grasps made too
    high that are most of a PickCup policy's failures (the expert closes within 1 cm). E.g. 0.04; None: keep every
    success. Successes that never closed, or of a task that reports no reach distance, are kept"""
    advantage_beta: float = 0.2
    """"advantage" weighting: the temperature of exp(A / beta) (A is a change of success probability, in [-1, 1])"""
    advantage_max_weight: float = 20.0
    """"advantage" weighting: the cap of a step's weight"""
    critic_rounds: int = 4
    """"advantage" weighting: the critic trains on every collection episode of the last this many rounds"""
    critic_updates: int = 300
    """"advantage" weighting: the critic's Adam steps per round (batch 256)"""
    max_episode_steps: int | None = None
    """time limit of the collection episodes, in control steps; None: the task's registered one (evaluation always
    uses that). A collection episode that fails runs to this limit, so a shorter one makes every failure cheaper;
    the successes slower than it are lost, and with `gamma` < 1 those weigh little anyway (gamma^T); the
    "advantage" critic then learns success within this limit (a cut episode is a failure)"""
    n_action_steps: int | None = None
    """actions executed of each predicted chunk before the policy predicts again (1..chunk size, no temporal
    ensembling), in collection, validation and the saved checkpoints; None: the checkpoint's. Fewer steps act more
    closed-loop at more inference cost; compare with the BC checkpoint run the same way (`vlagym eval
    --n-action-steps`)"""
    n_envs: int = 4
    """parallel sub-envs of the collection"""
    vectorization: str = "sync"
    """"sync" (one process) or "async" (one worker process per sub-env)"""
    noise_std: float = 0.1
    """std of the Gaussian exploration noise on the executed arm actions, in normalised action units (0: none)"""
    noise_hold: int = 1
    """steps each noise draw is held: 1, fresh noise every step; the policy's n_action_steps, one constant offset
    per executed chunk (temporally correlated exploration: the arm drifts off the mean path instead of jittering
    around it)"""
    retry_noise_std: float = 0.0
    """a second pass on the states of a round that kept no success (every try failed, or its successes were
    dropped by `max_gripper_reopens` or `max_close_distance`): `group_size` more tries each, with noise of this
    std held for `retry_noise_hold` steps (wider, temporally correlated exploration where the first pass found
    nothing; its successes join the round's); 0: no second pass"""
    retry_noise_hold: int = 10
    """steps each noise draw of the second pass is held (see `retry_noise_std`)"""
    hindsight: bool = False
    """hindsight relabelling by scene editing: replay every failed collection episode whose gripper closed away
    from the target, with the target moved to where the gripper first closed (where the task could have drawn
    it: inside its workspace, apart from the other objects) and the episode's own actions; the replays that
    succeed join the round's successes (under "state" weighting a seed's replays share one unit, beside its own
    successes' unit). The policy's misses become demonstrations of reaching the target where it is. Needs a task
    whose target can move (``reset(options={"target_xy": ...})``: PickCup, PickObject)"""
    hindsight_make_room: bool = False
    """with `hindsight`, a replay whose target spot lies too near another object moves that object aside
    (``reset(options={"make_room": True})``: to the nearest spot where the task could have drawn it) instead of
    skipping the failure; in multi-object scenes a miss often closes near another object"""
    close_delays: list[int] = field(default_factory=list)
    """relabelling in time: replay each failed collection episode whose gripper closed, in its own scene, with
    the first close put off by k steps (k copies of the last action before it inserted there: the arm goes on
    as it went, gripper open), for each k in turn until a replay succeeds; the first success joins the round's
    successes, a demonstration of the original scene (under "state" weighting it shares the seed's unit). A
    replay restarts from the simulator's state at the close (nothing before it runs again) and ends at a
    success, when the gripper opens again, or at the episode's length. Aimed at grasps closed too early (too
    high on the object, or before reaching it). E.g. [2, 4, 6, 8]; []: off. Any task"""
    preference_weight: float = 0.0
    """weight of a pairwise preference term (DPO) on the tries of one state, beside the BC loss: each success
    of a state is paired with each failed try of the same state (needs `group_size` > 1 and `noise_std` > 0),
    and the policy's chunk is pulled toward the success's executed actions and away from the failure's, relative
    to the policy that collected them, until it prefers the success (`vlagym.rl.preference`); 0: off (successes
    only, as plain filtered BC). Needs an "l1" head acting open loop"""
    preference_beta: float = 1.0
    """DPO's beta: the scale of the log-likelihood-ratio margin inside the sigmoid. The log-ratios are means over
    steps with 1 / (2 sigma^2) = 50 per squared normalised unit at sigma 0.1, so a move of the chunk by one noise
    std already changes them by about 1, and beta 1 saturates the term there (LLM practice, 0.1 on sums over
    tens of tokens, is 1 to 5 on means)"""
    preference_pairs: int = 8
    """pairs per optimiser step"""
    preference_chunks: int = 2
    """chunk starts drawn of each side of a pair per step"""
    preference_rounds: int = 3
    """pairs of the last this many rounds are drawn"""
    updates_per_round: int = 300
    """optimiser steps per round"""
    batch_size: int = 64
    """samples per optimiser step"""
    lr: float = 1e-4
    """AdamW (peak) learning rate"""
    lr_schedule: str = "constant"
    """"constant"; "cosine": cosine decay from `lr` to 0 over the `rounds` * `updates_per_round` updates of the
    run (a run that `max_minutes` stops early never decays all the way); "cosine-time": cosine decay from `lr`
    to 0 over the `max_minutes` budget, by the training clock (the fraction of the budget spent when an update
    runs), so a time-limited run ends its decay whatever number of rounds fits. The clock makes the rates
    differ in their last digits between two runs of one seed (as `max_minutes` makes their round counts
    differ); a resumed run continues the clock where it stopped"""
    weight_decay: float = 1e-4
    """AdamW weight decay of the weight matrices, as `vlagym train-bc`"""
    grad_clip: float = 1.0
    """clip the global gradient norm to this (0: no clipping)"""
    ema: float = 0.0
    """decay of an exponential moving average of the weights, e.g. 0.999 (0: off); when on, the EMA weights are
    the policy: what collects, what is saved and what is evaluated"""
    freeze_encoders: bool = False
    """keep the vision and instruction encoders at their BC weights and train the rest (proprio projection,
    trunk, head): no backward pass through the image encoders, so an update costs far less, and the encoding
    of the instruction cannot drift"""
    demos: list[str] | None = None
    """demo files mixed into every batch; None: the BC checkpoint's training data (when the files exist); []: none"""
    demo_fraction: float = 0.5
    """share of each batch drawn from the demos (the rest from the successes); ignored without demos"""
    buffer_rounds: int | None = None
    """train on the successes of the last this many rounds; None: of every round so far"""
    augment: bool = True
    """random crop and colour jitter of the images, as `vlagym train-bc`"""
    prefetch: bool = True
    """draw (read, augment) the next batches in a background thread while the current update runs; False:
    inline, in the training thread (the same batches; `vlagym bench --sections filtered-bc` compares the two)"""
    seed: int = 0
    """seeds the batch draws and the augmentation"""
    collect_seed: int = 10_000_000
    """round r's episode i is reset with seed collect_seed + r * episodes_per_round + i (never an evaluation seed)"""
    eval_every: int = 1
    """evaluate every this many rounds and after the last (0: never)"""
    eval_episodes: int = 20
    """episodes per evaluation; episode i uses seed eval_seed + i, as `vlagym eval`"""
    eval_num_envs: int = 1
    """parallel sub-envs of the evaluation"""
    eval_seed: int = 100_000
    """first seed of the evaluation episodes"""
    device: str = "auto"
    """"auto" (CUDA when available), "cpu" or "cuda\""""
    torch_threads: int | None = None
    """CPU threads of torch in this process (None: torch's default)"""
    resume: bool = False
    """continue from OUT/checkpoints/last.json when it exists (otherwise start afresh)"""
    progress: bool = True
    """show a progress bar"""

    def __post_init__(self) -> None:
        extra = self._check_source()
        self._check_numbers()
        self._resolve_demos(extra)
        collect = (self.collect_seed, self.collect_seed + self.rounds * self.episodes_per_round)
        evals = (self.eval_seed, self.eval_seed + self.eval_episodes)
        if collect[0] < evals[1] and evals[0] < collect[1]:
            raise ValueError(
                f"collection seeds {collect[0]}..{collect[1] - 1} overlap the evaluation seeds {evals[0]}.."
                f"{evals[1] - 1}: move collect_seed"
            )

    def _check_source(self) -> dict[str, Any]:
        """Check algo, checkpoint, task and env settings; returns the checkpoint's ``extra``."""
        if self.algo != ALGO:
            raise ValueError(f"algo must be {ALGO!r} for a FilteredBCConfig, got {self.algo!r}")
        if not self.policy:
            raise ValueError("filtered-bc post-trains a BC checkpoint: give its folder (policy)")
        self.policy = str(self.policy)
        meta = read_checkpoint_config(self.policy)
        extra = meta.get("extra") or {}
        if not self.task:
            self.task = extra.get("env_id")
            if not self.task:
                raise ValueError(f"checkpoint {self.policy} names no env_id; give the task")
        self.task = check_task_and_env_kwargs(
            self.task, self.env_kwargs, RESERVED_ENV_KWARGS, "the policy's observations fix them"
        )
        try:
            check_task_and_env_kwargs(
                self.task, self.collect_env_kwargs, RESERVED_ENV_KWARGS, "the policy's observations fix them"
            )
        except ValueError as e:
            raise ValueError(f"collect_env_kwargs: {e}") from e
        if self.hindsight_make_room is True and self.hindsight is not True:
            raise ValueError("hindsight_make_room moves objects aside for hindsight replays; it needs hindsight")
        if self.hindsight is True and not can_move_target(self.task):
            movable = ", ".join(t for t in TASKS if can_move_target(t))
            raise ValueError(
                f"hindsight moves the task's target (reset option target_xy), which {self.task} cannot; tasks "
                f"that can: {movable}"
            )
        chunk = (meta.get("config") or {}).get("chunk_size")
        if isinstance(self.n_action_steps, int) and chunk is not None and self.n_action_steps > chunk:
            raise ValueError(f"n_action_steps={self.n_action_steps} must be <= the checkpoint's chunk_size={chunk}")
        if self.vectorization not in VECTORIZATION_MODES:
            raise ValueError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {self.vectorization!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {list(DEVICES)}, got {self.device!r}")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {list(WEIGHTINGS)}, got {self.weighting!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {list(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        if self.lr_schedule == "cosine-time" and self.max_minutes is None:
            raise ValueError("lr_schedule='cosine-time' decays over the max_minutes budget: give max_minutes")
        return extra

    def _check_numbers(self) -> None:
        for name, low in (
            ("rounds", 1),
            ("episodes_per_round", 1),
            ("group_size", 1),
            ("n_envs", 1),
            ("noise_hold", 1),
            ("retry_noise_hold", 1),
            ("updates_per_round", 0),
            ("batch_size", 1),
            ("seed", 0),
            ("collect_seed", 0),
            ("eval_every", 0),
            ("eval_episodes", 1),
            ("critic_rounds", 1),
            ("critic_updates", 1),
            ("eval_num_envs", 1),
            ("eval_seed", 0),
            ("preference_pairs", 1),
            ("preference_chunks", 1),
            ("preference_rounds", 1),
        ):
            check_int(name, getattr(self, name), low)
        check_float("preference_weight", self.preference_weight, 0.0)
        check_float("preference_beta", self.preference_beta, 0.0, low_open=True)
        if self.preference_weight > 0 and (self.group_size < 2 or self.noise_std == 0):
            raise ValueError(
                "preference_weight > 0 pairs the tries of one state: it needs group_size >= 2 and noise_std > 0, "
                f"got group_size={self.group_size}, noise_std={self.noise_std}"
            )
        if self.episodes_per_round % self.group_size:
            raise ValueError(
                f"episodes_per_round ({self.episodes_per_round}) must be a multiple of group_size ({self.group_size})"
            )
        for name in ("buffer_rounds", "torch_threads", "max_episode_steps", "n_action_steps"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        if self.max_gripper_reopens is not None:
            check_int("max_gripper_reopens", self.max_gripper_reopens, 0)
        if not isinstance(self.close_delays, (list, tuple)):
            raise ValueError(f"close_delays must be a list of steps, e.g. [2, 4, 6, 8], got {self.close_delays!r}")
        self.close_delays = list(self.close_delays)
        for k in self.close_delays:
            check_int("each of close_delays", k, 1)
        if len(set(self.close_delays)) != len(self.close_delays):
            raise ValueError(f"close_delays repeats a delay: {self.close_delays}")
        if self.max_close_distance is not None:
            check_float("max_close_distance", self.max_close_distance, 0.0, low_open=True)
        if self.max_minutes is not None:
            check_float("max_minutes", self.max_minutes, 0.0, low_open=True)
        check_float("noise_std", self.noise_std, 0.0)
        check_float("retry_noise_std", self.retry_noise_std, 0.0)
        check_float("lr", self.lr, 0.0, low_open=True)
        check_float("weight_decay", self.weight_decay, 0.0)
        check_float("grad_clip", self.grad_clip, 0.0)
        check_float("ema", self.ema, 0.0, 1.0)
        if self.ema == 1.0:
            raise ValueError(f"ema must be < 1 (1 would never move the weights), got {self.ema!r}")
        check_float("demo_fraction", self.demo_fraction, 0.0, 1.0)
        check_float("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_float("advantage_beta", self.advantage_beta, 0.0, low_open=True)
        check_float("advantage_max_weight", self.advantage_max_weight, 1.0)
        flags = ("augment", "prefetch", "freeze_encoders", "hindsight", "hindsight_make_room", "resume", "progress")
        for name in flags:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")

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


# ---------------------------------------------------------------------------- collection
@dataclass
class RolloutEpisode:
    """A recorded episode, the demos layout's arrays (a dataclass, not a dict: vector envs would split a dict)."""

    seed: int
    instruction: str
    task: str
    images: dict[str, np.ndarray]
    proprio: np.ndarray
    state: np.ndarray
    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    target_xy: tuple[float, float] | None = None
    """a hindsight replay's: where the target was moved (`reset(options={"target_xy": ...})`); None otherwise"""
    moved_aside: int = 0
    """a hindsight replay's: how many objects were moved aside to make room for the target"""
    close_delay: int = 0
    """a delayed-close replay's: the steps its first close was put off (see `FilteredBCConfig.close_delays`)"""
    close_distance: float | None = None
    """the task's reach distance (grasp site to reach point, metres) when the gripper was first commanded to
    close; None when it never closed or the task reports none"""


@dataclass
class HindsightReplay:
    """What the hindsight (or delayed-close) replays of one failed episode gave: `episode` when a replay
    succeeded (None when none did or none ran), `steps` simulated, and why none ran (`skipped`: "no_close",
    "at_target", "layout", "at_start", or "" when one ran), how many objects it `moved_aside` to make room for
    the target, and the `close_delay` of the delayed-close replay that succeeded."""

    seed: int
    episode: RolloutEpisode | None
    steps: int
    skipped: str
    moved_aside: int = 0
    close_delay: int = 0


def first_close(actions: np.ndarray) -> int | None:
    """The step of an episode's first closing command (gripper entry >= 0); None when the gripper never closed."""
    closing = np.flatnonzero(np.asarray(actions)[:, -1] >= 0)
    return int(closing[0]) if len(closing) else None


def close_point(actions: np.ndarray, proprio: np.ndarray) -> np.ndarray | None:
    """Where the gripper first closed in an episode: the grasp site's position (proprio[14:17]) when the first
    closing command was issued; None when the gripper never closed."""
    t = first_close(actions)
    return None if t is None else np.asarray(proprio)[t, PROPRIO_EE_POS].astype(np.float64)


def _moved_aside(before: np.ndarray, after: np.ndarray) -> int:
    """How many objects besides the target stand elsewhere in privileged state `after` than in `before` (two
    first steps of one seed: the episode and its hindsight replay, whose target always moved)."""
    moved = 0
    for s in _SLOTS:
        if before[s + 7] > 0 and float(np.hypot(*(after[s : s + 2] - before[s : s + 2]))) > 1e-6:
            moved += 1
    return max(moved - 1, 0)


class _RolloutRecorder(gym.Wrapper):
    """Records its sub-env's episode in the demos layout and, when the episode ends in success, hands it over
    in ``info[RECORD_KEY]`` (a `RolloutEpisode`); at the end of every episode, success or not, it hands over
    the privileged states in ``info[STATES_KEY]`` (an `EpisodeStates`, what a success critic trains on). Runs
    inside the sub-env, so it works in async vector envs.

    With `hindsight`, a failed episode whose gripper closed away from the target is replayed at once: the same
    seed with the target moved to where the gripper first closed (``reset(options={"target_xy": ...})``, which
    refuses a layout the task could not have drawn), then the episode's own actions, to the first success or
    the end of the actions. The arm moves as before until it touches something, so the replay shows the
    policy's own trajectory in a scene where it reaches the target. The outcome goes in
    ``info[HINDSIGHT_KEY]`` (a `HindsightReplay`, its `episode` recorded when it succeeded).

    With `close_delays`, a failed episode whose gripper closed is also replayed in its own scene with the first
    close put off by k steps, for each k in turn until one succeeds (``info[DELAY_KEY]``). The recorder keeps a
    copy of the simulator's data (`mujoco.MjData`) from just before the first closing command, and each such
    replay resets the env (the same seed: the wrappers' and the task's episode state), copies that data back,
    and steps on from there, so it continues the episode exactly and nothing before the close runs again.
    The sub-env is left in the last replay's state: the collection resets it before its next episode.

    With `record_failures`, a failed episode is handed over as well, in ``info[FAILURE_KEY]`` (what the
    preference term pairs with the successes of the same state)."""

    def __init__(
        self,
        env: gym.Env,
        hindsight: bool = False,
        make_room: bool = False,
        close_delays: tuple[int, ...] = (),
        record_failures: bool = False,
    ):
        super().__init__(env)
        self.hindsight, self.make_room = bool(hindsight), bool(make_room)
        self.record_failures = bool(record_failures)
        self.close_delays = tuple(int(k) for k in close_delays)
        self._seed: int | None = None
        self._steps: list[dict[str, Any]] = []
        self._success = False
        self._close_at: int | None = None  # the step of the episode's first closing command
        self._at_close: mujoco.MjData | None = None  # the simulator's data just before it

    def _sim(self):
        base = self.env.unwrapped
        return base.current if isinstance(base, MultiTaskEnv) else base

    def _step_record(self, obs: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
        sim = self._sim()
        reach = info.get(REACH_KEY)
        return {
            "images": {cam: np.array(img) for cam, img in obs["images"].items()},
            "proprio": np.array(obs["proprio"], np.float32),
            "state": sim.state_vector().astype(np.float32),
            "sim_state": sim.sim_state(),
            "reach": None if reach is None else float(reach),
        }

    def _observe(self, obs: dict[str, Any], info: dict[str, Any]) -> None:
        self._steps.append(self._step_record(obs, info))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._seed, self._success, self._close_at = seed, False, None
        self._options = copy.deepcopy(options)
        self._steps = []
        self._instruction, self._task = str(info.get("instruction", "")), str(info.get("task", ""))
        if not self._task:
            self._task = self.env.spec.id if self.env.spec else ""
        self._observe(obs, info)
        return obs, info

    def step(self, action):
        if self.close_delays and self._close_at is None and float(np.asarray(action)[-1]) >= 0:
            self._keep_close_state()
        obs, reward, terminated, truncated, info = self.env.step(action)
        step = self._steps[-1]
        step["action"] = np.array(action, np.float32)
        step["reward"] = float(reward)
        self._success |= bool(info.get("success", False))
        if terminated or truncated:
            if self._success:
                info[RECORD_KEY] = self._episode(self._steps)
            elif self.record_failures:
                info[FAILURE_KEY] = self._episode(self._steps)
            info[STATES_KEY] = EpisodeStates(
                seed=int(self._seed) if self._seed is not None else -1,
                state=np.stack([s["state"] for s in self._steps]),
                success=self._success,
            )
            if self.hindsight and not self._success and self._seed is not None:
                info[HINDSIGHT_KEY] = self._replay()
            if self.close_delays and not self._success and self._seed is not None:
                info[DELAY_KEY] = self._delayed_close()
            self._steps = []
        else:
            self._observe(obs, info)
        return obs, reward, terminated, truncated, info

    def _replay(self) -> HindsightReplay:
        """The hindsight replay of the failed episode just recorded (see the class docstring)."""
        seed = int(self._seed)
        actions = np.stack([s["action"] for s in self._steps])
        point = close_point(actions, np.stack([s["proprio"] for s in self._steps]))
        if point is None:
            return HindsightReplay(seed, None, 0, "no_close")
        # where the target stood at the start (the failed episode may have pushed it): the privileged state's
        target = self._steps[0]["state"][STATE_TARGET_XY]
        if float(np.hypot(*(point[:2] - target))) < HINDSIGHT_MIN_MOVE:
            return HindsightReplay(seed, None, 0, "at_target")
        xy = (float(point[0]), float(point[1]))
        try:
            obs, info = self.env.reset(seed=seed, options={"target_xy": xy, "make_room": self.make_room})
        except ValueError:  # the task cannot move its target there (workspace, spacing) or at all
            return HindsightReplay(seed, None, 0, "layout")
        steps: list[dict[str, Any]] = []
        success = False
        for action in actions:
            steps.append(self._step_record(obs, info))
            obs, reward, terminated, truncated, info = self.env.step(action)
            steps[-1]["action"], steps[-1]["reward"] = np.array(action, np.float32), float(reward)
            success = bool(info.get("success", False))
            if success or terminated or truncated:
                break
        moved = _moved_aside(self._steps[0]["state"], steps[0]["state"])
        episode = self._episode(steps, target_xy=xy, moved_aside=moved) if success else None
        return HindsightReplay(seed, episode, len(steps), "", moved)

    def _keep_close_state(self) -> None:
        """Copy the simulator's data as it is before the episode's first closing command is applied."""
        sim = self._sim()
        if self._at_close is None or self._at_close.model is not sim.model:  # a multi-task env changes models
            self._at_close = mujoco.MjData(sim.model)
        mujoco.mj_copyData(self._at_close, sim.model, sim.data)
        self._close_at = len(self._steps) - 1

    def _delayed_close(self) -> HindsightReplay:
        """The delayed-close replays of the failed episode just recorded (see the class docstring): the first
        that succeeds, or none."""
        seed, start = int(self._seed), self._close_at
        if start is None:
            return HindsightReplay(seed, None, 0, "no_close")
        if start == 0:  # no action before the close to go on with
            return HindsightReplay(seed, None, 0, "at_start")
        simulated = 0
        for k in self.close_delays:
            steps, success = self.continue_from_close(k)
            simulated += len(steps) - start
            if success:
                return HindsightReplay(seed, self._episode(steps, close_delay=k), simulated, "", close_delay=k)
        return HindsightReplay(seed, None, simulated, "")

    def continue_from_close(self, delay: int) -> tuple[list[dict[str, Any]], bool]:
        """Replay the episode just recorded from its first close, put off by `delay` steps (`delay` copies of the
        action before it, then the episode's own actions from the close on, as many as keep the episode's
        length), to a success, the gripper opening again, or the end: (the steps, the recorded ones before the
        close included; whether it succeeded). `delay` 0 continues the episode as it was."""
        start = self._close_at
        if start is None:
            raise RuntimeError("the episode just recorded never closed the gripper")
        actions = [s["action"] for s in self._steps]
        edited = ([actions[start - 1]] * delay if start > 0 else []) + actions[start:]
        edited = edited[: len(actions) - start]
        self.env.reset(seed=self._seed, options=self._options)  # the wrappers' and the task's episode state
        sim = self._sim()
        mujoco.mj_copyData(sim.data, sim.model, self._at_close)
        observed = ("images", "proprio", "state", "sim_state", "reach")
        steps = self._steps[:start] + [{key: self._steps[start][key] for key in observed}]
        closed = success = False
        for action in edited:
            if closed and action[-1] < 0:  # the grasp let go: a success from here would re-grasp
                break
            closed = closed or bool(action[-1] >= 0)
            obs, reward, terminated, truncated, info = self.env.step(action)
            steps[-1]["action"], steps[-1]["reward"] = action, float(reward)
            success = bool(info.get("success", False))
            if success or terminated or truncated:
                break
            steps.append(self._step_record(obs, info))
        if "action" not in steps[-1]:  # stopped before stepping: the last observation has no action
            steps.pop()
        return steps, success

    def _episode(
        self,
        steps: list[dict[str, Any]],
        target_xy: tuple[float, float] | None = None,
        moved_aside: int = 0,
        close_delay: int = 0,
    ) -> RolloutEpisode:
        actions = np.stack([s["action"] for s in steps])
        close = first_close(actions)
        return RolloutEpisode(
            seed=int(self._seed) if self._seed is not None else -1,
            instruction=self._instruction,
            task=self._task,
            images={cam: np.stack([s["images"][cam] for s in steps]) for cam in steps[0]["images"]},
            proprio=np.stack([s["proprio"] for s in steps]),
            state=np.stack([s["state"] for s in steps]),
            states=np.stack([s["sim_state"] for s in steps]),
            actions=actions,
            rewards=np.array([s["reward"] for s in steps], np.float32),
            target_xy=target_xy,
            moved_aside=moved_aside,
            close_delay=close_delay,
            close_distance=None if close is None else steps[close]["reach"],
        )


class NoisyVLA:
    """A `VLAPolicy` as a batched rollout policy (what `vlagym eval` runs), plus Gaussian noise of std `noise_std`
    in normalised action units on every executed action's arm dimensions (all but the last, the gripper); each
    draw is held for `hold` steps of its episode (steps 0..hold-1 share one draw, and so on).

    Row i's noise (and a flow head's sampling noise) comes from generators seeded by its episode's seed (see
    `reset`), so an episode depends on its seed alone, not on `n_envs` or the rows beside it. The k-th episode
    of a seed since `new_round` (k = first_try, first_try + 1, ...: the tries of a group, started in list order)
    gets the noise of (seed, k), so the tries of one state differ; try 0's noise is the seed's alone. A second
    actor on the same states (the retry pass) starts at `first_try` > 0, so its tries draw noise of their own."""

    def __init__(self, policy: VLAPolicy, noise_std: float, hold: int = 1, first_try: int = 0):
        if int(hold) < 1:
            raise ValueError(f"hold must be >= 1 step, got {hold!r}")
        if int(first_try) < 0:
            raise ValueError(f"first_try must be >= 0, got {first_try!r}")
        self.policy, self.noise_std, self.hold, self.first_try = policy, float(noise_std), int(hold), int(first_try)
        self.seconds = 0.0  # spent choosing actions (inference and noise), for the collection's time split
        self._noise: list[np.random.Generator | None] = []
        self._held: list[np.ndarray | None] = []  # each row's current draw (standard normal)
        self._age = np.zeros(0, np.int64)  # each row's steps since its episode started
        self._flow: list[torch.Generator | None] = []
        self._tries: dict[int, int] = {}

    def new_round(self) -> None:
        """Forget the tries counted so far: the next episode of every seed is its try 0."""
        self._tries = {}

    def reset(self, mask: np.ndarray, seeds: np.ndarray) -> None:
        from vlagym.eval.evaluate import episode_noise_generator

        mask = np.asarray(mask, bool)
        if len(self._noise) != len(mask):
            self._noise, self._flow, self._held = [None] * len(mask), [None] * len(mask), [None] * len(mask)
            self._age = np.zeros(len(mask), np.int64)
        self.policy.reset(mask=mask)
        self._age[mask] = 0
        for i in np.flatnonzero(mask):
            seed = int(seeds[i])
            k = self._tries.get(seed, self.first_try)
            self._tries[seed] = k + 1
            key = [NOISE_STREAM, seed] if k == 0 else [NOISE_STREAM, seed, k]
            self._noise[i] = np.random.default_rng(key)
            if k == 0:
                self._flow[i] = episode_noise_generator(seed)  # as `vlagym eval` draws it
            else:
                state = np.random.SeedSequence(key).generate_state(1, np.uint64)[0]
                self._flow[i] = torch.Generator().manual_seed(int(state))

    def __call__(self, obs: Any) -> np.ndarray:
        t0 = time.perf_counter()
        with torch.inference_mode():
            batch = self.policy.batch_from_obs(obs)
            flow = self.policy.config.head == "flow"
            action = self.policy.select_action(batch, self._flow if flow else None)
        action = action.float().cpu().numpy().astype(np.float32)
        if self.noise_std > 0:
            scale = self.policy.action_scale.cpu().numpy()[:-1]
            for i, g in enumerate(self._noise):
                if self._age[i] % self.hold == 0:
                    self._held[i] = g.standard_normal(scale.shape)
                action[i, :-1] += (self.noise_std * scale * self._held[i]).astype(np.float32)
            self._age += 1
        self.seconds += time.perf_counter() - t0
        return action


def make_collection_envs(cfg: FilteredBCConfig, env_kwargs: dict[str, Any]) -> gym.vector.VectorEnv:
    """The collection vector env: autoreset disabled (as `run_episodes` needs), a recorder in every sub-env, the
    time limit `cfg.max_episode_steps` (when set)."""
    from vlagym.train.demos import ignore_sigint

    vector_kwargs: dict[str, Any] = {"autoreset_mode": AutoresetMode.DISABLED}
    wrappers: list[Any] = [
        functools.partial(
            _RolloutRecorder,
            hindsight=cfg.hindsight,
            make_room=cfg.hindsight_make_room,
            close_delays=tuple(cfg.close_delays),
            record_failures=cfg.preference_weight > 0,
        )
    ]
    if cfg.vectorization == "async":
        wrappers.append(functools.partial(ignore_sigint, main_pid=os.getpid()))
    if cfg.max_episode_steps is not None:
        env_kwargs = {**env_kwargs, "max_episode_steps": cfg.max_episode_steps}  # gym.make's TimeLimit
    return gym.make_vec(
        cfg.task,
        num_envs=cfg.n_envs,
        vectorization_mode=cfg.vectorization,
        vector_kwargs=vector_kwargs,
        wrappers=wrappers,
        **env_kwargs,
    )


def _without_reopens(
    successes: list[RolloutEpisode], reopens: list[int], max_reopens: int | None
) -> list[RolloutEpisode]:
    """The successes whose gripper re-opened at most `max_reopens` times (all of them when None)."""
    if max_reopens is None:
        return successes
    return [e for e, n in zip(successes, reopens, strict=True) if n <= max_reopens]


def _near_closes(successes: list[RolloutEpisode], max_distance: float | None) -> list[RolloutEpisode]:
    """The successes whose first close was at most `max_distance` from the reach point, and those with no close
    distance (all of them when None)."""
    if max_distance is None:
        return successes
    return [e for e in successes if e.close_distance is None or e.close_distance <= max_distance]


def _kept_successes(successes: list[RolloutEpisode], cfg: FilteredBCConfig) -> tuple[list[RolloutEpisode], int]:
    """The successes `max_gripper_reopens` and `max_close_distance` keep, and how many the second dropped."""
    kept = _without_reopens(successes, [gripper_reopens(e.actions) for e in successes], cfg.max_gripper_reopens)
    near = _near_closes(kept, cfg.max_close_distance)
    return near, len(kept) - len(near)


def round_seeds(cfg: FilteredBCConfig, round_: int) -> list[int]:
    """The reset seeds of round r's episodes: episodes_per_round / group_size fresh states, each `group_size`
    times in a row (state k of round r has seed collect_seed + r * states + k)."""
    states = cfg.episodes_per_round // cfg.group_size
    first = cfg.collect_seed + round_ * states
    return [first + k for k in range(states) for _ in range(cfg.group_size)]


class Collection(NamedTuple):
    """What `collect_round` gathered, each list in seed order."""

    records: list[Any]
    """every episode's `EpisodeRecord` (outcome, length, ...)"""
    successes: list[RolloutEpisode]
    """the successful episodes"""
    states: list[EpisodeStates]
    """every episode's privileged states"""
    hindsight: list[HindsightReplay]
    """each failed episode's hindsight replay (when the recorders run them)"""
    delayed: list[HindsightReplay]
    """each failed episode's delayed-close replays (when the recorders run them)"""
    failures: Sequence[RolloutEpisode] = ()
    """the failed episodes (when the recorders hand them over: `record_failures`)"""


def collect_round(envs: gym.vector.VectorEnv, actor: NoisyVLA, seeds: list[int], progress: bool = False) -> Collection:
    """Run one episode per entry of `seeds` (a seed may repeat: the tries of a group). The tries of one seed
    come in an order of their content, so that the result does not depend on which sub-env finished first."""
    from vlagym.eval.rollout import run_episodes

    wanted = set(seeds)
    episodes: dict[int, list[RolloutEpisode]] = {}
    states: dict[int, list[EpisodeStates]] = {}
    replays: dict[int, list[HindsightReplay]] = {}
    delays: dict[int, list[HindsightReplay]] = {}
    failures: dict[int, list[RolloutEpisode]] = {}

    def keep(info: dict[str, Any], key: str, kind: type, into: dict[int, list[Any]]) -> None:
        if key not in info:
            return
        for i in np.flatnonzero(info.get(f"_{key}", np.ones(len(info[key]), bool))):
            item = info[key][i]
            if isinstance(item, kind) and item.seed in wanted:  # not a throw-away episode
                into.setdefault(item.seed, []).append(item)

    def on_step(info: dict[str, Any]) -> None:
        keep(info, RECORD_KEY, RolloutEpisode, episodes)
        keep(info, STATES_KEY, EpisodeStates, states)
        keep(info, HINDSIGHT_KEY, HindsightReplay, replays)
        keep(info, DELAY_KEY, HindsightReplay, delays)
        keep(info, FAILURE_KEY, RolloutEpisode, failures)

    actor.new_round()  # count the tries of each seed afresh
    records = run_episodes(envs, actor, seeds, on_episode_start=actor.reset, progress=progress, on_step=on_step)
    for tries in (*episodes.values(), *failures.values()):
        tries.sort(key=lambda e: (len(e.actions), e.actions.tobytes()))
    for tries in states.values():
        tries.sort(key=lambda e: (len(e.state), not e.success, e.state.tobytes()))
    successes = [episodes[r.seed].pop(0) for r in records if r.success and episodes.get(r.seed)]
    episode_states = [states[r.seed].pop(0) for r in records if states.get(r.seed)]
    failed = []
    for found in (replays, delays):
        for tries in found.values():
            tries.sort(key=_replay_order)
        failed.append([found[r.seed].pop(0) for r in records if not r.success and found.get(r.seed)])
    lost = [failures[r.seed].pop(0) for r in records if not r.success and failures.get(r.seed)]
    return Collection(records, successes, episode_states, *failed, lost)


def _replay_order(replay: HindsightReplay) -> tuple[Any, ...]:
    e = replay.episode
    return (replay.skipped, replay.steps, replay.close_delay, e is None, b"" if e is None else e.actions.tobytes())


def gripper_reopens(actions: np.ndarray) -> int:
    """How often the gripper command (the last entry of each action: -1 open ... +1 closed) goes from closed
    (>= 0, the threshold of the VLA's binary gripper) to open (< 0) in an episode's executed actions."""
    closed = np.asarray(actions)[:, -1] >= 0
    return int(np.count_nonzero(closed[:-1] & ~closed[1:]))


def success_weights(successes: list[RolloutEpisode], weighting: str, gamma: float = 1.0) -> list[float]:
    """Each successful episode's sampling weight: 1 ("episode", "advantage"), or 1 / (successes of its state)
    ("state"; the hindsight replays of a seed's failures share a unit of their own: their scenes differ from the
    seed's only by where the target stands, and the tries of one state mostly close the gripper near one spot);
    times gamma^T for an episode of T steps (the discounted return of its 0/1 success reward)."""

    def state(e: RolloutEpisode) -> tuple[int, bool]:
        return e.seed, e.target_xy is not None

    counts: dict[tuple[int, bool], int] = {}
    for e in successes:
        counts[state(e)] = counts.get(state(e), 0) + 1
    base = [1.0 / counts[state(e)] if weighting == "state" else 1.0 for e in successes]
    return [w * gamma ** len(e.actions) for w, e in zip(base, successes, strict=True)]


def read_weights(path: str | os.PathLike) -> np.ndarray:
    """The per-episode weights of a rollout file, in its demos' order (1 where none is stored)."""
    with h5py.File(path, "r") as f:
        data = f["data"]
        return np.array([float(data[n].attrs.get(WEIGHT_ATTR, 1.0)) for n in complete_demos(data, Path(path))])


def rollout_path(out: str | os.PathLike, round_: int) -> Path:
    """``OUT/rollouts/round_<r>.hdf5``: the successful collection episodes of round r."""
    return Path(out) / ROLLOUTS / f"round_{round_:04d}.hdf5"


def write_rollouts(
    path: Path,
    episodes: list[RolloutEpisode],
    env_id: str,
    env_kwargs: dict[str, Any],
    weights: list[float] | None = None,
) -> None:
    """The episodes as a demo file (the layout of `vlagym.train.layout`), written to a temporary name and renamed;
    `weights` (one per episode) are stored as each demo's ``weight`` attribute."""
    if weights is not None and len(weights) != len(episodes):
        raise ValueError(f"{len(weights)} weights for {len(episodes)} episodes")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with h5py.File(tmp, "w") as f:
            images = [layout.image_key(c) for c in (episodes[0].images if episodes else [])]
            obs_keys = [*images, "proprio", "state"]  # the order `vlagym demos` writes
            data = write_header(f, env_id, env_kwargs, obs_keys, total=sum(len(e.actions) for e in episodes))
            for k, e in enumerate(episodes):
                demo = DemoEpisode(
                    index=k,
                    seed=e.seed,
                    instruction=e.instruction,
                    task=e.task,
                    images=e.images,
                    proprio=e.proprio,
                    state=e.state,
                    sim_states=e.states,
                    actions=e.actions,
                    rewards=e.rewards,
                    success=True,
                )
                write_demo(data, layout.demo_name(k), demo, "gzip")  # the writer of `vlagym demos`
                if weights is not None:
                    data[layout.demo_name(k)].attrs[WEIGHT_ATTR] = float(weights[k])
                if e.target_xy is not None:  # the seed alone does not remake this scene (its states do)
                    data[layout.demo_name(k)].attrs[HINDSIGHT_ATTR] = np.asarray(e.target_xy, np.float64)
                    data[layout.demo_name(k)].attrs[HINDSIGHT_ROOM_ATTR] = int(e.moved_aside)
                if e.close_delay:  # the seed remakes the scene; the actions hold the delay
                    data[layout.demo_name(k)].attrs[DELAY_ATTR] = int(e.close_delay)
                if e.close_distance is not None:
                    data[layout.demo_name(k)].attrs[CLOSE_DISTANCE_ATTR] = float(e.close_distance)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- training data
class _Mixture:
    """Batches with a fixed share from the demos and the rest from the successes, drawn by one generator.

    Samples are drawn uniformly from each source, or, with `weights` (one per sample of `successes`, in its
    order), each success sample with probability proportional to its weight."""

    def __init__(
        self,
        demos: DemoDataset | None,
        successes: DemoDataset | None,
        demo_fraction: float,
        batch: int,
        weights: np.ndarray | None = None,
    ):
        if demos is None and successes is None:
            raise ValueError("nothing to train on: no demos and no successful episode yet")
        n_demo = round(batch * demo_fraction) if demos is not None else 0
        if successes is None:
            n_demo = batch
        self.parts = [(demos, n_demo, None), (successes, batch - n_demo, None)]
        if weights is not None and successes is not None:
            weights = np.asarray(weights, np.float64)
            if weights.shape != (len(successes),) or not np.all(np.isfinite(weights) & (weights > 0)):
                raise ValueError(
                    f"need one positive finite weight per success sample ({len(successes)}), got shape "
                    f"{weights.shape}, min {weights.min() if weights.size else None}"
                )
            cdf = np.cumsum(weights)
            self.parts[1] = (successes, batch - n_demo, cdf / cdf[-1])

    def batch(self, rng: np.random.Generator) -> dict[str, Any]:
        items = []
        for dataset, n, cdf in self.parts:
            if dataset is None or n == 0:
                continue
            for item in dataset.__getitems__(_draw(rng, len(dataset), n, cdf).tolist()):  # one augmentation pass
                items.append({k: v for k, v in item.items() if k.startswith(IMAGE_KEY) or k in _LOWDIM})
        return default_collate(items)


class _Prefetch:
    """Draws `n` batches in a background thread, at most `depth` ahead of the training loop, so reading and
    augmenting the next batch overlaps the current update. The thread is the only caller of `draw` (and so the
    only user of its generator and datasets), so the batches are exactly those of calling `draw` inline.

    Use as a context manager: leaving it early (an error in the loop) stops the thread; an error in `draw`
    is raised in the loop. ``depth=0`` draws inline, in the loop's thread."""

    def __init__(self, draw: Callable[[], Any] | None, n: int, depth: int = 2):
        self._draw, self._n, self._inline = draw, n, depth == 0
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="filtered-bc-batches", daemon=True)

    def _put(self, item: tuple[Any, BaseException | None]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for _ in range(self._n):
                if not self._put((self._draw(), None)):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the training loop, which raises it
            self._put((None, e))

    def __enter__(self) -> Iterator[Any]:
        if self._inline:
            return (self._draw() for _ in range(self._n))
        self._thread.start()
        return self._batches()

    def _batches(self) -> Iterator[Any]:
        for _ in range(self._n):
            batch, error = self._queue.get()
            if error is not None:
                raise error
            yield batch

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def _draw(rng: np.random.Generator, size: int, n: int, cdf: np.ndarray | None) -> np.ndarray:
    """`n` sample indices in [0, size): uniform, or by the normalised cumulative weights `cdf`."""
    if cdf is None:
        return rng.integers(0, size, n)
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), size - 1)


def _dataset(paths: list[str], policy: VLAPolicy, augment: bool, seed: int) -> DemoDataset | None:
    if not paths:
        return None
    return DemoDataset(
        paths,
        chunk_size=policy.config.chunk_size,
        cameras=list(policy.config.cameras),
        keys=("proprio",),
        augment=ImageAugment() if augment else None,
        seed=seed,
    )


# ---------------------------------------------------------------------------- checkpoints, evaluation
@dataclass
class _Progress:
    round: int = 0
    """rounds completed"""
    updates: int = 0
    env_steps: int = 0
    train_s: float = 0.0
    """wall-clock seconds of collection and training so far, evaluations excluded"""
    success_rounds: list[int] = field(default_factory=list)
    """the rounds that had successes (each has its OUT/rollouts file)"""
    curve: list[dict[str, Any]] = field(default_factory=list)


def _write_checkpoint(
    out: Path,
    policy: VLAPolicy,
    ema: VLAPolicy | None,
    optimizer,
    progress: _Progress,
    extra: dict[str, Any],
    critic: dict[str, Any] | None = None,
) -> Path:
    def fill(folder: Path) -> None:
        acting = ema if ema is not None else policy
        acting.save_pretrained(folder, extra={**extra, "num_updates": progress.updates, "round": progress.round})
        state = {
            "model": policy.state_dict(),
            "ema": ema.state_dict() if ema is not None else None,
            "optimizer": optimizer.state_dict(),
            "round": progress.round,
            "updates": progress.updates,
            "env_steps": progress.env_steps,
            "train_s": progress.train_s,
            "success_rounds": list(progress.success_rounds),
            "bc_sha256": extra["bc_sha256"],
            "critic": critic,
            "rng": rng_state(),
        }
        torch.save(state, folder / STATE_NAME)

    return commit_checkpoint(out, progress.updates, fill)


def _pair_window(cfg: FilteredBCConfig, out: Path, r: int, banks: dict[int, PairBank]) -> list[PairBank]:
    """The pair banks of rounds r - preference_rounds + 1 .. r, read from their files when not in `banks` (a
    resumed run); older banks leave `banks`. Empty without the preference term."""
    if cfg.preference_weight <= 0:
        return []
    first = r - cfg.preference_rounds + 1
    for k in [k for k in banks if k < first]:
        del banks[k]
    for k in range(max(first, 0), r + 1):
        path = pairs_path(rollout_path(out, k))
        if k not in banks and path.is_file():
            banks[k] = read_bank(path)
    return [banks[k] for k in sorted(banks)]


def _advantage_sample_weights(
    cfg: FilteredBCConfig,
    out: Path,
    kept: list[int],
    success_states: dict[int, list[np.ndarray]],
    critic,
    policy: VLAPolicy,
) -> np.ndarray:
    """One weight per sample of the kept rounds' successes (their order in the buffer): exp(A / beta), capped,
    with A from the current critic over the chunk of `n_action_steps` the policy executes from each step."""
    horizon = policy.config.n_action_steps
    advantages = []
    for k in kept:
        if k not in success_states:
            success_states[k] = read_success_states(rollout_path(out, k))
        advantages += [episode_advantages(critic, state, horizon) for state in success_states[k]]
    return advantage_weights(np.concatenate(advantages), cfg.advantage_beta, cfg.advantage_max_weight)


def _evaluate(cfg: FilteredBCConfig, out: Path, checkpoint: Path, progress: _Progress) -> dict[str, Any]:
    from vlagym.eval.evaluate import EvalConfig, evaluate

    with preserved_rng():  # evaluation must not shift the training's random streams
        ecfg = EvalConfig(
            policy=str(checkpoint),
            episodes=cfg.eval_episodes,
            num_envs=cfg.eval_num_envs,
            seed=cfg.eval_seed,
            out=str(out / "eval" / checkpoint.name),
            progress=False,
        )
        summary = next(iter(evaluate(ecfg)["tasks"].values()))
    point = {
        "round": progress.round,
        "updates": progress.updates,
        "env_steps": progress.env_steps,
        "train_minutes": progress.train_s / 60,
        "success_rate": summary["success_rate"],
        "ci95": summary["ci95"],
        "n": summary["n"],
        "checkpoint": str(checkpoint),
    }
    progress.curve = [c for c in progress.curve if c["updates"] != progress.updates] + [point]
    atomic_write_json(out / "eval" / CURVE_NAME, progress.curve)
    return point


# ---------------------------------------------------------------------------- main
def train_filtered_bc(cfg: FilteredBCConfig) -> dict[str, Any]:
    """Run filtered-BC post-training as `cfg` says; returns {"rounds", "updates", "env_steps", "checkpoint",
    "success_rate", "curve"}."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / CONFIG_NAME, cfg.to_dict())
    threads = torch.get_num_threads()
    if cfg.torch_threads is not None:
        torch.set_num_threads(cfg.torch_threads)
    try:
        return _train(cfg, out)
    finally:
        torch.set_num_threads(threads)


def out_of_time(cfg: FilteredBCConfig, train_s: float, round_s: float) -> bool:
    """Whether a round of `round_s` seconds, started after `train_s` seconds of training, would end past
    `cfg.max_minutes` (or they are already spent)."""
    if cfg.max_minutes is None:
        return False
    budget = 60.0 * cfg.max_minutes
    return train_s >= budget or train_s + round_s > budget


def _lr_factor(cfg: FilteredBCConfig, update: int, train_s: float = 0.0) -> float:
    """Multiplier of `cfg.lr` at optimiser step `update`, `train_s` seconds into training (a function of these
    alone, both saved with a checkpoint, so resume needs no other state)."""
    if cfg.lr_schedule == "cosine":
        return lr_factor(update, 0, cfg.rounds * cfg.updates_per_round)
    if cfg.lr_schedule == "cosine-time":
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, train_s / (60.0 * cfg.max_minutes))))
    return 1.0


def _train(cfg: FilteredBCConfig, out: Path) -> dict[str, Any]:  # noqa: C901 - one script
    from torch.utils.tensorboard import SummaryWriter
    from tqdm.auto import tqdm

    seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    meta = read_checkpoint_config(cfg.policy)
    ckpt_extra = meta.get("extra") or {}
    policy = VLAPolicy.from_pretrained(cfg.policy).to(device)
    if cfg.n_action_steps is not None:  # how the policy acts from here on, saved with its checkpoints
        policy.config = dataclasses.replace(policy.config, n_action_steps=cfg.n_action_steps, temporal_ensemble=False)
    if cfg.freeze_encoders:
        policy.vision.requires_grad_(False)
        policy.text.requires_grad_(False)
    pc = policy.config
    if cfg.preference_weight > 0 and (pc.head != "l1" or pc.temporal_ensemble):
        raise ValueError(
            "preference_weight > 0 needs a policy with a mean chunk executed open loop (head 'l1', no temporal "
            f"ensemble); {cfg.policy} has head {pc.head!r}, temporal_ensemble={pc.temporal_ensemble}"
        )
    env_kwargs = {"obs_mode": "rgb", "image_size": pc.image_size, "cameras": list(pc.cameras)}
    env_kwargs.update(ckpt_extra.get("env_kwargs") or {})
    env_kwargs.update(cfg.env_kwargs)
    bc_sha = file_sha256(Path(cfg.policy) / WEIGHTS_NAME)
    extra = {
        "env_id": cfg.task,
        "env_kwargs": env_kwargs,
        "rl_config": cfg.to_dict(),
        "bc_checkpoint": cfg.policy,
        "bc_sha256": bc_sha,
    }
    optimizer = torch.optim.AdamW(param_groups(policy, cfg.weight_decay), lr=cfg.lr)
    ema = copy.deepcopy(policy).eval().requires_grad_(False) if cfg.ema > 0 else None
    acting = ema if ema is not None else policy  # the policy that collects, is saved and is evaluated
    demos = _dataset(cfg.demos, policy, cfg.augment, cfg.seed)

    progress = _Progress()
    critic, critic_opt = None, None  # "advantage" weighting: made on the first round's states
    success_states: dict[int, list[np.ndarray]] = {}  # round -> its successes' privileged states, read once
    banks: dict[int, PairBank] = {}  # round -> its preference pairs (the last preference_rounds rounds')
    last = latest_checkpoint(out) if cfg.resume else None
    if last is not None:
        state = load_state(last)
        if state.get("bc_sha256") != bc_sha:
            raise ValueError(
                f"{last} was post-trained from other BC weights than {cfg.policy} now holds; resume with the original"
            )
        policy.load_state_dict(state["model"], strict=True)
        if ema is not None:
            if state.get("ema") is None:
                raise ValueError(f"{last} has no EMA weights but ema={cfg.ema!r}; resume with the run's settings")
            ema.load_state_dict(state["ema"], strict=True)
        optimizer.load_state_dict(state["optimizer"])
        if cfg.weighting == "advantage" and state.get("critic") is not None:
            critic, critic_opt = make_critic(int(state["critic"]["state_dim"]), cfg.seed)
            critic.load_state_dict(state["critic"]["model"], strict=True)
            critic_opt.load_state_dict(state["critic"]["optimizer"])
        progress = _Progress(
            round=int(state["round"]),
            updates=int(state["updates"]),
            env_steps=int(state["env_steps"]),
            train_s=float(state["train_s"]),
            success_rounds=[int(k) for k in state["success_rounds"]],
        )
        curve_path = out / "eval" / CURVE_NAME
        if curve_path.is_file():
            progress.curve = [c for c in json.loads(curve_path.read_text()) if c["updates"] <= progress.updates]
        set_rng_state(state["rng"])
        logger.info("resumed from %s after round %d", last, progress.round)
    elif cfg.resume:
        logger.info("no checkpoint in %s: starting afresh", checkpoint_dir(out))
    if last is None:
        shutil.rmtree(out / ROLLOUTS, ignore_errors=True)  # a fresh run: an old run's rollouts are not ours

    writer = SummaryWriter(str(out / TB_DIR), purge_step=progress.updates if progress.updates else None)
    bar = tqdm(total=cfg.rounds, initial=progress.round, desc=f"train-rl ({ALGO})", disable=not cfg.progress)
    collect_kwargs = {**env_kwargs, **cfg.collect_env_kwargs}  # the rollout files record the scenes they show
    envs = make_collection_envs(cfg, collect_kwargs)
    actor = NoisyVLA(acting, cfg.noise_std, cfg.noise_hold)
    retry_actor = (
        NoisyVLA(acting, cfg.retry_noise_std, cfg.retry_noise_hold, first_try=cfg.group_size)
        if cfg.retry_noise_std > 0
        else None
    )
    checkpoint, last_eval, round_s = last, None, 0.0
    try:
        while progress.round < cfg.rounds:
            if out_of_time(cfg, progress.train_s, round_s):
                logger.info(
                    "max_minutes=%s: stopping after round %d (%.1f train-min; a round takes %.1f)",
                    cfg.max_minutes,
                    progress.round,
                    progress.train_s / 60,
                    round_s / 60,
                )
                break
            r = progress.round
            t0 = time.perf_counter()
            # collect
            policy.eval()
            seeds = round_seeds(cfg, r)
            policy_s = actor.seconds + (retry_actor.seconds if retry_actor else 0.0)
            records, successes, episode_states, replays, delayed, failures = collect_round(envs, actor, seeds)
            reopens = [gripper_reopens(e.actions) for e in successes]
            close_distances = [e.close_distance for e in successes if e.close_distance is not None]
            successes = _without_reopens(successes, reopens, cfg.max_gripper_reopens)
            first_kept = len(successes)
            successes = _near_closes(successes, cfg.max_close_distance)
            far_closes = {"rollout": first_kept - len(successes)}
            new_pairs = 0
            if cfg.preference_weight > 0:  # each kept success beside each failed try of its state
                bank = build_bank(pair_tries(successes, failures), acting)
                if bank is not None:
                    write_bank(pairs_path(rollout_path(out, r)), bank)
                    banks[r], new_pairs = bank, len(bank)
            retry_records: list[Any] = []
            retry_kept: list[RolloutEpisode] = []
            solved = {e.seed for e in successes}
            unsolved = [s for s in dict.fromkeys(seeds) if s not in solved]
            if retry_actor is not None and unsolved:  # the states with no kept success: wider, held noise
                retry_records, retried, retry_states, retry_replays, retry_delayed, _ = collect_round(
                    envs, retry_actor, [s for s in unsolved for _ in range(cfg.group_size)]
                )
                replays, delayed = replays + retry_replays, delayed + retry_delayed
                retry_kept, far_closes["retry"] = _kept_successes(retried, cfg)
                successes, episode_states = successes + retry_kept, episode_states + retry_states
            policy_s = actor.seconds + (retry_actor.seconds if retry_actor else 0.0) - policy_s
            relabelled = [x.episode for x in replays if x.episode is not None]
            hindsight_kept, far_closes["hindsight"] = _kept_successes(relabelled, cfg)
            put_off = [x.episode for x in delayed if x.episode is not None]
            delayed_kept, far_closes["delay"] = _kept_successes(put_off, cfg)
            successes = successes + hindsight_kept + delayed_kept
            if successes:
                weights = success_weights(successes, cfg.weighting, cfg.gamma)
                write_rollouts(rollout_path(out, r), successes, cfg.task, collect_kwargs, weights)
                progress.success_rounds.append(r)
            if cfg.weighting == "advantage":
                write_states(states_path(out, r), episode_states)
            steps = sum(rec.length for rec in records + retry_records) + sum(x.steps for x in replays + delayed)
            progress.env_steps += steps
            t1 = time.perf_counter()
            # train
            kept = [k for k in progress.success_rounds if cfg.buffer_rounds is None or k > r - cfg.buffer_rounds]
            buffer = _dataset([str(rollout_path(out, k)) for k in kept], policy, cfg.augment, cfg.seed + 1)
            rng = np.random.default_rng([cfg.seed, r])
            for dataset in (demos, buffer):
                if dataset is not None:
                    dataset.set_epoch(r)
            pair_banks = _pair_window(cfg, out, r, banks)
            pref_rng = np.random.default_rng([cfg.seed, r, PREFERENCE_STREAM])
            critic_metrics: dict[str, float] = {}
            if cfg.weighting == "advantage":
                tc = time.perf_counter()
                first = max(0, r - cfg.critic_rounds + 1)
                data = read_states([p for k in range(first, r + 1) if (p := states_path(out, k)).is_file()])
                held_out = None
                if critic is None:
                    critic, critic_opt = make_critic(data["state"].shape[1], cfg.seed)
                else:  # the critic of the rounds before, on this round's episodes (the last rows): how it generalises
                    n_new = sum(len(e.state) for e in episode_states)
                    held_out = brier_scores(critic, {key: value[len(value) - n_new :] for key, value in data.items()})
                critic_rng = np.random.default_rng([cfg.seed, r, CRITIC_STREAM])
                critic_metrics = train_critic(critic, critic_opt, data, cfg.critic_updates, CRITIC_BATCH, critic_rng)
                if held_out is not None:
                    critic_metrics["brier_new"], critic_metrics["brier_new_constant"] = held_out
                initial = [e.state[:1] for e in episode_states]
                critic_metrics["v_initial"] = float(
                    critic.value(np.concatenate(initial), np.zeros(len(initial))).mean()
                )
                critic_metrics["seconds"] = time.perf_counter() - tc
            updates, draw = 0, None
            if demos is None and buffer is None:
                logger.warning("round %d: no demos and no successful episode yet: nothing to train on", r)
            else:
                updates = cfg.updates_per_round
                sample_weights = None  # uniform draws ("episode" weighting, no discount)
                if buffer is not None and (cfg.weighting != "episode" or cfg.gamma != 1.0):
                    episode_weights = np.concatenate([read_weights(rollout_path(out, k)) for k in kept])
                    sample_weights = np.repeat(episode_weights, buffer.episode_lengths)
                if buffer is not None and cfg.weighting == "advantage":
                    advantage = _advantage_sample_weights(cfg, out, kept, success_states, critic, policy)
                    if len(advantage) != len(buffer):
                        raise RuntimeError(f"{len(advantage)} weights for {len(buffer)} success samples")
                    sample_weights = sample_weights * advantage
                    critic_metrics["weight_effective_share"] = effective_share(sample_weights)
                    critic_metrics["weight_capped_share"] = float(np.mean(advantage >= cfg.advantage_max_weight))
                mixture = _Mixture(demos, buffer, cfg.demo_fraction, cfg.batch_size, sample_weights)
                draw = functools.partial(mixture.batch, rng)
            policy.train()
            losses, pref_stats = [], []
            with _Prefetch(draw, updates, depth=2 if cfg.prefetch else 0) as batches:
                for batch in batches:
                    lr = cfg.lr * _lr_factor(cfg, progress.updates, progress.train_s + time.perf_counter() - t0)
                    for group in optimizer.param_groups:
                        group["lr"] = lr
                    bc_loss, _metrics = policy(batch)
                    loss = bc_loss
                    if pair_banks:
                        drawn = draw_pairs(pref_rng, pair_banks, cfg.preference_pairs, cfg.preference_chunks)
                        pref, pref_metrics = preference_loss(
                            policy, pair_batch(policy, pair_banks, drawn), cfg.noise_std, cfg.preference_beta
                        )
                        loss = bc_loss + cfg.preference_weight * pref
                        pref_stats.append((float(pref.detach()), pref_metrics["margin"], pref_metrics["accuracy"]))
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip or math.inf)
                    optimizer.step()
                    if ema is not None:
                        ema_update(ema, policy, cfg.ema)
                    losses.append(float(bc_loss.detach()))
                    progress.updates += 1
            policy.eval()
            t2 = time.perf_counter()
            round_s = t2 - t0
            progress.train_s += round_s
            progress.round += 1
            success_rate = float(np.mean([rec.success for rec in records]))
            writer.add_scalar("rollout/success_rate", success_rate, progress.updates)
            writer.add_scalar(
                "rollout/ep_len_mean", sum(rec.length for rec in records) / len(records), progress.updates
            )
            # how the collection episodes ended (`vlagym eval`'s diagnostics), as shares of the round's episodes
            for outcome, count in outcome_counts(rec.outcome for rec in records).items():
                writer.add_scalar(f"rollout/outcome_{outcome}", count / len(records), progress.updates)
            # successes that let go of the gripper and closed it again (kept or not: see max_gripper_reopens)
            if reopens:
                writer.add_scalar(
                    "rollout/success_reopen_share", float(np.mean(np.array(reopens) > 0)), progress.updates
                )
            writer.add_scalar("rollout/successes_filtered", len(reopens) - first_kept, progress.updates)
            if close_distances:  # how far from the reach point the successes first closed (the expert: < 1 cm)
                writer.add_scalar(
                    "rollout/success_close_distance_p50", float(np.median(close_distances)), progress.updates
                )
            if cfg.max_close_distance is not None:  # successes dropped for a first close far from the reach point
                for source, dropped in far_closes.items():
                    writer.add_scalar(f"far_close/{source}", dropped, progress.updates)
            if retry_actor is not None:  # the second pass, on the states the first left without a kept success
                writer.add_scalar("retry/states", len(retry_records) // cfg.group_size, progress.updates)
                writer.add_scalar("retry/states_solved", len({e.seed for e in retry_kept}), progress.updates)
                writer.add_scalar("retry/successes_kept", len(retry_kept), progress.updates)
                if retry_records:
                    writer.add_scalar(
                        "retry/success_rate", float(np.mean([rec.success for rec in retry_records])), progress.updates
                    )
            if cfg.hindsight:  # the replays of the failed episodes with the target moved to the gripper's close
                ran = [x for x in replays if not x.skipped]
                writer.add_scalar("hindsight/replays", len(ran), progress.updates)
                writer.add_scalar("hindsight/successes_kept", len(hindsight_kept), progress.updates)
                if ran:
                    writer.add_scalar("hindsight/success_rate", len(relabelled) / len(ran), progress.updates)
                if cfg.hindsight_make_room:  # replays that moved another object aside for the target
                    writer.add_scalar("hindsight/made_room", sum(x.moved_aside > 0 for x in ran), progress.updates)
                for why in ("no_close", "at_target", "layout"):
                    writer.add_scalar(
                        f"hindsight/skipped_{why}", sum(x.skipped == why for x in replays), progress.updates
                    )
            if cfg.close_delays:  # the replays of the failed episodes with the first close put off
                ran = [x for x in delayed if not x.skipped]
                writer.add_scalar("delay/replayed", len(ran), progress.updates)
                writer.add_scalar("delay/successes_kept", len(delayed_kept), progress.updates)
                writer.add_scalar("delay/steps", sum(x.steps for x in delayed), progress.updates)
                if ran:
                    writer.add_scalar("delay/success_rate", len(put_off) / len(ran), progress.updates)
                for k in cfg.close_delays:
                    writer.add_scalar(f"delay/by_k/{k}", sum(e.close_delay == k for e in put_off), progress.updates)
                for why in ("no_close", "at_start"):
                    writer.add_scalar(f"delay/skipped_{why}", sum(x.skipped == why for x in delayed), progress.updates)
            writer.add_scalar("buffer/episodes", len(buffer.episode_lengths) if buffer else 0, progress.updates)
            writer.add_scalar("buffer/samples", len(buffer) if buffer else 0, progress.updates)
            if buffer is not None:  # slow successes (e.g. dropped and picked up again) are most samples of a buffer
                writer.add_scalar(
                    "buffer/mean_episode_length", float(np.mean(buffer.episode_lengths)), progress.updates
                )
            if losses:
                writer.add_scalar("train/loss", float(np.mean(losses)), progress.updates)
                writer.add_scalar("train/grad_norm", float(grad_norm), progress.updates)
                writer.add_scalar("train/lr", lr, progress.updates)
            for name, value in critic_metrics.items():
                writer.add_scalar(f"critic/{name}", value, progress.updates)
            if cfg.preference_weight > 0:  # the pairs of a success and a failed try of one state
                writer.add_scalar("preference/pairs_new", new_pairs, progress.updates)
                writer.add_scalar("preference/pairs", sum(len(b) for b in pair_banks), progress.updates)
                if pref_stats:
                    for i, name in enumerate(("loss", "margin", "accuracy")):
                        writer.add_scalar(
                            f"preference/{name}", float(np.mean([x[i] for x in pref_stats])), progress.updates
                        )
            writer.add_scalar("time/collect_s", t1 - t0, progress.updates)
            # the collection split: choosing actions (VLA inference, noise) vs the rest (stepping the sub-envs:
            # simulation, rendering, the recorder; writing the round's file)
            writer.add_scalar("time/collect_policy_s", policy_s, progress.updates)
            writer.add_scalar("time/collect_env_s", t1 - t0 - policy_s, progress.updates)
            writer.add_scalar("time/learn_s", t2 - t1, progress.updates)
            writer.add_scalar("time/env_steps_per_s", steps / (t1 - t0), progress.updates)
            writer.add_scalar("time/env_steps", progress.env_steps, progress.updates)
            logger.info(
                "round %d: %d/%d collection episodes succeeded (%d kept, %d of them hindsight and %d delayed-close "
                "replays; %d of %d retries), %d updates, loss %.4f",
                r,
                sum(rec.success for rec in records),
                len(records),
                len(successes),
                len(hindsight_kept),
                len(delayed_kept),
                sum(rec.success for rec in retry_records),
                len(retry_records),
                len(losses),
                float(np.mean(losses)) if losses else math.nan,
            )
            checkpoint = _write_checkpoint(
                out, policy, ema, optimizer, progress, extra, critic_state(critic, critic_opt)
            )
            done = progress.round >= cfg.rounds or out_of_time(cfg, progress.train_s, round_s)
            if cfg.eval_every > 0 and (done or progress.round % cfg.eval_every == 0):
                last_eval = _evaluate(cfg, out, checkpoint, progress)
                writer.add_scalar("eval/success_rate", last_eval["success_rate"], progress.updates)
                logger.info("round %d: evaluation success rate %.3f", r, last_eval["success_rate"])
            bar.update(1)
        evaluated = any(c["updates"] == progress.updates for c in progress.curve)
        if cfg.eval_every > 0 and checkpoint is not None and not evaluated:  # e.g. resumed after the last round
            last_eval = _evaluate(cfg, out, checkpoint, progress)
    finally:
        envs.close()
        writer.close()
        bar.close()
    if last_eval is None and progress.curve:
        last_eval = progress.curve[-1]
    return {
        "rounds": progress.round,
        "updates": progress.updates,
        "env_steps": progress.env_steps,
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        "success_rate": last_eval["success_rate"] if last_eval else None,
        "curve": progress.curve,
    }
