"""Evaluating a PPO/SAC run's checkpoints with the `vlagym eval` protocol, and the success curve of the run.

    OUT/eval/step_<n>/      results.json, results.md (seeds eval_seed + i, Wilson intervals)
    OUT/eval/curve.json     success rate vs timesteps, env steps and training minutes

Post-training checkpoints are VLA checkpoints: `vlagym.eval.evaluate` loads them. From-scratch checkpoints hold
no VLA, so `vlagym eval` cannot load them; their SB3 model acts through `SB3ChunkPolicy` on the same episodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm

import vlagym
from vlagym.io import atomic_write_json, atomic_write_text
from vlagym.rl.ppo.build import Progress, Run
from vlagym.train.run import preserved_rng
from vlagym.train.run_files import CURVE_NAME, EVAL_DIR


def read_curve(out: Path) -> list[dict[str, Any]]:
    """The run's success curve so far (empty before its first evaluation)."""
    path = out / EVAL_DIR / CURVE_NAME
    return json.loads(path.read_text()) if path.is_file() else []


class SB3ChunkPolicy:
    """An SB3 model acting through flat chunks, as a batched `vlagym.eval` policy: each row executes its chunk's
    actions one per call and asks the model (deterministic) for a new chunk when it runs out."""

    def __init__(self, model: BaseAlgorithm, chunk_size: int, action_dim: int):
        self.model, self.k, self.a = model, chunk_size, action_dim
        self._chunk: np.ndarray | None = None
        self._next = np.zeros(0, dtype=np.int64)

    def reset(self, mask: np.ndarray) -> None:
        if self._chunk is not None:
            self._next[np.asarray(mask, bool)] = self.k

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs)
        b = obs.shape[0]
        if self._chunk is None or self._chunk.shape[0] != b:
            self._chunk = np.zeros((b, self.k, self.a), np.float32)
            self._next = np.full(b, self.k, np.int64)
        refill = self._next >= self.k
        if refill.any():
            actions, _ = self.model.predict(obs[refill], deterministic=True)
            self._chunk[refill] = actions.reshape(-1, self.k, self.a)
            self._next[refill] = 0
        action = self._chunk[np.arange(b), self._next]
        self._next += 1
        return action


def _evaluate_scratch(run: Run, out: Path) -> dict[str, Any]:
    from vlagym.eval.evaluate import episode_dict, format_results, summarize
    from vlagym.eval.rollout import make_rollout_envs, run_episodes

    cfg = run.cfg
    envs = make_rollout_envs(cfg.task, cfg.eval_num_envs, "sync", **run.eval_env_kwargs)
    try:
        policy = SB3ChunkPolicy(run.model, cfg.chunk_size, envs.single_action_space.shape[0])
        seeds = [cfg.eval_seed + i for i in range(cfg.eval_episodes)]
        records = run_episodes(envs, policy, seeds, on_episode_start=policy.reset, progress=False)
    finally:
        envs.close()
    summary = summarize(records)
    summary["episodes"] = [episode_dict(r) for r in records]
    results = {
        "policy": f"{cfg.algo} from scratch, timestep {run.model.num_timesteps}",
        "seed": cfg.eval_seed,
        "episodes": cfg.eval_episodes,
        "env_kwargs": run.eval_env_kwargs,
        "vlagym_version": vlagym.__version__,
        "tasks": {cfg.task: summary},
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "results.md", format_results(results) + "\n")
    return summary


def evaluate_run(run: Run, checkpoint: Path, progress: Progress) -> dict[str, Any]:
    """Success rate of the checkpoint with the `vlagym eval` protocol; appended to the curve (eval/curve.json)."""
    from vlagym.eval.evaluate import EvalConfig, evaluate

    cfg, step = run.cfg, run.model.num_timesteps
    out = run.out / EVAL_DIR / f"step_{step}"
    with preserved_rng():  # evaluation must not shift the training's random streams
        if run.vla_meta is not None:
            ecfg = EvalConfig(
                policy=str(checkpoint),
                episodes=cfg.eval_episodes,
                num_envs=cfg.eval_num_envs,
                seed=cfg.eval_seed,
                out=str(out),
                progress=False,
            )
            summary = next(iter(evaluate(ecfg)["tasks"].values()))
        else:
            summary = _evaluate_scratch(run, out)
    point = {
        "timesteps": step,
        "env_steps": progress.env_steps,
        "train_minutes": progress.train_s / 60,
        "success_rate": summary["success_rate"],
        "ci95": summary["ci95"],
        "n": summary["n"],
        "checkpoint": str(checkpoint),
    }
    progress.curve = [c for c in progress.curve if c["timesteps"] != step] + [point]
    atomic_write_json(run.out / EVAL_DIR / CURVE_NAME, progress.curve)
    return point
