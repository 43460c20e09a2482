"""RL with stable-baselines3: PPO post-training of a BC-trained VLA, and PPO/SAC baselines from scratch on state.

    result = train_rl(RLConfig(policy="runs/bc/checkpoints/step_3000", out="runs/rl"))

Post-training (``policy=BC_DIR``): the actor is the VLA (`VLAActorCriticPolicy`), one RL step executes a chunk
of the checkpoint's `n_action_steps` actions, the critic may read the privileged state (``critic_state``).
`VLAPPO` is SB3's PPO with an optional penalty toward the BC policy (``bc_coef``) and a critic warmup
(``critic_warmup_steps``). Truncations are bootstrapped by SB3 (the vector envs put ``TimeLimit.truncated``
and ``terminal_observation`` in the infos; a test checks it). Baselines (``from_scratch=True``): SB3's PPO or
SAC with its ``MlpPolicy`` on ``obs_mode="state"``.

Outputs of a run folder ``OUT``:

    OUT/rl_config.json                       the `RLConfig` (defaults resolved)
    OUT/tb/                                  TensorBoard: SB3's rollout/train scalars, time/* (seconds per
                                             rollout, split into env stepping and policy, and per learning
                                             phase; env steps/s), eval/success_rate
    OUT/checkpoints/step_<n>/, last.json     see `checkpoints`: a self-contained VLA (`vlagym eval` loads it),
                                             SB3's zip and the training state
    OUT/eval/step_<n>/, curve.json           see `evaluation`: the `vlagym eval` protocol, the success curve

The modules, in the order a run uses them:

    config        `RLConfig` and the defaults of each kind of run (light: imports neither torch nor SB3)
    build         the envs and the SB3 model of a config (`build_run`), the reward settings
    vla_ppo       `VLAPPO`: the PPO update with the BC penalty and the critic warmup
    checkpoints   writing checkpoints, resuming from one (`restart_seed`)
    evaluation    success rate of a checkpoint, the curve; `SB3ChunkPolicy` for from-scratch models
    loop          `train_rl`: resume, learn, checkpoint and evaluate

Importing this package loads only `config`: the other names load their module (torch, SB3) on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from vlagym.rl.ppo.config import RLConfig, check_task_and_env_kwargs

# name -> the submodule that defines it, imported on first access (PEP 562)
_LAZY = {
    "Progress": "build",
    "Run": "build",
    "build_run": "build",
    "eval_env_kwargs": "build",
    "train_env_kwargs": "build",
    "VLAPPO": "vla_ppo",
    "SB3_NAME": "checkpoints",
    "restart_seed": "checkpoints",
    "resume_run": "checkpoints",
    "write_checkpoint": "checkpoints",
    "SB3ChunkPolicy": "evaluation",
    "evaluate_run": "evaluation",
    "read_curve": "evaluation",
    "train_rl": "loop",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["RLConfig", "check_task_and_env_kwargs", *_LAZY]
