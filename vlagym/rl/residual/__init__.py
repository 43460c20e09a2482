"""Residual RL on a frozen VLA (Policy Decorator / ResiP / ResFiT style): SAC trains a small bounded residual
that acts every control step on the simulator's privileged state plus the base's action.

    result = train_residual(ResidualConfig(policy="runs/bc/checkpoints/step_2500", out="runs/residual"))
    teacher = load_teacher(result["checkpoint"])      # base + residual, a batched policy for run_episodes
    summary = distill(DistillConfig(teacher=result["checkpoint"], out="runs/distill"))   # a VLA checkpoint

The modules, in the order a run uses them:

    config    `ResidualConfig` (light: imports neither torch nor SB3)
    venv      `ResidualVecEnv`: the SB3 vector env of residual actions around the frozen base
    agent     `ResidualSAC`: SAC with LayerNorm critics, base-policy warm-up, critic-only updates first and
              progressive exploration
    teacher   `ResidualTeacher`, `save_teacher`, `load_teacher`: base + deterministic residual
    loop      `train_residual`: segments ending in exact-resume checkpoints, evaluations, the curve
    distillation  `distill`: the teacher's successes cloned into an image-only VLA (`DistillConfig`)

Only the task's success signal and the simulator's state enter: nothing here imports the scripted experts.
Importing this package loads only `config`: the other names load their module (torch, SB3) on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from vlagym.rl.residual.config import DistillConfig, ResidualConfig

_LAZY = {
    "ResidualVecEnv": "venv",
    "apply_residual": "venv",
    "residual_features": "venv",
    "ResidualSAC": "agent",
    "ResidualSACPolicy": "agent",
    "LayerNormCritic": "agent",
    "ResidualTeacher": "teacher",
    "load_teacher": "teacher",
    "save_teacher": "teacher",
    "train_residual": "loop",
    "evaluate_teacher": "loop",
    "distill": "distillation",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["DistillConfig", "ResidualConfig", *_LAZY]
