"""The rollouts section (`vlagym bench --sections rollouts`, needs `vlagym[ray]`): evaluation episodes/s of the
scripted expert on the first task, state and rgb, run by the local backend (sync x1, async x2) and by 1 and 2
Ray workers (one sub-env each) on a local Ray cluster of this machine's CPUs, side by side; the per-episode
overhead of one Ray worker over local sync x1, and its workers' start-up time (once per run, not timed in the
rates); and the driver's ceiling: empty units handed out per second to one worker per CPU, which bounds the
units/s a cluster can run (docs/ray.md: the unit size)."""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from vlagym.perf.config import BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.timing import interleaved, passes_note, ratios, summarise
from vlagym.perf.work import Work

#: (label, backend, vectorization, sub-envs per worker, Ray workers)
CONFIGS = (
    ("local sync x1", "local", "sync", 1, None),
    ("local async x2", "local", "async", 2, None),
    ("ray 1 worker", "ray", "sync", 1, 1),
    ("ray 2 workers", "ray", "sync", 1, 2),
)
SEED = 900_000


def episodes_per_s(task: str, backend: str, vectorization: str, num_envs: int, workers: int | None, episodes: int,
                   env_kwargs: dict[str, Any], startup: dict[str, list[float]], label: str) -> float:  # fmt: skip
    """Episodes/s of `episodes` expert episodes after a warm-up unit per worker (renderers, first contacts); the
    workers' start-up time goes to `startup[label]`."""
    from vlagym.eval.backends import make_rollouts

    t = time.perf_counter()
    rollouts = make_rollouts(None, "expert", backend, num_envs, vectorization, workers=workers)
    startup.setdefault(label, []).append(time.perf_counter() - t)
    try:
        rollouts.run(task, env_kwargs, range(SEED - 2 * rollouts.parallel, SEED))  # warm-up, other seeds
        t = time.perf_counter()
        rollouts.run(task, env_kwargs, range(SEED, SEED + episodes))
        return episodes / (time.perf_counter() - t)
    finally:
        rollouts.close()


class EmptyUnits:
    """A Ray worker whose units take no time: what is left is the driver's and Ray's cost per unit."""

    def run(self, unit: Any) -> Any:
        return unit


def driver_units_per_s(workers: int, units: int = 1000) -> float:
    """Empty units/s through an `ActorPool` of `workers` (after a warm-up of 100 units)."""
    from vlagym.distributed import ActorPool

    with ActorPool(EmptyUnits, workers=workers) as pool:
        pool.map("run", list(range(100)))
        t = time.perf_counter()
        pool.map("run", list(range(units)))
        return units / (time.perf_counter() - t)


def bench_rollouts(cfg: BenchConfig, work: Work) -> Table:
    """The rollouts table: per observation mode, one row per `CONFIGS` entry."""
    from vlagym.distributed import connect

    ray = connect()  # a cluster this process joined, $RAY_ADDRESS, or a new local one on this machine's CPUs
    task, n = cfg.task_list[0], cfg.budget.rollout_episodes
    obs_modes = {"state": {"obs_mode": "state"}, "rgb": {"obs_mode": "rgb", "image_size": cfg.image_size}}
    startup: dict[str, list[float]] = {}
    rates = interleaved(
        {
            f"{obs} {label}": functools.partial(
                episodes_per_s, task, backend, mode, k, w, n, kw, startup, f"{obs} {label}"
            )
            for obs, kw in obs_modes.items()
            for label, backend, mode, k, w in CONFIGS
        },
        cfg.repeats,
        "rollouts",
    )
    rows = []
    for obs in obs_modes:
        base = rates[f"{obs} local sync x1"]
        for label, *_ in CONFIGS:
            r = rates[f"{obs} {label}"]
            overhead = [1e3 * (1 / a - 1 / b) for a, b in zip(r, base, strict=True)]
            rows.append(
                {
                    "obs": obs,
                    "backend": label,
                    **summarise(
                        {
                            "episodes_per_s": r,
                            "x_sync_1": ratios(r, base),
                            "overhead_ms": overhead,
                            "startup_s": startup[f"{obs} {label}"],
                        }
                    ),
                }
            )
    cpus = int(ray.cluster_resources().get("CPU", 0))
    driver = [driver_units_per_s(max(1, cpus), 50 * n) for _ in range(cfg.repeats)]
    return Table(
        "rollouts",
        f"Rollout backends ({task}, scripted expert, episodes/s)",
        ["obs", "backend"],
        {
            "obs": "obs",
            "backend": "backend",
            "episodes_per_s": "episodes/s",
            "x_sync_1": "x local sync x1",
            "overhead_ms": "ms/episode over sync x1",
            "startup_s": "start-up s",
        },
        rows,
        [
            f"{os.cpu_count()} CPUs here, a Ray cluster of {cpus} CPUs; {n} episodes per measurement after a "
            f"warm-up; rgb at {cfg.image_size} px; start-up (workers loading vlagym) is not in the rates",
            f"the driver's ceiling: {min(driver):.0f}-{max(driver):.0f} empty units/s to {max(1, cpus)} workers "
            "(a unit is 2 episodes by default: a cluster running more units/s than this needs --unit-size)",
            passes_note(cfg.repeats),
        ],
    )
