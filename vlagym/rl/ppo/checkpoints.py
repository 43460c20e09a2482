"""Checkpoints of a PPO/SAC run, and resuming from one.

    OUT/checkpoints/step_<n>/                n = SB3 timesteps (RL steps summed over the sub-envs):
        model.safetensors, config.json       the VLA after RL, self-contained (`vlagym eval --policy` loads it)
        sb3.zip                              SB3's save: policy (VLA, log-std, value head) and optimiser; its
                                             "data" entry holds cloudpickled objects: never `PPO.load` one from
                                             an untrusted source (resume reads only its tensors)
        training_state.pt                    counters, RNG states (loads with weights_only=True)
    OUT/checkpoints/last.json                {"step": n, "path": "step_<n>"}: the latest complete checkpoint

Resume restores the weights, optimiser, log-std, value head, counters and RNG states and continues the
timestep count. It is not bit-exact: the sub-envs' episodes in progress are not saved, so they restart
(reseeded, `restart_seed`), and SAC restarts with an empty replay buffer. Resuming never unpickles SB3's saved
objects: the model is rebuilt from the config and only the tensors are loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from stable_baselines3 import SAC

from vlagym.rl.ppo.build import Progress, Run
from vlagym.rl.ppo.config import RLConfig
from vlagym.rl.ppo.evaluation import read_curve
from vlagym.train.run import load_state, rng_state, set_rng_state
from vlagym.train.run_files import STATE_NAME, commit_checkpoint

logger = logging.getLogger(__name__)

SB3_NAME = "sb3.zip"


def restart_seed(cfg: RLConfig, num_timesteps: int) -> int:
    """First seed of the sub-envs' episodes after a resume at `num_timesteps` (sub-env i takes it + i): new
    initial states, never the run's first ones nor the evaluation's (stepped past the evaluation seeds)."""
    seed = cfg.seed + 7919 * (num_timesteps + 1)
    while seed < cfg.eval_seed + cfg.eval_episodes and cfg.eval_seed < seed + cfg.n_envs:
        seed += 7919
    return seed


def _policy_extra(run: Run, step: int) -> dict[str, Any]:
    """What the VLA checkpoint's config.json carries: the env `vlagym eval` rebuilds, and where it came from."""
    return {
        "env_id": run.cfg.task,
        "env_kwargs": run.eval_env_kwargs,
        "rl_config": run.cfg.to_dict(),
        "bc_checkpoint": run.cfg.policy,
        "bc_sha256": run.bc_sha256,
        "num_timesteps": step,
    }


def write_checkpoint(run: Run, progress: Progress) -> Path:
    """``checkpoints/step_<n>``: the VLA (post-training), SB3's zip and the training state, committed atomically."""
    model, step = run.model, run.model.num_timesteps

    def fill(folder: Path) -> None:
        if run.vla_meta is not None:
            model.policy.vla.save_pretrained(folder, extra=_policy_extra(run, step))
        model.save(folder / SB3_NAME)
        state = {
            "num_timesteps": step,
            "n_updates": int(getattr(model, "_n_updates", 0)),
            "episode_num": int(model._episode_num),
            "env_steps": progress.env_steps,
            "train_s": progress.train_s,
            "bc_sha256": run.bc_sha256,
            "rng": rng_state(),
        }
        torch.save(state, folder / STATE_NAME)

    return commit_checkpoint(run.out, step, fill)


def resume_run(run: Run, folder: Path) -> Progress:
    """Load checkpoint `folder` into `run` (BC weights must match its record); the counters and curve to go on with."""
    state = load_state(folder)
    if state.get("bc_sha256") != run.bc_sha256:
        raise ValueError(
            f"{folder} was post-trained from other BC weights than {run.cfg.policy} now holds; resume with the "
            "original checkpoint"
        )
    model = run.model
    # Tensors only (policy and optimiser state dicts): SB3's pickled objects in the zip are never loaded.
    model.set_parameters(str(folder / SB3_NAME), exact_match=True, device=model.device)
    model.num_timesteps = int(state["num_timesteps"])
    model._n_updates = int(state["n_updates"])
    model._episode_num = int(state["episode_num"])
    set_rng_state(state["rng"])
    if isinstance(model, SAC):
        logger.warning("SAC resumes with an empty replay buffer (it is not saved): expect a dip after %s", folder)
    # The sub-envs restart their episodes: new seeds, so they do not replay the run's first episodes.
    model.env.seed(restart_seed(run.cfg, model.num_timesteps))
    curve = read_curve(run.out)
    curve = [c for c in curve if c["timesteps"] <= model.num_timesteps]
    logger.info("resumed from %s at timestep %d", folder, model.num_timesteps)
    return Progress(env_steps=int(state["env_steps"]), train_s=float(state["train_s"]), curve=curve)
