"""The ppo section: PPO env steps/s of `train_rl` (rollout only, and rollout + update) and where the time goes,
from scratch on state (SB3's MlpPolicy) and post-training the VLA on rgb (from the bc section's checkpoint)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vlagym.perf.config import BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.timing import interleaved, passes_note, summarise, transpose
from vlagym.perf.training import read_scalars
from vlagym.perf.work import Work
from vlagym.train.run_files import TB_DIR


def ppo_rates(tb: Path) -> dict[str, float]:
    """Env steps/s of a `train_rl` run from its TensorBoard log: rollouts alone, and rollouts + updates.

    `train_rl` logs per iteration the rollout seconds and the cumulative env steps, and the update seconds
    at the next rollout's start, so the last iteration's update is left out of the second rate.
    """
    s = read_scalars(tb)
    cumulative = [v for _, v in s["time/env_steps"]]
    env_steps = np.diff([0.0, *cumulative])
    rollout_s = np.array([v for _, v in s["time/rollout_s"]])
    learn_s = np.array([v for _, v in s.get("time/learn_s", [])])
    k = len(learn_s)
    both = env_steps[:k].sum() / (rollout_s[:k].sum() + learn_s.sum()) if k else math.nan
    rates = {"rollout_steps_per_s": float(env_steps.sum() / rollout_s.sum()), "train_steps_per_s": float(both)}
    # Where the time goes (fractions of rollouts + updates): stepping the envs (simulation, rendering,
    # wrappers), the policy in the rollout (inference, SB3's buffer), the updates.
    env_s = np.array([v for _, v in s.get("time/rollout_env_s", [])])
    if k and len(env_s) == len(rollout_s):
        total = rollout_s[:k].sum() + learn_s.sum()
        rates["env_share"] = float(env_s[:k].sum() / total)
        rates["policy_share"] = float((rollout_s[:k].sum() - env_s[:k].sum()) / total)
        rates["learn_share"] = float(learn_s.sum() / total)
    return rates


def bench_ppo(cfg: BenchConfig, work: Work) -> Table:
    """The ppo table: one row from scratch on state, one post-training the VLA on rgb."""
    from vlagym.rl.ppo import RLConfig, train_rl

    b, task = cfg.budget, cfg.task_list[0]
    sizes = {
        "n_envs": b.ppo_envs,
        "n_steps": b.ppo_n_steps,
        "total_timesteps": b.ppo_envs * b.ppo_n_steps * b.ppo_iterations,
        "batch_size": max(1, b.ppo_envs * b.ppo_n_steps // 2),
        "n_epochs": 1 if cfg.quick else 4,
        "device": cfg.device,
        "progress": False,
    }
    runs: dict[str, Callable[[str], Any]] = {
        "from scratch, MlpPolicy, state": lambda out: RLConfig(from_scratch=True, task=task, out=out, **sizes),
        # no critic warmup: every update here trains the actor, as after the warmup of a real run
        "post-training the VLA, rgb": lambda out: RLConfig(
            policy=str(work.bc_checkpoint()), out=out, critic_warmup_steps=0, **sizes
        ),
    }

    def one_run(make: Callable[[str], Any]) -> dict[str, float]:
        rl = make(str(work.new_folder("ppo")))
        return {"env_steps": train_rl(rl)["env_steps"], **ppo_rates(Path(rl.out) / TB_DIR)}

    samples = interleaved({label: functools.partial(one_run, make) for label, make in runs.items()}, cfg.repeats, "ppo")
    rows = []
    for label, passes in samples.items():
        metrics = transpose(passes)
        rows.append({"run": label, "env_steps": metrics.pop("env_steps")[0], **summarise(metrics)})
    return Table(
        "ppo",
        f"PPO env steps/s (train_rl on {task})",
        ["run"],
        {
            "run": "run",
            "env_steps": "env steps",
            "rollout_steps_per_s": "rollout env steps/s",
            "train_steps_per_s": "rollout + update env steps/s",
            "env_share": "time: env steps",
            "policy_share": "time: policy in rollout",
            "learn_share": "time: updates",
        },
        rows,
        [
            f"{b.ppo_envs} sync sub-env(s), {b.ppo_n_steps} RL steps each per rollout, {b.ppo_iterations} "
            f"iterations, {sizes['n_epochs']} epoch(s) per update, on {cfg.device}; post-training executes a "
            "chunk of actions per RL step (env steps count actions)",
            "time shares are fractions of rollouts + updates: env steps (simulation, rendering, wrappers), the "
            "policy while collecting (inference, SB3's buffer), updates",
            passes_note(cfg.repeats) + ", each training anew",
        ],
    )
