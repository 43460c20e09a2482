"""`ResidualConfig`: the options of `train_residual` (`vlagym train-residual`), checked on construction.

This module imports neither torch nor mujoco or stable-baselines3: the CLI generates its options (and ``--help``)
from the dataclass. Reading the base checkpoint's config imports torch inside ``__post_init__``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vlagym.checks import check_float, check_int
from vlagym.config import Config
from vlagym.distributed import backend_problem
from vlagym.rl.common import check_n_action_steps, check_task_and_env_kwargs, read_base_checkpoint
from vlagym.train.configs import DEVICES

VECTORIZATION_MODES = ("sync", "pool")
REWARDS = ("sparse", "dense")
RESERVED_ENV_KWARGS = ("obs_mode", "reward_mode", "render_mode", "image_size", "cameras")


@dataclass
class ResidualConfig(Config):
    """Options of `train_residual` (and `vlagym train-residual`); saved as ``OUT/residual_config.json``."""

    policy: str = ""
    """the frozen base: a VLA checkpoint folder (model.safetensors + config.json)"""
    task: str | None = None
    """registered env id; None: the checkpoint's task"""
    n_action_steps: int | None = None
    """actions the base executes of each predicted chunk before it predicts again (1..chunk size, no temporal
    ensemble), in training, evaluation and the saved teacher; unset: the checkpoint's own setting"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra env kwargs, added to the checkpoint's (e.g. {"num_cups": 1})"""
    out: str = "runs/residual"
    """run folder: config, TensorBoard logs, checkpoints, evaluations"""
    total_timesteps: int = 100_000
    """env steps summed over the sub-envs (one control step each)"""
    max_minutes: float | None = None
    """also stop once training has run this many minutes (evaluations excluded, resumed runs included); the
    final checkpoint and evaluation are still written. None: no time limit"""
    n_envs: int = 8
    """parallel sub-envs (per Ray worker with backend "ray"); the base acts on them as one batch"""
    vectorization: str = "pool"
    """"sync" or "pool" (`vlagym.envs.pool`: a worker per CPU stepping a slice of the sub-envs)"""
    alpha: float = 0.2
    """bound of the residual: the executed action is clip(base + alpha * r, -1, 1) with r in [-1, 1]"""
    reward: str = "sparse"
    """the task's reward the residual learns from, minus 1 per step: "sparse" (1 on success) or "dense" (the
    task's staged terms in [0, 1] of the simulator state, 1 on success); success ends the episode either way"""
    residual_gripper: bool = False
    """the residual also acts on the gripper (else the base's gripper command is executed as it is)"""
    hidden: list[int] = field(default_factory=lambda: [256, 256])
    """hidden widths of the actor and of each critic"""
    lr: float = 3e-4
    """learning rate of actor, critics and entropy coefficient"""
    batch_size: int = 256
    """minibatch size of the updates"""
    buffer_size: int = 300_000
    """replay buffer size (transitions)"""
    gamma: float = 0.99
    """discount per control step"""
    tau: float = 0.005
    """target critics' soft-update rate"""
    n_step: int = 5
    """n-step returns of the critics' targets (1: ordinary one-step TD)"""
    initial_log_std: float = -1.0
    """the actor's log-std (before tanh) at the start, everywhere: the first residual episodes' exploration"""
    gradient_steps: int = 2
    """updates per vector step (update-to-data ratio: gradient_steps / n_envs)"""
    ent_coef_init: float = 0.05
    """initial entropy coefficient (SAC tunes it toward the target entropy)"""
    warmup_steps: int = 4000
    """timesteps collected by the base alone (residual off) before any update"""
    critic_warmup_updates: int = 2000
    """critic-only updates on the warm-up transitions, before the actor learns"""
    exploration_steps: int = 20_000
    """progressive exploration: after the warm-up, the probability that an episode uses the residual rises
    linearly from 0 to 1 over this many timesteps (0: always on)"""
    seed: int = 0
    """seeds the networks, the updates and the exploration"""
    collect_seed: int = 1_000_000
    """sub-env i of n runs the seeds collect_seed + i, collect_seed + i + n, ..., one per training episode (away
    from the demos' seeds and the evaluation's)"""
    eval_every: int = 20_000
    """evaluate the teacher (base + deterministic residual) every this many timesteps and at the end (0: only at
    the end)"""
    eval_episodes: int = 100
    """episodes per evaluation; episode i uses seed eval_seed + i, as `vlagym eval`"""
    eval_seed: int = 200_000
    """first seed of the evaluation episodes (never a training seed)"""
    checkpoint_every: int = 10_000
    """write a checkpoint every this many timesteps (and at the end); a checkpoint restarts every sub-env's
    episode, so a resumed run continues exactly as an uninterrupted one"""
    device: str = "cpu"
    """"auto" (CUDA when available), "cpu" or "cuda" for the residual's networks (the base runs on the CPU)"""
    torch_threads: int | None = 2
    """CPU threads of torch in this process (None: torch's default). The updates and the env workers' steps
    take turns, so the updates may use the workers' cores: 2 trained 1.10-1.18x faster than 1 on 2 cores"""
    resume: bool = False
    """continue from OUT/checkpoints/last.json when it exists (otherwise start afresh)"""
    progress: bool = True
    """show a progress bar"""
    backend: str = "local"
    """where the sub-envs step: "local" (n_envs here) or "ray" (n_envs on each Ray worker, with its own copy of
    the base, all stepped at once each vector step; docs/ray.md). The updates and evaluations run here"""
    address: str | None = None
    """Ray cluster to join ("auto", "HOST:6379", "ray://HOST:10001"); unset: $RAY_ADDRESS, else a new local one"""
    workers: int | None = None
    """Ray workers (one CPU each); unset: one per CPU of the cluster"""

    def __post_init__(self) -> None:
        self.policy, meta, self.task = read_base_checkpoint(
            self.policy, self.task, "residual RL needs a base VLA checkpoint folder (policy)"
        )
        if self.n_action_steps is not None:
            check_int("n_action_steps", self.n_action_steps, 1)
        check_n_action_steps(self.n_action_steps, meta)
        self.task = check_task_and_env_kwargs(
            self.task, self.env_kwargs, RESERVED_ENV_KWARGS, "the observation settings are the checkpoint's"
        )
        if self.vectorization not in VECTORIZATION_MODES:
            raise ValueError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {self.vectorization!r}")
        problem = backend_problem(self.backend, self.address, self.workers, None)
        if problem:
            raise ValueError(problem)
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {list(DEVICES)}, got {self.device!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {self.reward!r}")
        for name, low in (
            ("total_timesteps", 1),
            ("n_envs", 1),
            ("batch_size", 2),
            ("buffer_size", 1),
            ("gradient_steps", 1),
            ("n_step", 1),
            ("warmup_steps", 0),
            ("critic_warmup_updates", 0),
            ("exploration_steps", 0),
            ("seed", 0),
            ("collect_seed", 0),
            ("eval_every", 0),
            ("eval_episodes", 1),
            ("eval_seed", 0),
            ("checkpoint_every", 1),
        ):
            check_int(name, getattr(self, name), low)
        if self.torch_threads is not None:
            check_int("torch_threads", self.torch_threads, 1)
        check_float("alpha", self.alpha, 0.0, 2.0, low_open=True)
        check_float("lr", self.lr, 0.0, low_open=True)
        check_float("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_float("tau", self.tau, 0.0, 1.0, low_open=True)
        check_float("initial_log_std", self.initial_log_std, -20.0, 2.0)
        check_float("ent_coef_init", self.ent_coef_init, 0.0, low_open=True)
        if self.max_minutes is not None:
            check_float("max_minutes", self.max_minutes, 0.0, low_open=True)
        self.hidden = list(self.hidden)
        for w in self.hidden:
            check_int("each hidden entry", w, 1)
        for name in ("residual_gripper", "resume", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        # Every training episode takes a new seed, at most one per timestep.
        train = (self.collect_seed, self.collect_seed + self.total_timesteps + self.n_envs)
        evals = (self.eval_seed, self.eval_seed + self.eval_episodes)
        if train[0] < evals[1] and evals[0] < train[1]:
            raise ValueError(
                f"the training episodes' seeds {train[0]}..{train[1] - 1} may reach the evaluation seeds "
                f"{evals[0]}..{evals[1] - 1}: move collect_seed or eval_seed"
            )


@dataclass
class DistillConfig(Config):
    """Options of `distill` (and `vlagym distill`): the residual teacher's behaviour cloned into an image-only VLA;
    saved as ``OUT/distill_config.json``."""

    teacher: str = ""
    """a `train-residual` checkpoint folder (teacher.json + actor.safetensors)"""
    out: str = "runs/distill"
    """run folder: the teacher's rollouts, the student's BC run, its evaluation"""
    episodes: int = 1000
    """teacher episodes to run; its successes become the student's demos"""
    collect_seed: int = 10_000_000
    """teacher episode i runs from seed collect_seed + i (away from demo, training and evaluation seeds)"""
    demos: list[str] = field(default_factory=list)
    """demo files trained on together with the teacher's successes (e.g. the base checkpoint's own demos)"""
    steps: int = 5000
    """behaviour-cloning optimiser steps of the student (trained from scratch, the base's architecture)"""
    batch_size: int = 64
    """behaviour-cloning batch size"""
    ema: float = 0.999
    """decay of the EMA of the student's weights that is evaluated and saved (0: off)"""
    seed: int = 0
    """the student's training seed"""
    dagger_rounds: int = 0
    """DAgger rounds after the first student: each runs the latest student on fresh seeds, labels every state it
    visits with the teacher's action there, and fine-tunes the student on all the data so far (0: only
    success-filtered BC on the teacher's rollouts)"""
    dagger_episodes: int = 200
    """student episodes per DAgger round (seeds after the teacher's)"""
    dagger_steps: int = 1500
    """fine-tuning steps of the student per DAgger round"""
    n_envs: int = 8
    """parallel sub-envs of the collection and the evaluation"""
    vectorization: str = "pool"
    """"sync" or "pool" vector envs"""
    eval_episodes: int = 200
    """evaluation episodes of the student; episode i uses seed eval_seed + i, as `vlagym eval`"""
    eval_seed: int = 200_000
    """first evaluation seed"""
    resume: bool = False
    """reuse OUT's complete teacher rollouts and continue the student's BC run"""
    progress: bool = True
    """show progress bars"""
    backend: str = "local"
    """where the teacher's and the DAgger rounds' episodes run: "local" (n_envs sub-envs here) or "ray"
    (workers on a Ray cluster, each with n_envs sub-envs; docs/ray.md): the same episodes"""
    address: str | None = None
    """Ray cluster to join ("auto", "HOST:6379", "ray://HOST:10001"); unset: $RAY_ADDRESS, else a new local one"""
    workers: int | None = None
    """Ray workers (one CPU each); unset: one per CPU of the cluster"""
    unit_size: int | None = None
    """Ray: episodes per work unit (unset: twice n_envs); the driver hands out a few hundred units a second,
    so a large cluster wants larger units (docs/ray.md). The episodes do not depend on it"""

    def __post_init__(self) -> None:
        if not self.teacher:
            raise ValueError("distillation needs a residual teacher checkpoint folder (teacher)")
        if self.vectorization not in VECTORIZATION_MODES:
            raise ValueError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {self.vectorization!r}")
        for name, low in (
            ("episodes", 1),
            ("collect_seed", 0),
            ("steps", 1),
            ("batch_size", 1),
            ("seed", 0),
            ("dagger_rounds", 0),
            ("dagger_episodes", 1),
            ("dagger_steps", 1),
            ("n_envs", 1),
            ("eval_episodes", 1),
            ("eval_seed", 0),
        ):
            check_int(name, getattr(self, name), low)
        check_float("ema", self.ema, 0.0, 1.0)
        if self.ema == 1.0:  # checked here too, not only by the student's BCConfig after the collection
            raise ValueError(f"ema must be < 1 (1 would never move the weights), got {self.ema!r}")
        self.demos = [str(d) for d in self.demos]
        for name in ("resume", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        problem = backend_problem(self.backend, self.address, self.workers, self.unit_size)
        if problem:
            raise ValueError(problem)
        collect = (self.collect_seed, self.dagger_seed(self.dagger_rounds + 1))
        evals = (self.eval_seed, self.eval_seed + self.eval_episodes)
        if collect[0] < evals[1] and evals[0] < collect[1]:
            raise ValueError(
                f"the collection's seeds {collect[0]}..{collect[1] - 1} overlap the evaluation seeds "
                f"{evals[0]}..{evals[1] - 1}: move collect_seed or eval_seed"
            )

    def dagger_seed(self, round_: int) -> int:
        """The first seed of DAgger round `round_` (1, 2, ...): the rounds follow the teacher's episodes."""
        return self.collect_seed + self.episodes + (round_ - 1) * self.dagger_episodes
