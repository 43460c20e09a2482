"""`train_residual`: residual SAC on a frozen VLA, in segments that end in checkpoints, with evaluations.

A run is a sequence of segments of `checkpoint_every` timesteps. Each segment starts every sub-env on a new
episode (`ResidualVecEnv.reset`: the next seeds) and ends in a checkpoint; the episodes still running at its
end are cut there, their last transitions stored as not done (bootstrapped), like a time limit. A checkpoint
holds everything the next segment depends on (the networks and optimisers, the replay buffer, the counters, the
episode seeds and every RNG state), so a resumed run continues exactly as an uninterrupted one would.

    OUT/residual_config.json
    OUT/tb/                             SB3's rollout/train scalars, eval/success_rate, time/* (seconds split
                                        into simulation and rendering, base inference, updates)
    OUT/checkpoints/step_<n>/           teacher.json + actor.safetensors (`load_teacher`), training_state.pt;
                                        the latest also replay.npz (the replay buffer)
    OUT/checkpoints/last.json
    OUT/eval/step_<n>/results.json      the teacher on seeds eval_seed + i, as `vlagym eval` writes them (so
                                        `vlagym compare` pairs it with evaluations); OUT/eval/curve.json
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from tqdm.auto import tqdm

import vlagym
from vlagym.eval.adapters import CheckpointPolicy
from vlagym.eval.evaluate import format_results
from vlagym.eval.layout import RESULTS_JSON, RESULTS_MD
from vlagym.eval.rollout import make_rollout_envs, run_episodes
from vlagym.eval.summary import episode_dict, summarize
from vlagym.io import atomic_write_json, atomic_write_npz, atomic_write_text
from vlagym.rl.residual.agent import ResidualSAC, ResidualSACPolicy
from vlagym.rl.residual.config import ResidualConfig
from vlagym.rl.residual.teacher import ResidualTeacher, base_sha256, load_base, save_teacher
from vlagym.rl.residual.venv import LocalSubEnvs, ResidualVecEnv
from vlagym.train.run import load_state, preserved_rng, resolve_device, rng_state, seed_everything, set_rng_state
from vlagym.train.run_files import (
    CHECKPOINTS_DIR,
    CURVE_NAME,
    EVAL_DIR,
    STATE_NAME,
    TB_DIR,
    commit_checkpoint,
    latest_checkpoint,
)

logger = logging.getLogger(__name__)

CONFIG_NAME = "residual_config.json"
# What a resumed run may change: how long it runs, how it is evaluated and checkpointed, what it shows.
MAY_CHANGE_ON_RESUME = (
    "total_timesteps", "max_minutes", "eval_every", "eval_episodes", "checkpoint_every", "device", "torch_threads",
    "resume", "progress", "vectorization", "out", "address",
)  # fmt: skip
REPLAY_NAME = "replay.npz"
REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


@dataclass
class Run:
    """A run's parts and counters."""

    cfg: ResidualConfig
    venv: ResidualVecEnv
    model: ResidualSAC
    description: dict[str, Any]
    base: CheckpointPolicy
    """the frozen base in this process (the local sub-envs' own; with Ray, the evaluations')"""
    train_s: float = 0.0
    curve: list[dict[str, Any]] = field(default_factory=list)

    @property
    def out(self) -> Path:
        return Path(self.cfg.out)


def env_kwargs(cfg: ResidualConfig, base: CheckpointPolicy) -> dict[str, Any]:
    """The env kwargs of training and evaluation: the checkpoint's, the config's, privileged state, the reward."""
    return {**base.env_kwargs, **cfg.env_kwargs, "obs_mode": "rgb+state", "reward_mode": cfg.reward}


def _build(cfg: ResidualConfig) -> Run:
    seed_everything(cfg.seed)
    execution = None
    if cfg.n_action_steps is not None:
        execution = {"n_action_steps": cfg.n_action_steps, "temporal_ensemble": False}
    base = load_base(cfg.policy, execution)
    kwargs = env_kwargs(cfg, base)
    if cfg.backend == "ray":
        from vlagym.rl.residual.remote import RaySubEnvs

        sub: Any = RaySubEnvs(
            cfg.policy, cfg.task, kwargs, cfg.alpha, cfg.n_envs, cfg.vectorization, cfg.workers, cfg.address, execution
        )
    else:
        sub = LocalSubEnvs(make_rollout_envs(cfg.task, cfg.n_envs, cfg.vectorization, **kwargs), base, cfg.alpha)
    venv = ResidualVecEnv(sub, cfg.residual_gripper, seed=cfg.collect_seed, exploration_seed=cfg.seed)
    model = ResidualSAC(
        ResidualSACPolicy,
        venv,
        learning_rate=cfg.lr,
        buffer_size=cfg.buffer_size,
        learning_starts=cfg.warmup_steps,
        batch_size=cfg.batch_size,
        tau=cfg.tau,
        gamma=cfg.gamma,
        train_freq=1,
        gradient_steps=cfg.gradient_steps,
        ent_coef=f"auto_{cfg.ent_coef_init}",
        n_steps=cfg.n_step,
        policy_kwargs={"net_arch": list(cfg.hidden), "initial_log_std": cfg.initial_log_std},
        critic_warmup_updates=cfg.critic_warmup_updates,
        seed=cfg.seed,
        device=resolve_device(cfg.device),
    )
    model.set_logger(configure(str(Path(cfg.out) / TB_DIR), ["tensorboard"]))
    description = {
        "base": str(Path(cfg.policy).resolve()),
        "base_sha256": base_sha256(cfg.policy),
        "alpha": cfg.alpha,
        "residual_dims": venv.residual_dims,
        "obs_dim": int(venv.observation_space.shape[0]),
        "observation": ["state", "proprio", "base_action"],
        "hidden": list(cfg.hidden),
        "task": cfg.task,
        "env_kwargs": kwargs,
        "chunk_execution": base.chunk_execution(),
    }
    return Run(cfg, venv, model, description, base)


# ---------------------------------------------------------------------------- checkpoints
def _write_checkpoint(run: Run) -> Path:
    model, buffer = run.model, run.model.replay_buffer
    step = int(model.num_timesteps)

    def fill(folder: Path) -> None:
        save_teacher(folder, model.policy.actor, run.description)
        state = {
            "params": model.get_parameters(),
            "log_ent_coef": model.log_ent_coef.detach().clone(),
            "num_timesteps": step,
            "n_updates": int(model._n_updates),
            "episode_num": int(model._episode_num),
            "critic_updates_done": int(model.critic_updates_done),
            "venv": run.venv.state_dict(),
            "rng": rng_state(),
            "train_s": run.train_s,
            "base_sha256": run.description["base_sha256"],
        }
        torch.save(state, folder / STATE_NAME)
        size = buffer.buffer_size if buffer.full else buffer.pos
        arrays = {name: getattr(buffer, name)[:size] for name in REPLAY_FIELDS}
        arrays["position"] = np.array([buffer.pos, int(buffer.full)])
        atomic_write_npz(folder / REPLAY_NAME, arrays)

    folder = commit_checkpoint(run.out, step, fill)
    for old in (run.out / CHECKPOINTS_DIR).glob(f"step_*/{REPLAY_NAME}"):  # only the latest keeps its buffer
        if old.parent != folder:
            old.unlink()
    return folder


def _check_same_run(cfg: ResidualConfig, path: Path) -> None:
    """A resume continues the run it finds: its settings must be the ones that run was started with."""
    stored, mine = json.loads(path.read_text()), cfg.to_dict()
    differ = sorted(k for k in mine if k not in MAY_CHANGE_ON_RESUME and k in stored and stored[k] != mine[k])
    if differ:
        shown = ", ".join(f"{k}={stored.get(k)!r} (now {mine[k]!r})" for k in differ)
        raise ValueError(f"--resume continues the run in {cfg.out}, which was started with other settings: {shown}")


def _resume(run: Run, folder: Path) -> None:
    state = load_state(folder)
    if state["base_sha256"] != run.description["base_sha256"]:
        raise ValueError(f"{folder} trained a residual on other base weights than {run.cfg.policy} now holds")
    model, buffer = run.model, run.model.replay_buffer
    model.set_parameters(state["params"], exact_match=True, device=model.device)
    with torch.no_grad():
        model.log_ent_coef.copy_(state["log_ent_coef"])
    model.num_timesteps, model._n_updates = int(state["num_timesteps"]), int(state["n_updates"])
    model._episode_num, model.critic_updates_done = int(state["episode_num"]), int(state["critic_updates_done"])
    with np.load(folder / REPLAY_NAME) as replay:
        for name in REPLAY_FIELDS:
            getattr(buffer, name)[: len(replay[name])] = replay[name]
        buffer.pos, buffer.full = int(replay["position"][0]), bool(replay["position"][1])
    run.venv.load_state_dict(state["venv"])
    set_rng_state(state["rng"])
    run.train_s = float(state["train_s"])
    path = run.out / EVAL_DIR / CURVE_NAME
    if path.is_file():
        run.curve = [c for c in json.loads(path.read_text()) if c["timesteps"] <= model.num_timesteps]
    logger.info("resumed from %s at timestep %d", folder, model.num_timesteps)


# ---------------------------------------------------------------------------- evaluation
def evaluate_teacher(run: Run, checkpoint: Path) -> dict[str, Any]:
    """The teacher (base + deterministic residual) on seeds eval_seed + i; a point of eval/curve.json."""
    cfg, step = run.cfg, int(run.model.num_timesteps)
    # The training's base, loaded once: the next segment starts by resetting every row of it anyway.
    teacher = ResidualTeacher(run.base, run.model.policy.actor, run.description)
    envs = make_rollout_envs(cfg.task, cfg.n_envs, cfg.vectorization, **run.description["env_kwargs"])
    run.model.policy.set_training_mode(False)
    try:
        with preserved_rng():
            records = run_episodes(
                envs, teacher, [cfg.eval_seed + i for i in range(cfg.eval_episodes)], teacher.reset, progress=False
            )
    finally:
        envs.close()
    summary = summarize(records)
    summary["episodes"] = [episode_dict(r) for r in records]
    # `vlagym eval`'s results.json, so `vlagym compare` pairs the teacher with any evaluation on the same seeds
    results = {
        "policy": f"residual teacher {checkpoint}",
        "seed": cfg.eval_seed,
        "episodes": cfg.eval_episodes,
        "env_kwargs": run.description["env_kwargs"],
        "vlagym_version": vlagym.__version__,
        "tasks": {cfg.task: summary},
    }
    out = run.out / EVAL_DIR / f"step_{step}"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / RESULTS_JSON, results)
    atomic_write_text(out / RESULTS_MD, format_results(results) + "\n")
    point = {
        "timesteps": step,
        "train_minutes": run.train_s / 60,
        "success_rate": summary["success_rate"],
        "ci95": summary["ci95"],
        "n": summary["n"],
        "checkpoint": str(checkpoint),
    }
    run.curve = [c for c in run.curve if c["timesteps"] != step] + [point]
    atomic_write_json(run.out / EVAL_DIR / CURVE_NAME, run.curve)
    run.model.logger.record("eval/success_rate", summary["success_rate"])
    run.model.logger.dump(step)
    return point


# ---------------------------------------------------------------------------- the loop
class _Segment(BaseCallback):
    """Per step: the exploration schedule, the progress bar, the time limit."""

    def __init__(self, run: Run, bar: tqdm, deadline_s: float | None):
        super().__init__()
        self.run, self.bar, self.deadline_s = run, bar, deadline_s
        self.started = time.perf_counter()

    def _on_step(self) -> bool:
        self.run.venv.residual_probability = residual_probability(self.run.cfg, self.model.num_timesteps)
        self.bar.update(self.training_env.num_envs)
        elapsed = self.run.train_s + time.perf_counter() - self.started
        return self.deadline_s is None or elapsed < self.deadline_s


def residual_probability(cfg: ResidualConfig, timesteps: int) -> float:
    """Progressive exploration: the probability that an episode starting now uses the residual."""
    if cfg.exploration_steps == 0:
        return 1.0
    return float(np.clip((timesteps - cfg.warmup_steps) / cfg.exploration_steps, 0.0, 1.0))


def train_residual(cfg: ResidualConfig) -> dict[str, Any]:
    """Train the residual; the last checkpoint, its evaluation and the curve."""
    from vlagym.train.run import torch_threads

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    with torch_threads(cfg.torch_threads):
        run = _build(cfg)
        try:
            return _train(run)
        finally:
            run.venv.close()


def _train(run: Run) -> dict[str, Any]:
    cfg, model = run.cfg, run.model
    folder = latest_checkpoint(run.out, REPLAY_NAME) if cfg.resume else None
    if folder is not None:
        _check_same_run(cfg, run.out / CONFIG_NAME)
        _resume(run, folder)
    atomic_write_json(run.out / CONFIG_NAME, cfg.to_dict())
    deadline = None if cfg.max_minutes is None else 60 * cfg.max_minutes
    bar = tqdm(total=cfg.total_timesteps, initial=model.num_timesteps, desc="timesteps", disable=not cfg.progress)
    checkpoint, point, next_eval = folder, None, _next_multiple(model.num_timesteps, cfg.eval_every)
    with bar:
        while model.num_timesteps < cfg.total_timesteps and (deadline is None or run.train_s < deadline):
            end = min(_next_multiple(model.num_timesteps, cfg.checkpoint_every), cfg.total_timesteps)
            started = time.perf_counter()
            model.policy.set_training_mode(True)
            run.venv.residual_probability = residual_probability(cfg, model.num_timesteps)
            model._last_obs = run.venv.reset()  # every sub-env starts a new episode (module docstring)
            model.learn(
                end - model.num_timesteps,
                callback=_Segment(run, bar, deadline),
                reset_num_timesteps=False,
                progress_bar=False,
            )
            run.train_s += time.perf_counter() - started
            _cut_episodes(model.replay_buffer)
            _log_times(run)
            checkpoint = _write_checkpoint(run)
            if cfg.eval_every and model.num_timesteps >= next_eval:
                point = evaluate_teacher(run, checkpoint)
                next_eval = _next_multiple(model.num_timesteps, cfg.eval_every)
    if checkpoint is None:
        checkpoint = _write_checkpoint(run)
    if point is None or point["timesteps"] != model.num_timesteps:
        point = evaluate_teacher(run, checkpoint)
    return {
        "timesteps": int(model.num_timesteps),
        "checkpoint": str(checkpoint),
        "success_rate": point["success_rate"],
        "train_minutes": run.train_s / 60,
        "timing": {"env_s": run.venv.env_s, "base_s": run.venv.base_s},
    }


def _cut_episodes(buffer: Any) -> None:
    """Mark the last transition of every episode still running as a time-limit truncation: the next segment's
    first transitions (new episodes) must not extend its n-step returns; its target bootstraps as before."""
    last = (buffer.pos - 1) % buffer.buffer_size
    buffer.timeouts[last] = np.logical_or(buffer.timeouts[last], np.logical_not(buffer.dones[last]))
    buffer.dones[last] = True


def _next_multiple(t: int, every: int) -> int:
    return (t // every + 1) * every if every else 2**62


def _log_times(run: Run) -> None:
    log = run.model.logger
    log.record("time/train_s", run.train_s)
    log.record("time/base_inference_s", run.venv.base_s)
    log.record("time/env_s", run.venv.env_s)
    log.dump(int(run.model.num_timesteps))
