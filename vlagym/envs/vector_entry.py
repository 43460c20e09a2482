"""The tasks' Gymnasium ``vector_entry_point``: ``gym.make_vec(id, num_envs=N)`` with no vectorization mode
builds the `PoolVectorEnv` that ``vectorization_mode="pool"`` of `vlagym.envs.pool.make_vec` builds (a worker
per CPU, the main process stepping a slice too; bit-identical to Gymnasium's sync vector env); with one sub-env,
Gymnasium's sync vector env itself.

Each task is registered with ``"vlagym.envs.vector_entry:<task id>"``, a string so that specs stay JSON;
Gymnasium looks the id up as an attribute of this module, which answers with that task's maker. The env's
kwargs pass through, and so do the pool's ``num_workers``, ``main_steps``, ``autoreset_mode`` and ``context``;
``vectorization_mode="sync"`` or ``"async"`` still gives Gymnasium's own.
"""

from __future__ import annotations

import functools
from typing import Any

from vlagym.envs import TASKS


def make_task_pool(env_id: str, num_envs: int, **kwargs: Any) -> Any:
    """`vlagym.envs.pool.make_vec`'s "pool" of `env_id`: `POOL_OPTIONS` among the kwargs go to the pool, the
    rest to the env."""
    from vlagym.envs.pool import POOL_OPTIONS, make_vec  # here: registering loads neither mujoco nor the pool

    options = {k: kwargs.pop(k) for k in POOL_OPTIONS if k in kwargs}
    return make_vec(env_id, num_envs, "pool", vector_kwargs=options, **kwargs)


def __getattr__(name: str) -> Any:
    if name in TASKS:
        return functools.partial(make_task_pool, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
