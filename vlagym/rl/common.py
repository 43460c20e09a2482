"""What the post-training methods share, below all of them (a method never imports another's modules)."""

from __future__ import annotations

import json
from typing import Any

import vlagym


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
