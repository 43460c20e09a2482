"""A PPO/SAC run built from its `RLConfig`: the envs, the SB3 model and, for post-training, the BC VLA inside it.

Post-training (``policy=BC_DIR``): the actor is the VLA (`VLAActorCriticPolicy`), one RL step executes a chunk
of the checkpoint's `n_action_steps` actions, and the critic may read the privileged state (``critic_state``:
the training envs then observe ``obs_mode="rgb+state"``). From scratch: SB3's PPO or SAC with its
``MlpPolicy`` on ``obs_mode="state"``.

Reward: ``"sparse"`` is 1 on the step of success, which ends the episode. ``"dense"`` is the task's staged
reward (each step in [0, 1], highest in the success state), and its training episodes do NOT end on success
(``terminate_on_success=False``) but run to the time limit: ending them would forfeit the reward of every step
left, so an agent would learn to hover just short of success. Evaluation always uses the task's own episodes.

`Run` (what a run is built from) and `Progress` (what it has done so far) are what the checkpoint, evaluation
and loop modules pass around.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stable_baselines3 import PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import configure

from vlagym.io import file_sha256
from vlagym.policies.checkpoint import WEIGHTS_NAME, read_checkpoint_config
from vlagym.policies.vla import VLAPolicy
from vlagym.rl.envs import make_rl_env, make_vec_env
from vlagym.rl.ppo.config import RLConfig
from vlagym.rl.ppo.vla_ppo import VLAPPO
from vlagym.rl.sb3_policy import META_KEYS, VLAActorCriticPolicy
from vlagym.train.run import seed_everything
from vlagym.train.run_files import TB_DIR


@dataclass
class Run:
    """What a run is built from: the model, and for post-training the VLA's description and eval settings."""

    cfg: RLConfig
    model: BaseAlgorithm
    vla_meta: dict[str, Any] | None = None
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    bc_sha256: str | None = None

    @property
    def out(self) -> Path:
        return Path(self.cfg.out)


@dataclass
class Progress:
    """Counters a checkpoint carries beyond SB3's tensors."""

    env_steps: int = 0
    """control steps executed (RL steps x the actions each executed)"""
    train_s: float = 0.0
    """wall-clock seconds of training so far, evaluations excluded"""
    curve: list[dict[str, Any]] = field(default_factory=list)
    """the evaluations so far (eval/curve.json), one point per evaluated timestep"""


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


def _post_training_run(cfg: RLConfig) -> Run:
    """`VLAPPO` on the BC checkpoint's VLA, in envs that act and observe as `vlagym eval` does with it."""
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
    return Run(cfg, model, vla_meta=vla_meta, eval_env_kwargs=eval_kwargs, bc_sha256=sha)


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


def _scratch_run(cfg: RLConfig) -> Run:
    """SB3's PPO or SAC with its `MlpPolicy`, on the privileged state."""
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
    return Run(cfg, model, eval_env_kwargs=eval_env_kwargs({**cfg.env_kwargs, "obs_mode": "state"}))


def build_run(cfg: RLConfig) -> Run:
    """The model and envs of `cfg` (fresh weights: the BC checkpoint's for post-training), logging to OUT/tb.

    The logger is set here, not by `learn()`: SB3 would otherwise configure its default one, which writes a
    tempdir/SB3-<date> folder.
    """
    seed_everything(cfg.seed)
    run = _scratch_run(cfg) if cfg.from_scratch else _post_training_run(cfg)
    run.model.set_logger(configure(str(Path(cfg.out) / TB_DIR), ["tensorboard"]))
    return run
