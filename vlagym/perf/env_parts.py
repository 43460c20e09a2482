"""The env-parts section: what each part of one env step costs, per task, in microseconds per call.

`VLAEnv.step` runs, in order: the action check, the controller (inverse kinematics to joint targets), MuJoCo's
substeps, the divergence check, the task's success predicates (`evaluate`), its reward terms, the info dict and
the observation (the state vector; two camera images with rgb). Each part is called alone, many times in a row, on
the state an expert reaches mid-episode (fingers near the object, contacts present), and timed by the fastest of
several blocks: a stable figure of its own cost, to compare two versions (`--compare`) or to find what to make
cheaper. Calls in a real step run colder (MuJoCo's substeps evict the caches between them), so the env section's
env / physics ratio, not the sum of these, is the cost a rollout pays.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from vlagym.perf.config import CAMERAS, BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.timing import interleaved, passes_note, pinned_to_one_core, summarise, transpose
from vlagym.perf.work import Work

EXPERT_STEPS = 40  # into the episode: the expert's fingers are at the object
BLOCKS = 5  # timed blocks per part; the fastest counts

PARTS = ("check_action", "control", "physics", "divergence", "evaluate", "reward_terms", "info", "obs_state", "obs_rgb")


def _fastest_us(call: Callable[[], Any], calls: int) -> float:
    best = float("inf")
    for _ in range(BLOCKS):
        t = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, time.perf_counter() - t)
    return best / calls * 1e6


def part_costs(state_env: gym.Env, rgb_env: gym.Env, calls: int) -> dict[str, float]:
    """Microseconds per call of every part of `PARTS`, at the state `EXPERT_STEPS` expert steps into seed 0."""
    from vlagym import make_expert

    for env in (state_env, rgb_env):
        env.reset(seed=0)
        expert = make_expert(env)
        for _ in range(EXPERT_STEPS):
            env.step(expert())
    u, r = state_env.unwrapped, rgb_env.unwrapped
    action = np.asarray(make_expert(state_env)(), np.float32)
    checked = u._check_action(action)
    evaluation = u.evaluate()
    terms = u.reward_terms(evaluation)
    saved = u.sim_state()
    physics_calls = max(1, calls // 50)  # 25 substeps a call: far dearer than the rest
    costs = {
        "check_action": _fastest_us(lambda: u._check_action(action), calls),
        "control": _fastest_us(lambda: u.robot.apply_action(checked), calls),
        "physics": _fastest_us(lambda: mujoco.mj_step(u.model, u.data, nstep=u.n_substeps), physics_calls),
    }
    mujoco.mj_setState(u.model, u.data, saved, mujoco.mjtState.mjSTATE_INTEGRATION)
    mujoco.mj_forward(u.model, u.data)
    costs.update(
        divergence=_fastest_us(u._check_unstable, calls),
        evaluate=_fastest_us(u.evaluate, calls),
        reward_terms=_fastest_us(lambda: u.reward_terms(evaluation), calls),
        info=_fastest_us(lambda: u._info(evaluation, terms), calls),
        obs_state=_fastest_us(u._get_obs, calls),
        obs_rgb=_fastest_us(r._get_obs, max(1, calls // 200)),
    )
    return costs


def bench_env_parts(cfg: BenchConfig, work: Work) -> Table:
    """The env-parts table: one row per task of `cfg.task_list`, the process pinned to one core."""
    calls = max(20, cfg.budget.env_steps)
    rows = []
    with pinned_to_one_core(cfg.pin) as pinning:
        for task in cfg.task_list:
            with contextlib.ExitStack() as stack:
                state = gym.make(task, obs_mode="state")
                stack.callback(state.close)
                rgb = gym.make(task, obs_mode="rgb", image_size=cfg.image_size, cameras=CAMERAS)
                stack.callback(rgb.close)
                samples = interleaved({"parts": lambda s=state, r=rgb: part_costs(s, r, calls)}, cfg.repeats, task)
            rows.append({"task": task, **summarise(transpose(samples["parts"]))})
    labels = {name: f"{name.replace('_', ' ')} us" for name in PARTS}
    return Table(
        "env-parts",
        "What each part of an env step costs alone (us per call)",
        ["task"],
        {"task": "task", **labels},
        rows,
        [
            f"{pinning}; each part called alone {calls} times a block (physics and rgb fewer), fastest of "
            f"{BLOCKS} blocks, at the state {EXPERT_STEPS} expert steps into seed 0",
            f"physics: MuJoCo's substeps of one control step; obs rgb: front + wrist at {cfg.image_size} px",
            passes_note(cfg.repeats),
        ],
    )
