"""What the post-training methods share, below all of them (a method never imports another's modules)."""

from __future__ import annotations

import json
from typing import Any

import vlagym


def check_n_action_steps(n_action_steps: int | None, meta: dict[str, Any]) -> None:
    """`ValueError` unless `n_action_steps` is None or fits the chunk of the checkpoint whose config.json is `meta`."""
    chunk = (meta.get("config") or {}).get("chunk_size")
    if isinstance(n_action_steps, int) and chunk is not None and n_action_steps > chunk:
        raise ValueError(f"n_action_steps={n_action_steps} must be <= the checkpoint's chunk_size={chunk}")


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


def read_base_checkpoint(policy: Any, task: str | None, missing: str) -> tuple[str, dict[str, Any], str]:
    """(the checkpoint folder as a str, its config.json, the task: `task`, else the checkpoint's env_id);
    `ValueError` with `missing` when no folder is given, or naming what the checkpoint lacks."""
    if not policy:
        raise ValueError(missing)
    from vlagym.policies.checkpoint import read_checkpoint_config  # torch: only when a config is built

    policy = str(policy)
    meta = read_checkpoint_config(policy)
    if not task:
        task = (meta.get("extra") or {}).get("env_id")
        if not task:
            raise ValueError(f"checkpoint {policy} names no env_id; give the task")
    return policy, meta, task
