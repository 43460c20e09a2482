"""The vector section: env steps/s of Gymnasium's sync and async vector envs and vlagym's `PoolVectorEnv`
(one worker per CPU; ``pool-main``: the main process steps a slice too, what ``gym.make_vec(id)`` builds), at 2, 8
and 16 sub-envs, state and rgb, against one env stepped alone (with one sub-env ``gym.make_vec`` builds the sync
env itself)."""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np

from vlagym.envs.pool import make_pool
from vlagym.perf.config import BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.timing import interleaved, passes_note, ratios, summarise
from vlagym.perf.work import Work

MODES = ("sync", "async", "pool", "pool-main")


def vector_configs(sizes: tuple[int, ...]) -> list[tuple[str, int]]:
    """(mode, sub-envs) of the rows: one env alone (the baseline), then every mode at every size."""
    return [("sync", 1), *((mode, n) for n in sizes for mode in MODES)]


def vector_steps_per_s(task: str, mode: str, num_envs: int, steps: int, **kwargs: Any) -> float:
    """Env steps/s (all sub-envs together) of random actions after a warm-up (renderers, first contacts)."""
    warmup = min(10, steps // 2)
    if mode.startswith("pool"):
        envs = make_pool(task, num_envs, os.cpu_count(), main_steps=mode == "pool-main", **kwargs)
    else:
        envs = gym.make_vec(task, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    try:
        rng = np.random.default_rng(0)
        actions = rng.uniform(-1, 1, (steps, num_envs, 7)).astype(np.float32)
        envs.reset(seed=0)
        for a in actions[:warmup]:
            envs.step(a)
        t = time.perf_counter()
        for a in actions[warmup:]:
            envs.step(a)
        return (steps - warmup) * num_envs / (time.perf_counter() - t)
    finally:
        envs.close()


def bench_vector(cfg: BenchConfig, work: Work) -> Table:
    """The vector table: per observation mode, one row per `vector_configs` entry, on the first task."""
    task = cfg.task_list[0]
    configs = vector_configs(cfg.budget.vector_sizes)
    obs_modes = {"state": {"obs_mode": "state"}, "rgb": {"obs_mode": "rgb", "image_size": cfg.image_size}}

    def label(obs: str, mode: str, n: int) -> str:
        return f"{obs} {mode} x{n}"

    rates = interleaved(
        {
            # about the same env steps for every configuration: `vector_steps` of them, in steps of n
            label(obs, mode, n): functools.partial(
                vector_steps_per_s, task, mode, n, max(4, cfg.budget.vector_steps // n), **kw
            )
            for obs, kw in obs_modes.items()
            for mode, n in configs
        },
        cfg.repeats,
        "vector",
    )
    rows = []
    for obs in obs_modes:
        base = rates[label(obs, *configs[0])]
        for mode, n in configs:
            r = rates[label(obs, mode, n)]
            rows.append(
                {"obs": obs, "mode": mode, "num_envs": n, **summarise({"steps_per_s": r, "x_sync_1": ratios(r, base)})}
            )
    return Table(
        "vector",
        f"Vector-env scaling ({task}, env steps/s of all sub-envs together)",
        ["obs", "mode", "num_envs"],
        {"obs": "obs", "mode": "mode", "num_envs": "sub-envs", "steps_per_s": "steps/s", "x_sync_1": "x sync x1"},
        rows,
        [f"{os.cpu_count()} CPUs; random actions; rgb at {cfg.image_size} px", passes_note(cfg.repeats)],
    )
