"""`train_rl`: build the run, resume it when asked, let SB3 learn, checkpoint and evaluate on the way and at the end.

`_RunCallback` is where the run meets SB3's loop: a progress bar, throughput split into env stepping and policy
time (TensorBoard ``time/*``), the ``max_minutes`` limit, and the periodic checkpoints and evaluations (before a
rollout starts, so their time counts as neither rollout nor learning).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from vlagym.io import atomic_write_json
from vlagym.rl.ppo.build import Progress, Run, build_run
from vlagym.rl.ppo.checkpoints import SB3_NAME, resume_run, write_checkpoint
from vlagym.rl.ppo.config import RLConfig
from vlagym.rl.ppo.evaluation import evaluate_run
from vlagym.train.run import torch_threads
from vlagym.train.run_files import RL_CONFIG_NAME, checkpoint_dir, latest_checkpoint

logger = logging.getLogger(__name__)


class _RunCallback(BaseCallback):
    """Progress bar, throughput (rollout vs learning seconds, env steps/s), periodic checkpoints and evaluations."""

    def __init__(self, run: Run, progress: Progress, resumed_from: Path | None):
        super().__init__()
        self.run, self.progress = run, progress
        start = run.model.num_timesteps
        self._last_ckpt = self._last_eval = start
        self._bar = None
        self._t_rollout = self._t_rollout_end = None
        self._env_s_at_start = 0.0
        self._t_last = time.perf_counter()
        self._rollout_env_steps = 0
        # Only a resumed run's own checkpoint counts: a fresh run rewrites whatever an old run left in OUT.
        self.last_checkpoint: Path | None = resumed_from
        self.last_eval: dict[str, Any] | None = None

    def _tick(self) -> None:
        now = time.perf_counter()
        self.progress.train_s += now - self._t_last
        self._t_last = now

    def _on_training_start(self) -> None:
        from tqdm.auto import tqdm

        cfg = self.run.cfg
        self._bar = tqdm(
            total=cfg.total_timesteps,
            initial=self.model.num_timesteps,
            desc=f"train-rl ({cfg.algo})",
            disable=not cfg.progress,
            dynamic_ncols=True,
        )

    def _on_step(self) -> bool:
        steps = sum(int(info.get("actions_executed", 1)) for info in self.locals.get("infos", []))
        self.progress.env_steps += steps
        self._rollout_env_steps += steps
        if self._bar is not None:
            self._bar.update(self.training_env.num_envs)
        limit = self.run.cfg.max_minutes
        if limit is not None and self.progress.train_s + time.perf_counter() - self._t_last >= 60.0 * limit:
            logger.info("max_minutes=%s reached at %d timesteps: stopping", limit, self.model.num_timesteps)
            return False  # SB3 ends learn(); the final checkpoint and evaluation follow
        return True

    def _env_seconds(self) -> float:
        return float(getattr(self.training_env, "seconds", 0.0))  # TimedVecEnv, under SB3's own wrappers

    def _on_rollout_start(self) -> None:
        now = time.perf_counter()
        if self._t_rollout_end is not None:
            self.logger.record("time/learn_s", now - self._t_rollout_end)
        self.maybe_save()  # before the rollout clock starts: evaluations are neither rollout nor learning
        self._t_rollout = time.perf_counter()
        self._env_s_at_start = self._env_seconds()
        self._rollout_env_steps = 0

    def _on_rollout_end(self) -> None:
        now = time.perf_counter()
        if self._t_rollout is not None and now > self._t_rollout:
            seconds = now - self._t_rollout
            env_s = self._env_seconds() - self._env_s_at_start
            self.logger.record("time/rollout_s", seconds)
            # the rollout split: stepping the envs (simulation, rendering, wrappers) vs the rest (policy inference,
            # SB3's buffer and callbacks)
            self.logger.record("time/rollout_env_s", env_s)
            self.logger.record("time/rollout_policy_s", seconds - env_s)
            self.logger.record("time/env_steps_per_s", self._rollout_env_steps / seconds)
        self.logger.record("time/env_steps", self.progress.env_steps)
        self._t_rollout_end = now

    def _on_training_end(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def maybe_save(self, final: bool = False) -> None:
        """Checkpoint (and evaluate) when a `checkpoint_every`/`eval_every` boundary was crossed, and at the end."""
        cfg, step = self.run.cfg, self.model.num_timesteps

        def crossed(every: int, last: int) -> bool:
            return every > 0 and step // every > last // every

        due_eval = (
            step != self._last_eval and cfg.eval_every > 0 and (final or crossed(cfg.eval_every, self._last_eval))
        )
        if not (final or due_eval or crossed(cfg.checkpoint_every, self._last_ckpt)):
            return
        self._tick()
        if self.last_checkpoint is None or self.last_checkpoint.name != f"step_{step}":
            self.last_checkpoint = write_checkpoint(self.run, self.progress)
        self._last_ckpt = step
        if due_eval:
            point = evaluate_run(self.run, self.last_checkpoint, self.progress)
            self.logger.record("eval/success_rate", point["success_rate"])
            self._last_eval = step
            self.last_eval = point
            logger.info("timestep %d: success rate %.3f (n=%d)", step, point["success_rate"], point["n"])
        self._t_last = time.perf_counter()  # evaluation time is not training time


# ---------------------------------------------------------------------------- the run
def train_rl(cfg: RLConfig) -> dict[str, Any]:
    """Run RL as `cfg` says; returns {"timesteps", "env_steps", "checkpoint", "success_rate", "curve", "model"}."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / RL_CONFIG_NAME, cfg.to_dict())
    with torch_threads(cfg.torch_threads):
        return _train_rl(cfg, out)


def _train_rl(cfg: RLConfig, out: Path) -> dict[str, Any]:
    run = build_run(cfg)
    model = run.model
    try:
        progress = Progress()
        last = latest_checkpoint(out, SB3_NAME) if cfg.resume else None
        if last is not None:
            progress = resume_run(run, last)
        elif cfg.resume:
            logger.info("no checkpoint in %s: starting afresh", checkpoint_dir(out))
        callback = _RunCallback(run, progress, resumed_from=last)
        remaining = cfg.total_timesteps - model.num_timesteps
        if remaining > 0:
            model.learn(total_timesteps=remaining, callback=callback, reset_num_timesteps=last is None)
        else:
            callback.init_callback(model)
        callback._tick()
        callback.maybe_save(final=True)
        model.logger.dump(model.num_timesteps)
    finally:
        model.env.close()
    rate = callback.last_eval["success_rate"] if callback.last_eval else None
    return {
        "timesteps": model.num_timesteps,
        "env_steps": progress.env_steps,
        "checkpoint": str(callback.last_checkpoint) if callback.last_checkpoint else None,
        "success_rate": rate,
        "curve": progress.curve,
        "model": model,
    }
