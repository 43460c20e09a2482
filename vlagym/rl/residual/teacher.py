"""The residual teacher: a frozen VLA plus the deterministic residual, as one batched policy; saving and loading it.

    teacher = load_teacher("runs/residual/checkpoints/step_100000")
    envs = make_rollout_envs(teacher.task, 8, "pool", **teacher.env_kwargs)   # obs_mode "rgb+state"
    records = run_episodes(envs, teacher, seeds, on_episode_start=teacher.reset)

A teacher folder holds ``teacher.json`` (the base checkpoint's path and SHA-256, alpha, which action dims the
residual moves, its observation layout, task and env kwargs) and ``actor.safetensors`` (the residual actor's
weights). Loading rebuilds the actor from the description and loads tensors only (nothing is unpickled), after
checking that the base checkpoint still holds the weights the residual was trained on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from safetensors.torch import load_file, save_file

from vlagym.eval.adapters import CheckpointPolicy
from vlagym.io import atomic_write_json, file_sha256
from vlagym.rl.residual.agent import ResidualSACPolicy
from vlagym.rl.residual.venv import apply_residual, residual_features

TEACHER_FORMAT = "vlagym-residual-teacher"
TEACHER_NAME = "teacher.json"
ACTOR_NAME = "actor.safetensors"
WEIGHTS_NAME = "model.safetensors"


def base_sha256(folder: str | os.PathLike) -> str:
    """SHA-256 of a VLA checkpoint's weights file."""
    return file_sha256(Path(folder) / WEIGHTS_NAME)


def make_policy(obs_dim: int, residual_dims: int, hidden: list[int]) -> ResidualSACPolicy:
    """The residual's SB3 policy (actor and critics) for these sizes, on the CPU."""
    return ResidualSACPolicy(
        spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        spaces.Box(-1.0, 1.0, (residual_dims,), np.float32),
        lr_schedule=lambda _: 0.0,
        net_arch=list(hidden),
    )


class ResidualTeacher:
    """Base VLA + ``alpha`` x the residual actor's deterministic output, on ``obs_mode="rgb+state"`` batches."""

    def __init__(self, base: CheckpointPolicy, actor: torch.nn.Module, description: dict[str, Any]):
        self.base, self.actor, self.description = base, actor, description
        self.alpha = float(description["alpha"])
        self.task: str = description["task"]
        self.env_kwargs: dict[str, Any] = dict(description["env_kwargs"])

    def new_round(self) -> None:
        """Nothing to forget: the teacher acts deterministically (the collection's actor protocol)."""

    def reset(self, mask: np.ndarray, seeds: np.ndarray | None = None) -> None:
        self.base.reset(mask, seeds)

    @torch.inference_mode()
    def residual(self, features: np.ndarray) -> np.ndarray:
        """The actor's deterministic residual in [-1, 1] for rows of residual features."""
        obs = torch.as_tensor(features, dtype=torch.float32, device=next(self.actor.parameters()).device)
        return self.actor(obs, deterministic=True).cpu().numpy()

    def __call__(self, obs: dict[str, Any]) -> np.ndarray:
        base_action = np.asarray(self.base(obs), np.float32)
        return apply_residual(base_action, self.residual(residual_features(obs, base_action)), self.alpha)


def load_base(folder: str | os.PathLike, chunk_execution: dict[str, Any] | None = None) -> CheckpointPolicy:
    """The frozen base checkpoint, executing its chunks as `chunk_execution` (``{"n_action_steps": n,
    "temporal_ensemble": bool}``, e.g. a teacher's recorded one) says; None: as the checkpoint itself does."""
    base = CheckpointPolicy(folder)
    if chunk_execution is not None:
        base.execute_chunks(chunk_execution["n_action_steps"], chunk_execution["temporal_ensemble"])
    return base


def save_teacher(folder: Path, actor: torch.nn.Module, description: dict[str, Any]) -> None:
    """Write ``teacher.json`` and ``actor.safetensors`` into `folder`."""
    save_file({k: v.detach().cpu().contiguous() for k, v in actor.state_dict().items()}, str(folder / ACTOR_NAME))
    atomic_write_json(folder / TEACHER_NAME, {"format": TEACHER_FORMAT, "format_version": 1, **description})


def load_teacher(folder: str | os.PathLike, base: str | os.PathLike | None = None) -> ResidualTeacher:
    """The teacher saved in `folder` (a `train_residual` checkpoint); `base` overrides the recorded base path
    (a moved checkpoint), whose weights must still be the recorded ones."""
    folder = Path(folder)
    path = folder / TEACHER_NAME
    if not path.is_file() or not (folder / ACTOR_NAME).is_file():
        raise ValueError(f"{folder} is not a residual teacher: it lacks {TEACHER_NAME} or {ACTOR_NAME}")
    description = json.loads(path.read_text())
    if description.get("format") != TEACHER_FORMAT:
        raise ValueError(f"{path} is not a {TEACHER_FORMAT} file")
    base_folder = Path(base if base is not None else description["base"])
    if base_sha256(base_folder) != description["base_sha256"]:
        raise ValueError(f"the base checkpoint {base_folder} no longer holds the weights this residual was trained on")
    policy = make_policy(description["obs_dim"], description["residual_dims"], description["hidden"])
    policy.actor.load_state_dict(load_file(str(folder / ACTOR_NAME)), strict=True)
    policy.set_training_mode(False)
    # Teachers written before chunk_execution was recorded acted as their checkpoint does: None does the same.
    return ResidualTeacher(load_base(base_folder, description.get("chunk_execution")), policy.actor, description)
