"""Success-rate evaluation of a policy (a VLA checkpoint or the scripted expert) on fixed seed lists.

Episode i of every task uses seed `seed + i`, whatever `num_envs` is, so two
policies evaluated with the same `seed` meet identical initial states (a paired
comparison). Per task: success rate with `n` and a Wilson 95% interval,
success at the last step, mean episode length and return, counts of the failure
taxonomy (`vlagym.eval.diagnostics`), and one record per episode (seed, task,
instruction, success, outcome and the predicate flags behind it, the video when
one was recorded). Outputs, all written atomically:

    OUT/eval_config.json   the EvalConfig and the env kwargs actually used (written first)
    OUT/results.json       per-task summaries and per-episode records
    OUT/results.md         the Markdown table of `format_results`
    OUT/videos/*.mp4       optional: the first `videos` episodes of each task

A sampling policy (a flow-matching checkpoint) draws each episode's noise
from a generator seeded from that episode's seed (`episode_noise_generator`),
created when its sub-env resets: re-running an evaluation reproduces every
episode, and an episode's noise does not depend on `num_envs` or on which
episodes share the batch. (What `num_envs` can still change is floating-point
rounding: batched matrix products need not round a row as they would alone.)

Videos re-run those seeds in a separate single env with rendering on (the
vectorised evaluation itself renders nothing it does not need, e.g. the
expert runs on state observations). `reset(seed=...)` fully determines an
episode and the policy's noise comes from the same seed, so the recorded
episode is the evaluated one (with `num_envs=1` exactly; otherwise up to that
rounding).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

import vlagym
from vlagym.eval.diagnostics import OUTCOMES, outcome_counts
from vlagym.eval.expert import wilson_interval
from vlagym.eval.rollout import EpisodeRecord, VectorExpert, make_rollout_envs, run_episodes
from vlagym.io import atomic_write_json, atomic_write_text, temp_path

logger = logging.getLogger(__name__)

EXPERT = "expert"
VECTORIZATION_MODES = ("sync", "async")
CHECKPOINT_FILES = ("model.safetensors", "config.json")
VIDEO_FPS = 20  # the default control rate: videos play in real time
#: Mixed with the episode seed into the seed of the episode's noise generator, so the policy's noise stream is
#: not the environment's (`reset(seed)`) stream; changing it changes every flow checkpoint's evaluation.
NOISE_STREAM = 0x5EED_F10A


class EvalError(ValueError):
    """Bad evaluation input (unknown task, missing checkpoint, invalid option)."""


# ---------------------------------------------------------------------------- policies
class EvalPolicy(Protocol):
    """A batched policy for `run_episodes`: per-sub-env state is cleared by `reset(mask, seeds)`."""

    def reset(self, mask: np.ndarray, seeds: np.ndarray | None = None) -> None:
        """Forget the state of the sub-envs in `mask` (bool, one per sub-env): they start new episodes, sub-env i
        with seed `seeds[i]` (None: unknown)."""

    def __call__(self, obs: Any) -> np.ndarray:
        """Batched observations of the vector env -> actions (B, A)."""


class ExpertPolicy:
    """The scripted experts of a sync vector env's sub-envs (they read privileged simulator state)."""

    def __init__(self, envs: gym.vector.VectorEnv):
        if not hasattr(envs, "envs"):
            raise EvalError("the expert needs vectorization='sync' (it reads each sub-env's simulator state)")
        self._expert = VectorExpert(envs)

    def reset(self, mask: np.ndarray, seeds: np.ndarray | None = None) -> None:
        self._expert.reset(mask)  # deterministic: the seeds are not needed

    def __call__(self, obs: Any) -> np.ndarray:
        return self._expert(obs)


def read_checkpoint_config(folder: str | os.PathLike) -> dict[str, Any]:
    """The `config.json` of a checkpoint folder; `EvalError` if `folder` is not a checkpoint."""
    path = Path(folder)
    if not path.exists():
        raise EvalError(f"checkpoint folder {str(folder)!r} does not exist")
    if not path.is_dir():
        raise EvalError(f"{str(folder)!r} is not a folder; --policy takes a checkpoint folder or 'expert'")
    missing = [name for name in CHECKPOINT_FILES if not (path / name).is_file()]
    if missing:
        raise EvalError(f"{str(folder)!r} is not a checkpoint folder: missing {', '.join(missing)}")
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise EvalError(f"cannot read {str(path / 'config.json')!r}: {e}") from e
    if not isinstance(config, dict):
        raise EvalError(f"{str(path / 'config.json')!r} is not a JSON object")
    return config


def episode_noise_generator(seed: int):
    """A CPU `torch.Generator` for the policy noise of the episode with env seed `seed`.

    Seeded from (`NOISE_STREAM`, seed) through numpy's `SeedSequence`, which is stable across platforms and
    Python runs (unlike `hash`). On CPU, so the draws are the same whatever device the model runs on.
    """
    import torch

    state = np.random.SeedSequence([NOISE_STREAM, int(seed)]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


class CheckpointPolicy:
    """A `VLAPolicy` checkpoint as an `EvalPolicy`.

    `reset(mask)` restarts the action queues of the rows in `mask` only, when the
    policy's `reset` takes a mask; otherwise it clears the whole queue, so the
    other sub-envs replan one chunk early and outcomes depend (slightly) on `num_envs`.
    A flow head draws each row's noise from its own generator, made from the
    row's episode seed at `reset(mask, seeds)` (`episode_noise_generator`); rows
    reset without seeds draw from torch's global generator. The L1 head draws
    nothing and gets no generators.
    """

    def __init__(self, folder: str | os.PathLike, device: str | None = None):
        config = read_checkpoint_config(folder)
        try:
            from vlagym.policies import VLAPolicy  # lazy: torch and the policy code only when a checkpoint is used
        except ImportError as e:
            raise EvalError(f"cannot evaluate a checkpoint: vlagym.policies is not available ({e})") from e
        extra = config.get("extra") or {}
        self.folder = Path(folder)
        self.env_id: str | None = extra.get("env_id")
        # What the policy reads (rgb, its cameras, its image size), then whatever env kwargs training used.
        policy_config = config.get("config") or {}
        self.env_kwargs: dict[str, Any] = {"obs_mode": "rgb"}
        if "image_size" in policy_config:
            self.env_kwargs["image_size"] = policy_config["image_size"]
        if "cameras" in policy_config:
            self.env_kwargs["cameras"] = list(policy_config["cameras"])
        self.env_kwargs.update(extra.get("env_kwargs") or {})
        self.policy = VLAPolicy.from_pretrained(self.folder)
        if device is not None:
            self.policy.to(device)
        self.policy.eval()
        try:
            self._masked_reset = "mask" in inspect.signature(self.policy.reset).parameters
        except (TypeError, ValueError):
            self._masked_reset = False
        # A flow head draws noise: it gets one generator per row. Others (L1) are called exactly as before.
        self.samples = getattr(getattr(self.policy, "config", None), "head", None) == "flow"
        self._generators: list[Any] = []

    def execute_chunks(self, n_action_steps: int | None = None, temporal_ensemble: bool = False) -> None:
        """Act with `n_action_steps` actions of each predicted chunk (no ensembling), or with the temporal ensemble,
        instead of the checkpoint's own setting; ValueError (from the policy config) when the chunk cannot."""
        self.policy.config = dataclasses.replace(
            self.policy.config,
            n_action_steps=1 if temporal_ensemble else n_action_steps,
            temporal_ensemble=temporal_ensemble,
        )

    def chunk_execution(self) -> dict[str, Any] | None:
        """How the actions are executed: chunk size, actions run per chunk, temporal ensembling (None for a policy
        without a VLA config)."""
        c = getattr(self.policy, "config", None)
        if c is None:
            return None
        return {
            "chunk_size": c.chunk_size,
            "n_action_steps": c.n_action_steps,
            "temporal_ensemble": c.temporal_ensemble,
        }

    def reset(self, mask: np.ndarray, seeds: np.ndarray | Sequence[int] | None = None) -> None:
        """Restart the rows in `mask`; a flow head's row i then draws its noise from
        `episode_noise_generator(seeds[i])` (from torch's global generator when `seeds` is None)."""
        mask = np.asarray(mask, bool)
        if self._masked_reset:
            self.policy.reset(mask=mask)
        else:
            self.policy.reset()  # whole queue: see the class docstring
        if not self.samples:
            return
        if len(self._generators) != len(mask):
            self._generators = [None] * len(mask)
        if seeds is not None and len(seeds) != len(mask):
            raise ValueError(f"reset got {len(seeds)} seeds for {len(mask)} rows: pass one per row")
        for i in np.flatnonzero(mask):
            self._generators[i] = None if seeds is None else episode_noise_generator(int(seeds[i]))

    def __call__(self, obs: Any) -> np.ndarray:
        import torch

        with torch.inference_mode():
            batch = self.policy.batch_from_obs(obs)
            if self.samples:
                action = self.policy.select_action(batch, self._generators or None)
            else:
                action = self.policy.select_action(batch)
        if isinstance(action, torch.Tensor):
            action = action.detach().float().cpu().numpy()
        return np.asarray(action, np.float32)


# ---------------------------------------------------------------------------- config
@dataclass
class EvalConfig:
    """Options of `vlagym eval` / `evaluate()`."""

    policy: str
    """"expert" (each task's scripted expert) or a checkpoint folder (model.safetensors + config.json)"""
    tasks: list[str] = field(default_factory=list)
    """registered task ids; empty means the checkpoint's own task"""
    episodes: int = 50
    """episodes per task"""
    num_envs: int = 1
    """parallel sub-envs of the vector env"""
    seed: int = 100_000
    """episode i of every task uses seed + i, so two policies meet identical initial states"""
    out: str = "eval"
    """output folder (results.json, results.md, eval_config.json, videos/)"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """env kwargs overriding the checkpoint's, e.g. {"instruction_split": "heldout"} or {"split": "lighting"}"""
    videos: int = 0
    """record the first `videos` episodes of each task as mp4"""
    vectorization: str = "sync"
    """"sync" or "async" vector env; the expert needs "sync\""""
    image_size: int | None = None
    """camera image side; None means the checkpoint's (the env default for the expert's videos)"""
    cameras: list[str] | None = None
    """cameras of the image observation; None means the checkpoint's"""
    n_action_steps: int | None = None
    """actions executed of each predicted chunk before the next prediction (1..chunk size), without temporal
    ensembling; None means the checkpoint's"""
    temporal_ensemble: bool = False
    """predict every step and execute the average of the overlapping chunks' actions (ACT's temporal ensemble)"""
    progress: bool = True
    """show a progress bar"""

    def __post_init__(self) -> None:
        self.tasks = [self.tasks] if isinstance(self.tasks, str) else list(self.tasks)
        for task in self.tasks:
            if task not in vlagym.TASKS:
                raise EvalError(f"unknown task {task!r}; known tasks: {', '.join(sorted(vlagym.TASKS))}")
        if len(set(self.tasks)) != len(self.tasks):
            raise EvalError(f"tasks has duplicates: {self.tasks}")
        if self.policy == EXPERT:
            if not self.tasks:
                raise EvalError("the expert needs at least one task")
            if self.vectorization != "sync":
                raise EvalError(f"the expert needs vectorization='sync', got {self.vectorization!r}")
        else:
            read_checkpoint_config(self.policy)
        for name in ("episodes", "num_envs"):
            if getattr(self, name) < 1:
                raise EvalError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise EvalError(f"seed must be non-negative, got {self.seed}")
        if self.videos < 0:
            raise EvalError(f"videos must be non-negative, got {self.videos}")
        if self.vectorization not in VECTORIZATION_MODES:
            raise EvalError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {self.vectorization!r}")
        if self.image_size is not None and not (16 <= self.image_size <= 2048 and self.image_size % 2 == 0):
            raise EvalError(f"image_size must be an even number between 16 and 2048, got {self.image_size}")
        if not isinstance(self.env_kwargs, dict):
            raise EvalError(f"env_kwargs must be a JSON object, got {self.env_kwargs!r}")
        if self.cameras is not None:
            self.cameras = list(self.cameras)
        self._check_chunk_execution()

    def _check_chunk_execution(self) -> None:
        if self.n_action_steps is None and not self.temporal_ensemble:
            return
        if self.policy == EXPERT:
            raise EvalError(
                "n_action_steps and temporal_ensemble set how a checkpoint executes its chunks, not the expert"
            )
        if self.n_action_steps is not None and self.temporal_ensemble:
            raise EvalError("give n_action_steps or temporal_ensemble, not both (the ensemble predicts every step)")
        if self.n_action_steps is not None and self.n_action_steps < 1:
            raise EvalError(f"n_action_steps must be at least 1, got {self.n_action_steps}")


# ---------------------------------------------------------------------------- statistics
def summarize(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Per-task numbers of a list of episodes (see the module docstring)."""
    n = len(records)
    successes = sum(r.success for r in records)
    lo, hi = wilson_interval(successes, n)
    return {
        "n": n,
        "successes": successes,
        "success_rate": successes / n if n else math.nan,
        "ci95": [lo, hi],
        "success_at_end_rate": sum(r.success_at_end for r in records) / n if n else math.nan,
        "mean_length": float(np.mean([r.length for r in records])) if n else math.nan,
        "mean_return": float(np.mean([r.episode_return for r in records])) if n else math.nan,
        "outcomes": outcome_counts(r.outcome for r in records),
    }


def episode_dict(r: EpisodeRecord) -> dict[str, Any]:
    """One episode as a JSON record."""
    return {
        "seed": r.seed,
        "task": r.task,
        "instruction": r.instruction,
        "success": r.success,
        "success_at_end": r.success_at_end,
        "length": r.length,
        "return": r.episode_return,
        "outcome": r.outcome,
        "ever_grasped": r.ever_grasped,
        "grasped_at_end": r.grasped_at_end,
        "wrong_object": r.wrong_object,
        "min_reach_distance": r.min_reach_distance,
        "sim_unstable": r.sim_unstable,
    }


def format_outcomes(rows: dict[str, dict[str, int]], videos: dict[str, dict[str, list[str]]] | None = None) -> str:
    """Markdown: one row per label with the count of every outcome, and links to videos of that outcome if any."""
    lines = ["| | " + " | ".join(OUTCOMES) + " |", "|---|" + "---:|" * len(OUTCOMES)]
    for label, counts in rows.items():
        cells = []
        for o in OUTCOMES:
            links = " ".join(f"[{k + 1}]({p})" for k, p in enumerate((videos or {}).get(label, {}).get(o, [])))
            cells.append(f"{counts.get(o, 0)}" + (f" {links}" if links else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def videos_by_outcome(episodes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """{outcome: [video paths]} of the episode records that have a video."""
    out: dict[str, list[str]] = {}
    for e in episodes:
        if e.get("video"):
            out.setdefault(e.get("outcome", ""), []).append(e["video"])
    return out


def _summary_row(name: str, s: dict[str, Any]) -> str:
    lo, hi = s["ci95"]
    return (
        f"| {name} | {s['n']} | {s['success_rate']:.1%} | [{lo:.1%}, {hi:.1%}] | "
        f"{s['success_at_end_rate']:.1%} | {s['mean_length']:.1f} | {s['mean_return']:.2f} |"
    )


def format_results(results: dict[str, Any]) -> str:
    """The Markdown table of `results["tasks"]`: task | n | success | 95% CI | success at end | length | return
    (for a multi-task env also one row per task it drew); then the outcome counts per task (with links to the
    recorded videos)."""
    lines = [
        "| task | n | success | 95% CI | success at end | mean length | mean return |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for task, s in results["tasks"].items():
        lines.append(_summary_row(task, s))
        # A multi-task env: a row per task it drew, under its own.
        lines += [_summary_row(f"↳ {drawn}", d) for drawn, d in sorted(s.get("by_task", {}).items())]
    with_outcomes = {task: s for task, s in results["tasks"].items() if "outcomes" in s}
    if with_outcomes:
        rows = {task: s["outcomes"] for task, s in with_outcomes.items()}
        videos = {task: videos_by_outcome(s.get("episodes", [])) for task, s in with_outcomes.items()}
        lines += ["", "Outcomes (failure taxonomy, see vlagym.eval.diagnostics):", "", format_outcomes(rows, videos)]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- evaluation
def _env_kwargs(cfg: EvalConfig, checkpoint: CheckpointPolicy | None) -> dict[str, Any]:
    """Checkpoint env kwargs, then image_size/cameras, then cfg.env_kwargs (last wins)."""
    if checkpoint is None:
        kwargs: dict[str, Any] = {"obs_mode": "state"}  # the expert reads simulator state: render nothing
    else:
        kwargs = dict(checkpoint.env_kwargs)
    if cfg.image_size is not None:
        kwargs["image_size"] = cfg.image_size
    if cfg.cameras is not None:
        kwargs["cameras"] = list(cfg.cameras)
    kwargs.update(cfg.env_kwargs)
    return kwargs


def _make_policy(cfg: EvalConfig, envs: gym.vector.VectorEnv, checkpoint: CheckpointPolicy | None) -> EvalPolicy:
    return ExpertPolicy(envs) if checkpoint is None else checkpoint


def record_videos(
    task: str,
    env_kwargs: dict[str, Any],
    checkpoint: CheckpointPolicy | None,
    seeds: list[int],
    folder: Path,
    name: str = "",
    reset_options: dict[str, Any] | None = None,
) -> list[str]:
    """Re-run `seeds` of `task` in one rendering env; one mp4 per episode, FOLDER/{name or task}_seed{seed}.mp4."""
    import imageio.v2 as imageio  # here: evaluation without videos should not pay for ffmpeg

    kwargs = dict(env_kwargs)
    if kwargs.get("obs_mode", "state") == "state":
        kwargs["obs_mode"] = "rgb"
        kwargs.setdefault("cameras", ["front"])
    camera = list(kwargs.get("cameras") or ["front"])[0]
    folder.mkdir(parents=True, exist_ok=True)
    envs = make_rollout_envs(task, 1, "sync", **kwargs)
    paths = []
    try:
        policy = ExpertPolicy(envs) if checkpoint is None else checkpoint
        for seed in seeds:
            path = folder / f"{name or task}_seed{seed}.mp4"
            tmp = temp_path(path)
            try:
                obs, _ = envs.reset(seed=[seed], options=dict(reset_options) if reset_options else None)
                policy.reset(np.ones(1, bool), seeds=[seed])  # the evaluated episode's noise, too
                # macro_block_size=2 keeps the exact (even) frame size instead of resizing to a multiple of 16.
                with imageio.get_writer(
                    tmp, format="FFMPEG", mode="I", fps=VIDEO_FPS, codec="libx264", macro_block_size=2,
                    ffmpeg_log_level="error",
                ) as writer:  # fmt: skip
                    writer.append_data(obs["images"][camera][0])
                    done = False
                    while not done:
                        obs, _, terminated, truncated, _ = envs.step(policy(obs))
                        writer.append_data(obs["images"][camera][0])
                        done = bool(terminated[0] or truncated[0])
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            paths.append(str(path))
    finally:
        envs.close()
    return paths


def evaluate(cfg: EvalConfig) -> dict[str, Any]:
    """Evaluate `cfg.policy` on every task; writes the outputs into `cfg.out` and returns results.json's content."""
    checkpoint = None if cfg.policy == EXPERT else CheckpointPolicy(cfg.policy)
    if checkpoint is not None and (cfg.n_action_steps is not None or cfg.temporal_ensemble):
        try:  # the config checks the steps against the chunk size
            checkpoint.execute_chunks(cfg.n_action_steps, cfg.temporal_ensemble)
        except ValueError as e:
            raise EvalError(f"cannot execute {cfg.policy}'s chunks that way: {e}") from e
    tasks = list(cfg.tasks)
    if not tasks:
        if checkpoint is None or not checkpoint.env_id:
            raise EvalError("no tasks given and the checkpoint names no env_id; pass tasks")
        tasks = [checkpoint.env_id]
    if tasks[0] not in vlagym.TASKS:
        raise EvalError(f"unknown task {tasks[0]!r}; known tasks: {', '.join(sorted(vlagym.TASKS))}")
    env_kwargs = _env_kwargs(cfg, checkpoint)
    out = Path(cfg.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EvalError(f"cannot create the output folder {cfg.out!r}: {e.strerror or e}") from e
    atomic_write_json(
        out / "eval_config.json",
        {
            "config": dataclasses.asdict(cfg),
            "tasks": tasks,
            "env_kwargs": env_kwargs,
            "vlagym_version": vlagym.__version__,
        },
    )
    seeds = [cfg.seed + i for i in range(cfg.episodes)]
    results: dict[str, Any] = {
        "policy": cfg.policy,
        "seed": cfg.seed,
        "episodes": cfg.episodes,
        "env_kwargs": env_kwargs,
        "chunk_execution": None if checkpoint is None else checkpoint.chunk_execution(),
        "vlagym_version": vlagym.__version__,
        "tasks": {},
    }
    for task in tasks:
        logger.info("evaluating %s on %s: %d episodes from seed %d", cfg.policy, task, cfg.episodes, cfg.seed)
        envs = make_rollout_envs(task, cfg.num_envs, cfg.vectorization, **env_kwargs)
        try:
            policy = _make_policy(cfg, envs, checkpoint)
            records = run_episodes(envs, policy, seeds, on_episode_start=policy.reset, progress=cfg.progress)
        finally:
            envs.close()
        summary = summarize(records)
        drawn = sorted({r.task for r in records})
        if drawn != [task]:  # a multi-task env: also per drawn task
            summary["by_task"] = {t: summarize([r for r in records if r.task == t]) for t in drawn}
        summary["episodes"] = [episode_dict(r) for r in records]
        if cfg.videos:
            shown = seeds[: cfg.videos]
            summary["videos"] = record_videos(task, env_kwargs, checkpoint, shown, out / "videos")
            for episode, path in zip(summary["episodes"], summary["videos"], strict=False):
                episode["video"] = os.path.relpath(path, out)
        results["tasks"][task] = summary
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "results.md", format_results(results) + "\n")
    return results


def checkpoint_success_rate(
    checkpoint: str | os.PathLike, out: str | os.PathLike, episodes: int, num_envs: int
) -> float:
    """The success rate of a checkpoint on its own task (`evaluate` with default seeds; results under `out`): the
    evaluator `vlagym.train.bc.train_bc` calls every ``eval_every`` steps."""
    cfg = EvalConfig(policy=str(checkpoint), episodes=episodes, num_envs=num_envs, out=str(out), progress=False)
    results = evaluate(cfg)
    return float(next(iter(results["tasks"].values()))["success_rate"])
