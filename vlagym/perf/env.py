"""The env section: per task, env steps/s with state and with rgb observations beside the raw physics limit,
and reset times.

The limit is the same model replaying the very same controls from the same start states with `mujoco.mj_step`
alone (`raw_physics_time`), alternated with the env in rounds so that drifts of the machine's speed hit both
alike; the replay must end every episode in exactly the env's state (`replay_identical`). The process is pinned
to one core meanwhile.
"""

from __future__ import annotations

import contextlib
import copy
import time
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from vlagym.perf.config import CAMERAS, BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.timing import interleaved, passes_note, pinned_to_one_core, summarise, transpose
from vlagym.perf.work import Work


def rollout_with_log(env: gym.Env, steps: int, seed: int) -> tuple[float, list[dict[str, Any]], float]:
    """Random actions for `steps` env steps (resetting at episode end).

    Returns step seconds (resets excluded); per episode the model as that episode had it (tasks move fixtures
    and switch parked objects' contacts per episode), its start state, the controls and the final qpos; and
    seconds per reset.
    """
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, size=(steps, 7)).astype(np.float32)
    u = env.unwrapped
    env.reset(seed=seed)  # warm-up: the first reset creates the renderer
    episodes: list[dict[str, Any]] = []
    step_time = reset_time = 0.0

    def start_episode(episode_seed: int) -> None:
        nonlocal reset_time
        t = time.perf_counter()
        env.reset(seed=episode_seed)
        reset_time += time.perf_counter() - t
        episodes.append({"model": copy.copy(u.model), "state": u.sim_state(), "ctrls": [], "final_qpos": None})

    start_episode(seed)
    for i, a in enumerate(actions):
        t = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(a)
        step_time += time.perf_counter() - t
        episodes[-1]["ctrls"].append(u.data.ctrl.copy())
        episodes[-1]["final_qpos"] = u.data.qpos.copy()
        if terminated or truncated:
            start_episode(seed + i + 1)
    if not episodes[-1]["ctrls"]:
        episodes.pop()
    return step_time, episodes, reset_time / (len(episodes) + 1)


def raw_physics_time(env: gym.Env, episodes: list[dict[str, Any]]) -> tuple[float, bool]:
    """Seconds `mj_step` alone takes for the same models, substeps, controls and start states, and whether
    the replay ended every episode in exactly the env's state (it must)."""
    n_substeps = env.unwrapped.n_substeps
    total, identical = 0.0, True
    for ep in episodes:
        m = ep["model"]
        d = mujoco.MjData(m)
        mujoco.mj_setState(m, d, ep["state"], mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(m, d)
        t = time.perf_counter()
        for c in ep["ctrls"]:
            d.ctrl[:] = c
            mujoco.mj_step(m, d, nstep=n_substeps)
        total += time.perf_counter() - t
        identical &= bool(np.array_equal(d.qpos, ep["final_qpos"]))
    return total, identical


def state_pass(env: gym.Env, steps: int, rounds: int) -> dict[str, Any]:
    """One pass of a state env: `rounds` blocks of `steps` env steps, each followed by its raw-physics replay.

    Alternating in blocks makes drifts of the machine's speed hit both sides alike; the env / physics ratio
    is the median over the blocks. Every block replays the same seeds in every pass: passes do equal work.
    """
    step_total = raw_total = reset_total = 0.0
    block_ratios, identical = [], True
    for r in range(rounds):
        step_s, episodes, reset_s = rollout_with_log(env, steps, seed=1000 * r)
        raw_s, same = raw_physics_time(env, episodes)
        step_total, raw_total, reset_total = step_total + step_s, raw_total + raw_s, reset_total + reset_s
        block_ratios.append(step_s / raw_s)
        identical &= same
    return {
        "state_steps_per_s": steps * rounds / step_total,
        "raw_physics_steps_per_s": steps * rounds / raw_total,
        "env_over_physics": float(np.median(block_ratios)),
        "reset_state_ms": reset_total / rounds * 1e3,
        "replay_identical": identical,
    }


def rgb_pass(env: gym.Env, steps: int) -> dict[str, float]:
    """One pass of an rgb env: steps/s and reset time."""
    step_s, _, reset_s = rollout_with_log(env, steps, seed=0)
    return {"rgb_steps_per_s": steps / step_s, "reset_rgb_ms": reset_s * 1e3}


def bench_task(task: str, steps: int, rounds: int, image_size: int, repeats: int = 1) -> dict[str, Any]:
    """State and rgb rates, the physics limit and reset times of one task: medians of `repeats` interleaved
    passes (a state pass, then an rgb pass, then the next state pass, ...)."""
    per_round, rgb_steps = max(steps // rounds, 10), max(steps // 4, 10)
    with contextlib.ExitStack() as stack:
        state = gym.make(task, obs_mode="state")
        stack.callback(state.close)
        rgb = gym.make(task, obs_mode="rgb", image_size=image_size, cameras=CAMERAS)
        stack.callback(rgb.close)
        samples = interleaved(
            {"state": lambda: state_pass(state, per_round, rounds), "rgb": lambda: rgb_pass(rgb, rgb_steps)},
            repeats,
            f"env {task}",
        )
    metrics = {**transpose(samples["state"]), **transpose(samples["rgb"])}
    identical = all(metrics.pop("replay_identical"))
    return {"task": task, "replay_identical": identical, **summarise(metrics)}


def bench_env(cfg: BenchConfig, work: Work) -> Table:
    """The env table: one row per task of `cfg.task_list`, the process pinned to one core."""
    b = cfg.budget
    with pinned_to_one_core(cfg.pin) as pinning:
        rows = [bench_task(task, b.env_steps, b.env_rounds, cfg.image_size, cfg.repeats) for task in cfg.task_list]
    return Table(
        "env",
        "Env steps/s per task beside the raw physics limit",
        ["task"],
        {
            "task": "task",
            "state_steps_per_s": "state steps/s",
            "raw_physics_steps_per_s": "raw mj_step steps/s",
            "env_over_physics": f"env / physics time (median of {b.env_rounds} rounds)",
            "replay_identical": "replay identical",
            "rgb_steps_per_s": "rgb steps/s",
            "reset_state_ms": "reset ms (state)",
            "reset_rgb_ms": "reset ms (rgb)",
        },
        rows,
        [
            f"{pinning}; rgb: front + wrist cameras at {cfg.image_size}x{cfg.image_size}, random actions",
            "raw mj_step: the same models, substeps, controls and start states, replayed with mujoco.mj_step alone",
            passes_note(cfg.repeats),
        ],
    )
