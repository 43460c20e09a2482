"""The tasks' Gymnasium ``vector_entry_point``: ``gym.make_vec(id, num_envs=N)`` with no vectorization mode
builds the `PoolVectorEnv` that ``vectorization_mode="pool"`` of `vlagym.envs.pool.make_vec` builds (a worker
per CPU, the main process stepping a slice too; bit-identical to Gymnasium's sync vector env); with one sub-env,
Gymnasium's sync vector env itself.

Each task is registered with ``"vlagym.envs.vector_entry:<task id>"``, a string so that specs stay JSON;
Gymnasium looks the id up as an attribute of this module, which answers with that task's maker. The env's
kwargs pass through, and so do `make_pool`'s ``num_workers``, ``main_steps`` and ``autoreset_mode``;
``vectorization_mode="sync"`` or ``"async"`` still gives Gymnasium's own.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import gymnasium as gym

from vlagym.envs import TASKS


def make_task_pool(env_id: str, num_envs: int, **kwargs: Any) -> Any:
    """`make_pool` with a worker per CPU and the main process stepping a slice, unless the kwargs say otherwise;
    one sub-env is Gymnasium's sync vector env (a pool of one has nothing to spread, and a step less to copy)."""
    from vlagym.envs.pool import make_pool  # here: the module loads neither mujoco nor the pool until used

    if num_envs == 1 and "num_workers" not in kwargs and "main_steps" not in kwargs:
        autoreset = kwargs.pop("autoreset_mode", None)
        vector_kwargs = {} if autoreset is None else {"autoreset_mode": autoreset}
        return gym.make_vec(env_id, 1, vectorization_mode="sync", vector_kwargs=vector_kwargs, **kwargs)
    kwargs.setdefault("num_workers", os.cpu_count() or 1)
    kwargs.setdefault("main_steps", True)
    return make_pool(env_id, num_envs, **kwargs)


def __getattr__(name: str) -> Any:
    if name in TASKS:
        return functools.partial(make_task_pool, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
