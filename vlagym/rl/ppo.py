"""RL with stable-baselines3: PPO post-training of a BC-trained VLA, and PPO/SAC baselines from scratch on state.

One readable script (CleanRL style): the config, helpers, then `train_rl`.

Post-training (``policy=BC_DIR``): the actor is the VLA (`VLAActorCriticPolicy`), one RL step executes a chunk
of the checkpoint's `n_action_steps` actions, the critic may read the privileged state (``critic_state``).
`VLAPPO` is SB3's PPO with its update written out once more, for what SB3's update has no hook for: an
optional penalty pulling the action mean toward the BC policy's (``bc_coef``; for two Gaussians of equal std
it is the KL divergence up to the factor 1 / (2 std^2)) and a critic warmup (``critic_warmup_steps``: only the
value head learns until then, the actor is frozen). Truncations are bootstrapped by SB3 (the vector envs put
``TimeLimit.truncated`` and ``terminal_observation`` in the infos; a test checks it).

Baselines (``from_scratch=True``): SB3's PPO or SAC with its ``MlpPolicy`` on ``obs_mode="state"``.

Reward: ``"sparse"`` is 1 on the step of success, which ends the episode. ``"dense"`` is the task's staged
reward (each step in [0, 1], highest in the success state), and its training episodes do NOT end on success
(``terminate_on_success=False``) but run to the time limit: ending them would forfeit the reward of every step
left, so an agent would learn to hover just short of success. Evaluation always uses the task's own episodes.

Outputs of a run folder ``OUT``:

    OUT/rl_config.json                       the `RLConfig` (defaults resolved)
    OUT/tb/                                  TensorBoard: SB3's rollout/train scalars, time/* (seconds per
                                             rollout, split into env stepping and policy, and per learning
                                             phase; env steps/s), eval/success_rate
    OUT/checkpoints/step_<n>/                n = SB3 timesteps (RL steps summed over the sub-envs):
        model.safetensors, config.json       the VLA after RL, self-contained (`vlagym eval --policy` loads it)
        sb3.zip                              SB3's save: policy (VLA, log-std, value head) and optimiser; its
                                             "data" entry holds cloudpickled objects: never `PPO.load` one from
                                             an untrusted source (resume reads only its tensors)
        training_state.pt                    counters, RNG states (loads with weights_only=True)
    OUT/checkpoints/last.json                {"step": n, "path": "step_<n>"}: the latest complete checkpoint
    OUT/eval/step_<n>/                       results.json, results.md (the `vlagym eval` protocol)
    OUT/eval/curve.json                      success rate vs timesteps, env steps and training minutes

Resume (``resume=True``) restores the weights, optimiser, log-std, value head, counters and RNG states and
continues the timestep count. It is not bit-exact: the sub-envs' episodes in progress are not saved, so they
restart (reseeded), and SAC restarts with an empty replay buffer. Resuming never unpickles SB3's saved
objects: the model is rebuilt from the config and only the tensors are loaded.

From-scratch checkpoints hold no VLA (sb3.zip and training_state.pt only), so `vlagym eval` cannot load them;
`train_rl` evaluates them itself with the same protocol (seeds eval_seed + i, Wilson intervals, results.json).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.utils import explained_variance

import vlagym
from vlagym.checks import check_float, check_int
from vlagym.config import Config
from vlagym.io import atomic_write_json, atomic_write_text, file_sha256
from vlagym.policies.checkpoint import WEIGHTS_NAME, read_checkpoint_config
from vlagym.policies.config import VLAConfig
from vlagym.policies.vla import VLAPolicy
from vlagym.rl.envs import VECTORIZATION_MODES, make_rl_env, make_vec_env
from vlagym.rl.sb3_policy import ACTOR_LAYERS, META_KEYS, VLAActorCriticPolicy, check_rl_config
from vlagym.train.run import (
    DEVICES,
    STATE_NAME,
    TB_DIR,
    checkpoint_dir,
    commit_checkpoint,
    latest_checkpoint,
    load_state,
    preserved_rng,
    rng_state,
    seed_everything,
    set_rng_state,
)

logger = logging.getLogger(__name__)

ALGOS = ("ppo", "sac")
REWARDS = ("sparse", "dense")
CONFIG_NAME = "rl_config.json"
SB3_NAME = "sb3.zip"
CURVE_NAME = "curve.json"
RESERVED_ENV_KWARGS = ("obs_mode", "reward_mode", "max_episode_steps", "render_mode")
# Defaults that depend on the kind of run: "post" (post-training the VLA), "ppo"/"sac" (from scratch). The
# post-training ones are the run measured stable on VLA-PickCup-v0 (issue 6): with lr 3e-5 and no KL limit each
# update moved the 70-dimensional chunk Gaussian far (approximate KL 0.2-2) and success fell.
DEFAULT_LR = {"post": 5e-6, "ppo": 3e-4, "sac": 3e-4}
DEFAULT_BATCH = {"post": 128, "ppo": 64, "sac": 256}
DEFAULT_N_STEPS = {"post": 64, "ppo": 32, "sac": 32}
DEFAULT_TARGET_KL = {"post": 0.03, "ppo": None, "sac": None}
POST_TRAINING_DEFAULTS = {"bc_coef": 0.1, "critic_warmup_steps": 4096}
SCRATCH_NEUTRAL = {"bc_coef": 0.0, "critic_warmup_steps": 0, "actor_layers": "all"}


def restart_seed(cfg: RLConfig, num_timesteps: int) -> int:
    """First seed of the sub-envs' episodes after a resume at `num_timesteps` (sub-env i takes it + i): new
    initial states, never the run's first ones nor the evaluation's (stepped past the evaluation seeds)."""
    seed = cfg.seed + 7919 * (num_timesteps + 1)
    while seed < cfg.eval_seed + cfg.eval_episodes and cfg.eval_seed < seed + cfg.n_envs:
        seed += 7919
    return seed


def train_env_kwargs(reward: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """`env_kwargs` for training with `reward`: the reward mode, and for dense rewards episodes that run on past
    success (see the module docstring) unless `env_kwargs` says otherwise."""
    kwargs = {**env_kwargs, "reward_mode": reward}
    if reward == "dense":
        kwargs.setdefault("terminate_on_success", False)
    return kwargs


def eval_env_kwargs(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """`env_kwargs` for evaluation: the `vlagym eval` protocol, so no training-only reward settings."""
    return {k: v for k, v in env_kwargs.items() if k not in ("reward_mode", "terminate_on_success")}


def check_task_and_env_kwargs(task: Any, env_kwargs: Any, reserved: tuple[str, ...], why: str) -> str:
    """The registered task id (a "vlagym:" prefix dropped), after checking that `env_kwargs` is a JSON-serialisable
    dict setting none of the `reserved` keys (`why` says why they are)."""
    task = str(task).removeprefix("vlagym:")
    if task not in vlagym.TASKS:
        raise ValueError(f"unknown task {task!r}; known tasks: {', '.join(sorted(vlagym.TASKS))}")
    if not isinstance(env_kwargs, dict):
        raise ValueError(f"env_kwargs must be a dict, got {env_kwargs!r}")
    clash = sorted(set(env_kwargs) & set(reserved))
    if clash:
        raise ValueError(f"env_kwargs may not set {clash}: {why}")
    try:
        json.dumps(env_kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"env_kwargs must be JSON-serialisable: {e}") from e
    return task


# ---------------------------------------------------------------------------- config
@dataclass
class RLConfig(Config):
    """Options of `train_rl` (and `vlagym train-rl`); saved as ``OUT/rl_config.json`` with defaults resolved."""

    policy: str | None = None
    """BC checkpoint folder to post-train (model.safetensors + config.json); None with `from_scratch`"""
    from_scratch: bool = False
    """a baseline: SB3's MlpPolicy trained from scratch on obs_mode="state" (no checkpoint)"""
    algo: str = "ppo"
    """"ppo" or "sac" (SAC from scratch only)"""
    task: str | None = None
    """registered env id; None: the checkpoint's task (required from scratch)"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra env kwargs (e.g. {"num_cups": 1}); post-training adds them to the checkpoint's"""
    out: str = "runs/rl"
    """run folder: config, TensorBoard logs, checkpoints, evaluations"""
    total_timesteps: int = 20_000
    """SB3 timesteps: RL steps summed over the sub-envs (one RL step executes `chunk_size` actions)"""
    max_minutes: float | None = None
    """also stop once training has run this many minutes (wall clock, evaluations excluded, resumed runs
    included); the final checkpoint and evaluation are still written. None: no time limit"""
    n_envs: int = 4
    """parallel sub-envs"""
    vectorization: str = "sync"
    """"sync" (SB3's DummyVecEnv) or "async" (SubprocVecEnv, one process per sub-env)"""
    reward: str = "dense"
    """"dense" (the task's staged reward; training episodes run on past success) or "sparse" (1 on success)"""
    reward_scale: float | None = None
    """multiplies the reward of each RL step (a chunk's summed reward) in training; None: 1 / chunk_size for a
    dense reward (the mean per-step reward, in [0, 1], so returns stay O(1) for the value head), else 1"""
    max_episode_steps: int | None = None
    """training time limit in control steps; None: the task's registered one (evaluation always uses that)"""
    chunk_size: int | None = None
    """actions per RL step; None: the checkpoint's n_action_steps (post-training, the only value allowed) or 1"""
    n_steps: int | None = None
    """PPO: RL steps per sub-env per rollout; None: 64 post-training, 32 from scratch"""
    batch_size: int | None = None
    """minibatch size; None: 128 post-training, 64 PPO and 256 SAC from scratch"""
    n_epochs: int = 4
    """PPO: passes over each rollout"""
    lr: float | None = None
    """learning rate (post-training: of the actor, VLA and log-std); None: 5e-6 post-training, 3e-4 from scratch"""
    critic_lr: float = 3e-4
    """post-training: learning rate of the value head"""
    log_std_lr: float | None = None
    """post-training: learning rate of the log-std; None: the actor's (`lr`), at which it barely moves"""
    gamma: float = 0.99
    """discount per RL step (per chunk)"""
    gae_lambda: float = 0.95
    """PPO: GAE lambda"""
    clip_range: float = 0.2
    """PPO: ratio clipping"""
    ent_coef: float = 0.0
    """PPO: entropy bonus coefficient (SAC tunes its own)"""
    vf_coef: float = 0.5
    """PPO: value loss coefficient"""
    max_grad_norm: float = 0.5
    """PPO: gradient norm clipping"""
    target_kl: float | None = None
    """PPO: stop an update's epochs early when the approximate KL exceeds 1.5 x this; None: 0.03 post-training,
    never from scratch (a large value turns it off)"""
    log_std_init: float = -2.0
    """post-training: initial log-std of the Gaussian around the BC chunk (normalised units)"""
    actor_layers: str = "all"
    """post-training: "all" (every VLA weight learns) or "head" (encoders and trunk frozen, only the action head
    and log-std learn: updates cost a forward pass of the trunk, not a backward one)"""
    critic_state: bool = True
    """post-training: the value head reads the privileged state (env obs_mode "rgb+state"); else VLA features"""
    critic_hidden: list[int] = field(default_factory=lambda: [256, 256])
    """post-training: hidden widths of the value MLP"""
    bc_coef: float | None = None
    """post-training: weight of the squared distance between the action mean and the BC policy's (0: off);
    None: 0.1 (0 from scratch, the only value allowed there)"""
    critic_warmup_steps: int | None = None
    """post-training: timesteps during which only the value head learns (the actor is frozen); None: 4096 (0 from
    scratch, the only value allowed there)"""
    buffer_size: int = 300_000
    """SAC: replay buffer size"""
    learning_starts: int = 1000
    """SAC: timesteps of random actions before learning starts"""
    seed: int = 0
    """seeds the model init, the sub-envs' first resets and the action noise"""
    eval_every: int = 0
    """evaluate every this many timesteps and at the end (0: never)"""
    eval_episodes: int = 20
    """episodes per evaluation; episode i uses seed eval_seed + i, as `vlagym eval`"""
    eval_num_envs: int = 1
    """parallel sub-envs of the evaluation"""
    eval_seed: int = 100_000
    """first seed of the evaluation episodes (never used by training, whose envs start from `seed`)"""
    checkpoint_every: int = 0
    """write a checkpoint every this many timesteps (0: only at the end; the end always gets one)"""
    device: str = "auto"
    """"auto" (CUDA when available), "cpu" or "cuda\""""
    torch_threads: int | None = None
    """CPU threads of torch in this process (None: torch's default); 1 is often much faster for the small VLA
    on a machine whose cores are busy (contended thread pools spin)"""
    resume: bool = False
    """continue from OUT/checkpoints/last.json when it exists (otherwise start afresh)"""
    progress: bool = True
    """show a progress bar"""

    def __post_init__(self) -> None:
        self._check_kind()
        self._check_env()
        self._check_numbers()
        self._resolve_defaults()
        train = (self.seed, self.seed + self.n_envs)
        evals = (self.eval_seed, self.eval_seed + self.eval_episodes)
        if train[0] < evals[1] and evals[0] < train[1]:
            raise ValueError(
                f"the training envs' first seeds {train[0]}..{train[1] - 1} overlap the evaluation seeds "
                f"{evals[0]}..{evals[1] - 1}: move seed or eval_seed"
            )

    def _check_kind(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {list(ALGOS)}, got {self.algo!r}")
        if not isinstance(self.from_scratch, bool):
            raise ValueError(f"from_scratch must be a bool, got {self.from_scratch!r}")
        if self.from_scratch:
            if self.policy:
                raise ValueError("give either a BC checkpoint (policy) or from_scratch=True, not both")
            if not self.task:
                raise ValueError("from_scratch needs a task")
            for name, neutral in SCRATCH_NEUTRAL.items():
                if getattr(self, name) not in (None, neutral):
                    raise ValueError(f"{name} applies to post-training of a BC checkpoint, not from_scratch runs")
            return
        if not self.policy:
            raise ValueError("post-training needs a BC checkpoint folder (policy); or set from_scratch=True")
        if self.algo != "ppo":
            raise ValueError(
                f"post-training with RLConfig uses PPO; algo={self.algo!r} is for from_scratch baselines "
                "(filtered-BC post-training has its own config: vlagym.rl.filtered_bc.FilteredBCConfig)"
            )
        self.policy = str(self.policy)
        meta = read_checkpoint_config(self.policy)
        check_rl_config(VLAConfig.from_dict(meta["config"]))
        if not self.task:
            self.task = (meta.get("extra") or {}).get("env_id")
            if not self.task:
                raise ValueError(f"checkpoint {self.policy} names no env_id; give the task")

    def _check_env(self) -> None:
        self.task = check_task_and_env_kwargs(
            self.task, self.env_kwargs, RESERVED_ENV_KWARGS, "reward, max_episode_steps and the obs mode are options"
        )
        if self.vectorization not in VECTORIZATION_MODES:
            raise ValueError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {self.vectorization!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {self.reward!r}")
        if self.actor_layers not in ACTOR_LAYERS:
            raise ValueError(f"actor_layers must be one of {list(ACTOR_LAYERS)}, got {self.actor_layers!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {list(DEVICES)}, got {self.device!r}")

    def _check_numbers(self) -> None:
        for name, low in (
            ("total_timesteps", 1),
            ("n_envs", 1),
            ("n_epochs", 1),
            ("buffer_size", 1),
            ("learning_starts", 0),
            ("seed", 0),
            ("eval_every", 0),
            ("eval_episodes", 1),
            ("eval_num_envs", 1),
            ("eval_seed", 0),
            ("checkpoint_every", 0),
        ):
            check_int(name, getattr(self, name), low)
        # options where None means "the default of this kind of run" (or "none")
        optional_ints = (
            ("max_episode_steps", 1),
            ("chunk_size", 1),
            ("torch_threads", 1),
            ("n_steps", 1),
            ("critic_warmup_steps", 0),
            ("batch_size", 2),
        )
        for name, low in optional_ints:
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), low)
        for name in ("max_minutes", "lr", "reward_scale", "target_kl", "log_std_lr"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name), 0.0, low_open=True)
        check_float("critic_lr", self.critic_lr, 0.0, low_open=True)
        check_float("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_float("gae_lambda", self.gae_lambda, 0.0, 1.0)
        check_float("clip_range", self.clip_range, 0.0, low_open=True)
        check_float("max_grad_norm", self.max_grad_norm, 0.0, low_open=True)
        for name in ("ent_coef", "vf_coef", "bc_coef"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name), 0.0)
        check_float("log_std_init", self.log_std_init, -20.0, 2.0)
        self.critic_hidden = list(self.critic_hidden)
        for w in self.critic_hidden:
            check_int("each critic_hidden entry", w, 1)
        for name in ("critic_state", "resume", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")

    def _resolve_defaults(self) -> None:
        kind = self.algo if self.from_scratch else "post"
        if self.lr is None:
            self.lr = DEFAULT_LR[kind]
        if self.batch_size is None:
            self.batch_size = DEFAULT_BATCH[kind]
        if self.n_steps is None:
            self.n_steps = DEFAULT_N_STEPS[kind]
        if self.target_kl is None:
            self.target_kl = DEFAULT_TARGET_KL[kind]
        for name, value in (SCRATCH_NEUTRAL if self.from_scratch else POST_TRAINING_DEFAULTS).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if not self.from_scratch:
            steps = read_checkpoint_config(self.policy)["config"]["n_action_steps"]
            if self.chunk_size not in (None, steps):
                raise ValueError(
                    f"chunk_size={self.chunk_size!r}: post-training executes the checkpoint's n_action_steps={steps} "
                    "actions per RL step (what `vlagym eval` executes); leave chunk_size unset"
                )
            self.chunk_size = steps
        elif self.chunk_size is None:
            self.chunk_size = 1
        if self.reward_scale is None:
            self.reward_scale = 1.0 / self.chunk_size if self.reward == "dense" else 1.0
        if self.algo == "ppo" and self.batch_size > self.n_steps * self.n_envs:
            raise ValueError(
                f"batch_size={self.batch_size} is larger than a rollout "
                f"(n_steps * n_envs = {self.n_steps * self.n_envs})"
            )


# ---------------------------------------------------------------------------- PPO with a BC penalty and critic warmup
class VLAPPO(PPO):
    """SB3's PPO for `VLAActorCriticPolicy`, with an optional penalty toward the BC policy's action mean and a
    critic warmup (see the module docstring). The learning rates of actor and critic are the optimiser's
    param groups' own (constant), not SB3's single schedule."""

    def __init__(self, *args: Any, bc_coef: float = 0.0, critic_warmup_steps: int = 0, **kwargs: Any):
        self.bc_coef = float(bc_coef)
        self.critic_warmup_steps = int(critic_warmup_steps)
        self._reference: VLAPolicy | None = None
        super().__init__(*args, **kwargs)
        if not isinstance(self.policy, VLAActorCriticPolicy):
            raise TypeError(f"VLAPPO trains a VLAActorCriticPolicy, got {type(self.policy).__name__}")

    def set_reference(self, vla: VLAPolicy) -> None:
        """The frozen BC policy the penalty pulls toward (a copy is kept)."""
        ref = copy.deepcopy(vla).to(self.device).eval()
        self._reference = ref.requires_grad_(False)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_reference"]

    def _reference_mean(self, obs: Any, features: torch.Tensor | None = None) -> torch.Tensor:
        """The BC policy's action mean on `obs`; with a frozen trunk (actor_layers="head") the policy's
        `features` are the BC trunk's, so only the BC head runs."""
        if self._reference is None:
            raise RuntimeError("bc_coef > 0 needs the BC policy: call set_reference(vla) before learning")
        if features is not None and self.policy.actor_layers == "head":
            with torch.no_grad():
                return self._reference.head(features)[:, : self.policy.chunk_entries]
        extractor = self.policy.features_extractor
        with torch.no_grad():
            batch = extractor.batch(self.policy.preprocess(obs))
            return self._reference.head(self._reference.features(batch))[:, : self.policy.chunk_entries]

    def train(self) -> None:  # noqa: C901 - the PPO update, one loop
        self.policy.set_training_mode(True)
        clip = self.clip_range(self._current_progress_remaining)
        actor = self.num_timesteps > self.critic_warmup_steps
        logs: dict[str, list[float]] = defaultdict(list)
        stop = False
        for _ in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                ev = self.policy.evaluate(data.observations, data.actions, actor=actor)
                value_loss = F.mse_loss(data.returns, ev.values.flatten())
                loss = self.vf_coef * value_loss
                logs["value_loss"].append(value_loss.item())
                if actor:
                    adv = data.advantages
                    if self.normalize_advantage and len(adv) > 1:
                        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    log_ratio = ev.log_prob - data.old_log_prob
                    ratio = log_ratio.exp()
                    policy_loss = -torch.min(adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                    entropy_loss = -ev.entropy.mean()
                    loss = loss + policy_loss + self.ent_coef * entropy_loss
                    if self.bc_coef > 0:
                        bc_loss = (ev.mean - self._reference_mean(data.observations, ev.features)).pow(2).mean()
                        loss = loss + self.bc_coef * bc_loss
                        logs["bc_loss"].append(bc_loss.item())
                    with torch.no_grad():
                        approx_kl = ((ratio - 1) - log_ratio).mean().item()
                    logs["policy_gradient_loss"].append(policy_loss.item())
                    logs["entropy_loss"].append(entropy_loss.item())
                    logs["clip_fraction"].append(((ratio - 1).abs() > clip).float().mean().item())
                    logs["approx_kl"].append(approx_kl)
                    if self.target_kl is not None and approx_kl > 1.5 * self.target_kl:
                        stop = True  # this minibatch already moved too far: do not step on it
                        break
                self.policy.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
                logs["loss"].append(loss.item())
            self._n_updates += 1
            if stop:
                break
        for name, values in logs.items():
            self.logger.record(f"train/{name}", float(np.mean(values)))
        buf = self.rollout_buffer
        self.logger.record("train/explained_variance", explained_variance(buf.values.flatten(), buf.returns.flatten()))
        self.logger.record("train/std", self.policy.log_std.exp().mean().item())
        self.logger.record("train/actor_frozen", float(not actor))
        self.logger.record("train/actor_lr", self.policy.optimizer.param_groups[0]["lr"])
        self.logger.record("train/critic_lr", self.policy.optimizer.param_groups[1]["lr"])
        self.logger.record("train/clip_range", clip)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")


# ---------------------------------------------------------------------------- run pieces
@dataclass
class _Run:
    """What a run is built from: the model, and for post-training the VLA's description and eval settings."""

    cfg: RLConfig
    model: BaseAlgorithm
    vla_meta: dict[str, Any] | None = None
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    bc_sha256: str | None = None

    @property
    def out(self) -> Path:
        return Path(self.cfg.out)


def _post_training_run(cfg: RLConfig) -> _Run:
    meta = read_checkpoint_config(cfg.policy)
    bc = VLAPolicy.from_pretrained(cfg.policy)
    pc = bc.config
    extra = meta.get("extra") or {}
    base = {"image_size": pc.image_size, "cameras": list(pc.cameras)}
    base.update(extra.get("env_kwargs") or {})
    base.update(cfg.env_kwargs)
    # What `vlagym eval` gives the policy (rgb); training adds the state for the critic and picks the reward.
    eval_kwargs = eval_env_kwargs({**base, "obs_mode": "rgb"})
    train_kwargs = train_env_kwargs(cfg.reward, {**base, "obs_mode": "rgb+state" if cfg.critic_state else "rgb"})
    factory = functools.partial(
        make_rl_env,
        cfg.task,
        train_kwargs,
        cfg.chunk_size,
        cfg.max_episode_steps,
        bc.action_offset.numpy().copy(),
        bc.action_scale.numpy().copy(),
        bc.tokenizer,
        pc.max_tokens,
        pc.binary_gripper,  # act as `vlagym eval` will: the same gripper decode
        cfg.reward_scale,
    )
    env = make_vec_env(factory, cfg.n_envs, cfg.vectorization)
    vla_meta = {k: meta[k] for k in META_KEYS}
    model = VLAPPO(
        VLAActorCriticPolicy,
        env,
        **_ppo_kwargs(cfg),
        bc_coef=cfg.bc_coef,
        critic_warmup_steps=cfg.critic_warmup_steps,
        policy_kwargs={
            "vla_meta": vla_meta,
            "critic_state": cfg.critic_state,
            "critic_hidden": list(cfg.critic_hidden),
            "critic_lr": cfg.critic_lr,
            "log_std_lr": cfg.log_std_lr,
            "log_std_init": cfg.log_std_init,
            "actor_layers": cfg.actor_layers,
        },
    )
    model.policy.vla.load_state_dict(bc.state_dict(), strict=True)
    if cfg.bc_coef > 0:
        model.set_reference(bc)
    sha = file_sha256(Path(cfg.policy) / WEIGHTS_NAME)
    return _Run(cfg, model, vla_meta=vla_meta, eval_env_kwargs=eval_kwargs, bc_sha256=sha)


def _common_kwargs(cfg: RLConfig) -> dict[str, Any]:
    """SB3 constructor arguments every algorithm takes."""
    return dict(learning_rate=cfg.lr, batch_size=cfg.batch_size, gamma=cfg.gamma, seed=cfg.seed, device=cfg.device)


def _ppo_kwargs(cfg: RLConfig) -> dict[str, Any]:
    """SB3 PPO constructor arguments (post-training's VLAPPO and the from-scratch baseline alike)."""
    return _common_kwargs(cfg) | dict(
        n_steps=cfg.n_steps,
        n_epochs=cfg.n_epochs,
        gae_lambda=cfg.gae_lambda,
        clip_range=cfg.clip_range,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        target_kl=cfg.target_kl,
    )


def _scratch_run(cfg: RLConfig) -> _Run:
    kwargs = train_env_kwargs(cfg.reward, {**cfg.env_kwargs, "obs_mode": "state"})
    factory = functools.partial(
        make_rl_env, cfg.task, kwargs, cfg.chunk_size, cfg.max_episode_steps, reward_scale=cfg.reward_scale
    )
    env = make_vec_env(factory, cfg.n_envs, cfg.vectorization)
    if cfg.algo == "sac":
        model = SAC(
            "MlpPolicy", env, buffer_size=cfg.buffer_size, learning_starts=cfg.learning_starts, **_common_kwargs(cfg)
        )
    else:
        model = PPO("MlpPolicy", env, **_ppo_kwargs(cfg))
    return _Run(cfg, model, eval_env_kwargs=eval_env_kwargs({**cfg.env_kwargs, "obs_mode": "state"}))


def build_run(cfg: RLConfig) -> _Run:
    """The model and envs of `cfg` (fresh weights: the BC checkpoint's for post-training), logging to OUT/tb.

    The logger is set here, not by `learn()`: SB3 would otherwise configure its default one, which writes a
    tempdir/SB3-<date> folder.
    """
    seed_everything(cfg.seed)
    run = _scratch_run(cfg) if cfg.from_scratch else _post_training_run(cfg)
    run.model.set_logger(configure(str(Path(cfg.out) / TB_DIR), ["tensorboard"]))
    return run


# ---------------------------------------------------------------------------- checkpoints
@dataclass
class _Progress:
    """Counters a checkpoint carries beyond SB3's tensors."""

    env_steps: int = 0
    """control steps executed (RL steps x the actions each executed)"""
    train_s: float = 0.0
    """wall-clock seconds of training so far, evaluations excluded"""
    curve: list[dict[str, Any]] = field(default_factory=list)


def _policy_extra(run: _Run, step: int) -> dict[str, Any]:
    return {
        "env_id": run.cfg.task,
        "env_kwargs": run.eval_env_kwargs,
        "rl_config": run.cfg.to_dict(),
        "bc_checkpoint": run.cfg.policy,
        "bc_sha256": run.bc_sha256,
        "num_timesteps": step,
    }


def write_checkpoint(run: _Run, progress: _Progress) -> Path:
    """``checkpoints/step_<n>``: the VLA (post-training), SB3's zip and the training state, committed atomically."""
    model, step = run.model, run.model.num_timesteps

    def fill(folder: Path) -> None:
        if run.vla_meta is not None:
            model.policy.vla.save_pretrained(folder, extra=_policy_extra(run, step))
        model.save(folder / SB3_NAME)
        state = {
            "num_timesteps": step,
            "n_updates": int(getattr(model, "_n_updates", 0)),
            "episode_num": int(model._episode_num),
            "env_steps": progress.env_steps,
            "train_s": progress.train_s,
            "bc_sha256": run.bc_sha256,
            "rng": rng_state(),
        }
        torch.save(state, folder / STATE_NAME)

    return commit_checkpoint(run.out, step, fill)


def _resume(run: _Run, folder: Path) -> _Progress:
    state = load_state(folder)
    if state.get("bc_sha256") != run.bc_sha256:
        raise ValueError(
            f"{folder} was post-trained from other BC weights than {run.cfg.policy} now holds; resume with the "
            "original checkpoint"
        )
    model = run.model
    # Tensors only (policy and optimiser state dicts): SB3's pickled objects in the zip are never loaded.
    model.set_parameters(str(folder / SB3_NAME), exact_match=True, device=model.device)
    model.num_timesteps = int(state["num_timesteps"])
    model._n_updates = int(state["n_updates"])
    model._episode_num = int(state["episode_num"])
    set_rng_state(state["rng"])
    if isinstance(model, SAC):
        logger.warning("SAC resumes with an empty replay buffer (it is not saved): expect a dip after %s", folder)
    # The sub-envs restart their episodes: new seeds, so they do not replay the run's first episodes.
    model.env.seed(restart_seed(run.cfg, model.num_timesteps))
    curve = _read_curve(run.out)
    curve = [c for c in curve if c["timesteps"] <= model.num_timesteps]
    logger.info("resumed from %s at timestep %d", folder, model.num_timesteps)
    return _Progress(env_steps=int(state["env_steps"]), train_s=float(state["train_s"]), curve=curve)


def _read_curve(out: Path) -> list[dict[str, Any]]:
    path = out / "eval" / CURVE_NAME
    return json.loads(path.read_text()) if path.is_file() else []


# ---------------------------------------------------------------------------- evaluation
class SB3ChunkPolicy:
    """An SB3 model acting through flat chunks, as a batched `vlagym.eval` policy: each row executes its chunk's
    actions one per call and asks the model (deterministic) for a new chunk when it runs out."""

    def __init__(self, model: BaseAlgorithm, chunk_size: int, action_dim: int):
        self.model, self.k, self.a = model, chunk_size, action_dim
        self._chunk: np.ndarray | None = None
        self._next = np.zeros(0, dtype=np.int64)

    def reset(self, mask: np.ndarray) -> None:
        if self._chunk is not None:
            self._next[np.asarray(mask, bool)] = self.k

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs)
        b = obs.shape[0]
        if self._chunk is None or self._chunk.shape[0] != b:
            self._chunk = np.zeros((b, self.k, self.a), np.float32)
            self._next = np.full(b, self.k, np.int64)
        refill = self._next >= self.k
        if refill.any():
            actions, _ = self.model.predict(obs[refill], deterministic=True)
            self._chunk[refill] = actions.reshape(-1, self.k, self.a)
            self._next[refill] = 0
        action = self._chunk[np.arange(b), self._next]
        self._next += 1
        return action


def _evaluate_scratch(run: _Run, out: Path) -> dict[str, Any]:
    from vlagym.eval.evaluate import episode_dict, format_results, summarize
    from vlagym.eval.rollout import make_rollout_envs, run_episodes

    cfg = run.cfg
    envs = make_rollout_envs(cfg.task, cfg.eval_num_envs, "sync", **run.eval_env_kwargs)
    try:
        policy = SB3ChunkPolicy(run.model, cfg.chunk_size, envs.single_action_space.shape[0])
        seeds = [cfg.eval_seed + i for i in range(cfg.eval_episodes)]
        records = run_episodes(envs, policy, seeds, on_episode_start=policy.reset, progress=False)
    finally:
        envs.close()
    summary = summarize(records)
    summary["episodes"] = [episode_dict(r) for r in records]
    results = {
        "policy": f"{cfg.algo} from scratch, timestep {run.model.num_timesteps}",
        "seed": cfg.eval_seed,
        "episodes": cfg.eval_episodes,
        "env_kwargs": run.eval_env_kwargs,
        "vlagym_version": vlagym.__version__,
        "tasks": {cfg.task: summary},
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "results.md", format_results(results) + "\n")
    return summary


def evaluate_run(run: _Run, checkpoint: Path, progress: _Progress) -> dict[str, Any]:
    """Success rate of the checkpoint with the `vlagym eval` protocol; appended to the curve (eval/curve.json)."""
    from vlagym.eval.evaluate import EvalConfig, evaluate

    cfg, step = run.cfg, run.model.num_timesteps
    out = run.out / "eval" / f"step_{step}"
    with preserved_rng():  # evaluation must not shift the training's random streams
        if run.vla_meta is not None:
            ecfg = EvalConfig(
                policy=str(checkpoint),
                episodes=cfg.eval_episodes,
                num_envs=cfg.eval_num_envs,
                seed=cfg.eval_seed,
                out=str(out),
                progress=False,
            )
            summary = next(iter(evaluate(ecfg)["tasks"].values()))
        else:
            summary = _evaluate_scratch(run, out)
    point = {
        "timesteps": step,
        "env_steps": progress.env_steps,
        "train_minutes": progress.train_s / 60,
        "success_rate": summary["success_rate"],
        "ci95": summary["ci95"],
        "n": summary["n"],
        "checkpoint": str(checkpoint),
    }
    progress.curve = [c for c in progress.curve if c["timesteps"] != step] + [point]
    atomic_write_json(run.out / "eval" / CURVE_NAME, progress.curve)
    return point


# ---------------------------------------------------------------------------- callback
class _RunCallback(BaseCallback):
    """Progress bar, throughput (rollout vs learning seconds, env steps/s), periodic checkpoints and evaluations."""

    def __init__(self, run: _Run, progress: _Progress, resumed_from: Path | None):
        super().__init__()
        self.run, self.progress = run, progress
        start = run.model.num_timesteps
        self._last_ckpt = self._last_eval = start
        self._bar = None
        self._t_rollout = self._t_rollout_end = None
        self._env_s_at_start = 0.0
        self._t_last = time.perf_counter()
        self._rollout_env_steps = 0
        # Only a resumed run's own checkpoint counts: a fresh run rewrites whatever an old run left in OUT.
        self.last_checkpoint: Path | None = resumed_from
        self.last_eval: dict[str, Any] | None = None

    def _tick(self) -> None:
        now = time.perf_counter()
        self.progress.train_s += now - self._t_last
        self._t_last = now

    def _on_training_start(self) -> None:
        from tqdm.auto import tqdm

        cfg = self.run.cfg
        self._bar = tqdm(
            total=cfg.total_timesteps,
            initial=self.model.num_timesteps,
            desc=f"train-rl ({cfg.algo})",
            disable=not cfg.progress,
            dynamic_ncols=True,
        )

    def _on_step(self) -> bool:
        steps = sum(int(info.get("actions_executed", 1)) for info in self.locals.get("infos", []))
        self.progress.env_steps += steps
        self._rollout_env_steps += steps
        if self._bar is not None:
            self._bar.update(self.training_env.num_envs)
        limit = self.run.cfg.max_minutes
        if limit is not None and self.progress.train_s + time.perf_counter() - self._t_last >= 60.0 * limit:
            logger.info("max_minutes=%s reached at %d timesteps: stopping", limit, self.model.num_timesteps)
            return False  # SB3 ends learn(); the final checkpoint and evaluation follow
        return True

    def _env_seconds(self) -> float:
        return float(getattr(self.training_env, "seconds", 0.0))  # TimedVecEnv, under SB3's own wrappers

    def _on_rollout_start(self) -> None:
        now = time.perf_counter()
        if self._t_rollout_end is not None:
            self.logger.record("time/learn_s", now - self._t_rollout_end)
        self.maybe_save()  # before the rollout clock starts: evaluations are neither rollout nor learning
        self._t_rollout = time.perf_counter()
        self._env_s_at_start = self._env_seconds()
        self._rollout_env_steps = 0

    def _on_rollout_end(self) -> None:
        now = time.perf_counter()
        if self._t_rollout is not None and now > self._t_rollout:
            seconds = now - self._t_rollout
            env_s = self._env_seconds() - self._env_s_at_start
            self.logger.record("time/rollout_s", seconds)
            # the rollout split: stepping the envs (simulation, rendering, wrappers) vs the rest (policy inference,
            # SB3's buffer and callbacks)
            self.logger.record("time/rollout_env_s", env_s)
            self.logger.record("time/rollout_policy_s", seconds - env_s)
            self.logger.record("time/env_steps_per_s", self._rollout_env_steps / seconds)
        self.logger.record("time/env_steps", self.progress.env_steps)
        self._t_rollout_end = now

    def _on_training_end(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def maybe_save(self, final: bool = False) -> None:
        """Checkpoint (and evaluate) when a `checkpoint_every`/`eval_every` boundary was crossed, and at the end."""
        cfg, step = self.run.cfg, self.model.num_timesteps

        def crossed(every: int, last: int) -> bool:
            return every > 0 and step // every > last // every

        due_eval = (
            step != self._last_eval and cfg.eval_every > 0 and (final or crossed(cfg.eval_every, self._last_eval))
        )
        if not (final or due_eval or crossed(cfg.checkpoint_every, self._last_ckpt)):
            return
        self._tick()
        if self.last_checkpoint is None or self.last_checkpoint.name != f"step_{step}":
            self.last_checkpoint = write_checkpoint(self.run, self.progress)
        self._last_ckpt = step
        if due_eval:
            point = evaluate_run(self.run, self.last_checkpoint, self.progress)
            self.logger.record("eval/success_rate", point["success_rate"])
            self._last_eval = step
            self.last_eval = point
            logger.info("timestep %d: success rate %.3f (n=%d)", step, point["success_rate"], point["n"])
        self._t_last = time.perf_counter()  # evaluation time is not training time


# ---------------------------------------------------------------------------- main
def train_rl(cfg: RLConfig) -> dict[str, Any]:
    """Run RL as `cfg` says; returns {"timesteps", "env_steps", "checkpoint", "success_rate", "curve", "model"}."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / CONFIG_NAME, cfg.to_dict())
    threads = torch.get_num_threads()
    if cfg.torch_threads is not None:
        torch.set_num_threads(cfg.torch_threads)
    try:
        return _train_rl(cfg, out)
    finally:
        torch.set_num_threads(threads)  # the caller's process-wide setting, as it was


def _train_rl(cfg: RLConfig, out: Path) -> dict[str, Any]:
    run = build_run(cfg)
    model = run.model
    try:
        progress = _Progress()
        last = latest_checkpoint(out, SB3_NAME) if cfg.resume else None
        if last is not None:
            progress = _resume(run, last)
        elif cfg.resume:
            logger.info("no checkpoint in %s: starting afresh", checkpoint_dir(out))
        callback = _RunCallback(run, progress, resumed_from=last)
        remaining = cfg.total_timesteps - model.num_timesteps
        if remaining > 0:
            model.learn(total_timesteps=remaining, callback=callback, reset_num_timesteps=last is None)
        else:
            callback.init_callback(model)
        callback._tick()
        callback.maybe_save(final=True)
        model.logger.dump(model.num_timesteps)
    finally:
        model.env.close()
    rate = callback.last_eval["success_rate"] if callback.last_eval else None
    return {
        "timesteps": model.num_timesteps,
        "env_steps": progress.env_steps,
        "checkpoint": str(callback.last_checkpoint) if callback.last_checkpoint else None,
        "success_rate": rate,
        "curve": progress.curve,
        "model": model,
    }
