"""`RLConfig`: the options of `train_rl` (`vlagym train-rl`), checked and with the defaults of its kind of run.

This module imports neither torch nor mujoco, h5py or stable-baselines3: the CLI generates its options (and
``--help``) from the dataclass. The checks that read a BC checkpoint or ask the SB3 policy import those
modules inside ``__post_init__``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vlagym.checks import check_float, check_int
from vlagym.config import Config
from vlagym.rl.common import check_task_and_env_kwargs
from vlagym.train.configs import DEVICES

ALGOS = ("ppo", "sac")
REWARDS = ("sparse", "dense")
RESERVED_ENV_KWARGS = ("obs_mode", "reward_mode", "max_episode_steps", "render_mode")
# Defaults that depend on the kind of run: "post" (post-training the VLA), "ppo"/"sac" (from scratch). The
# post-training ones are the run measured stable on VLA-PickCup-v0 (issue 6): with lr 3e-5 and no KL limit each
# update moved the 70-dimensional chunk Gaussian far (approximate KL 0.2-2) and success fell.
DEFAULT_LR = {"post": 5e-6, "ppo": 3e-4, "sac": 3e-4}
DEFAULT_BATCH = {"post": 128, "ppo": 64, "sac": 256}
DEFAULT_N_STEPS = {"post": 64, "ppo": 32, "sac": 32}
DEFAULT_TARGET_KL = {"post": 0.03, "ppo": None, "sac": None}
POST_TRAINING_DEFAULTS = {"bc_coef": 0.1, "critic_warmup_steps": 4096}
SCRATCH_NEUTRAL = {"bc_coef": 0.0, "critic_warmup_steps": 0, "actor_layers": "all"}


# ---------------------------------------------------------------------------- config
@dataclass
class RLConfig(Config):
    """Options of `train_rl` (and `vlagym train-rl`); saved as ``OUT/rl_config.json`` with defaults resolved."""

    policy: str | None = None
    """BC checkpoint folder to post-train (model.safetensors + config.json); None with `from_scratch`"""
    from_scratch: bool = False
    """a baseline: SB3's MlpPolicy trained from scratch on obs_mode="state" (no checkpoint)"""
    algo: str = "ppo"
    """"ppo" or "sac" (SAC from scratch only)"""
    task: str | None = None
    """registered env id; None: the checkpoint's task (required from scratch)"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra env kwargs (e.g. {"num_cups": 1}); post-training adds them to the checkpoint's"""
    out: str = "runs/rl"
    """run folder: config, TensorBoard logs, checkpoints, evaluations"""
    total_timesteps: int = 20_000
    """SB3 timesteps: RL steps summed over the sub-envs (one RL step executes `chunk_size` actions)"""
    max_minutes: float | None = None
    """also stop once training has run this many minutes (wall clock, evaluations excluded, resumed runs
    included); the final checkpoint and evaluation are still written. None: no time limit"""
    n_envs: int = 4
    """parallel sub-envs"""
    vectorization: str = "sync"
    """"sync" (SB3's DummyVecEnv) or "async" (SubprocVecEnv, one process per sub-env)"""
    reward: str = "dense"
    """"dense" (the task's staged reward; training episodes run on past success) or "sparse" (1 on success)"""
    reward_scale: float | None = None
    """multiplies the reward of each RL step (a chunk's summed reward) in training; None: 1 / chunk_size for a
    dense reward (the mean per-step reward, in [0, 1], so returns stay O(1) for the value head), else 1"""
    max_episode_steps: int | None = None
    """training time limit in control steps; None: the task's registered one (evaluation always uses that)"""
    chunk_size: int | None = None
    """actions per RL step; None: the checkpoint's n_action_steps (post-training, the only value allowed) or 1"""
    n_steps: int | None = None
    """PPO: RL steps per sub-env per rollout; None: 64 post-training, 32 from scratch"""
    batch_size: int | None = None
    """minibatch size; None: 128 post-training, 64 PPO and 256 SAC from scratch"""
    n_epochs: int = 4
    """PPO: passes over each rollout"""
    lr: float | None = None
    """learning rate (post-training: of the actor, VLA and log-std); None: 5e-6 post-training, 3e-4 from scratch"""
    critic_lr: float = 3e-4
    """post-training: learning rate of the value head"""
    log_std_lr: float | None = None
    """post-training: learning rate of the log-std; None: the actor's (`lr`), at which it barely moves"""
    gamma: float = 0.99
    """discount per RL step (per chunk)"""
    gae_lambda: float = 0.95
    """PPO: GAE lambda"""
    clip_range: float = 0.2
    """PPO: ratio clipping"""
    ent_coef: float = 0.0
    """PPO: entropy bonus coefficient (SAC tunes its own)"""
    vf_coef: float = 0.5
    """PPO: value loss coefficient"""
    max_grad_norm: float = 0.5
    """PPO: gradient norm clipping"""
    target_kl: float | None = None
    """PPO: stop an update's epochs early when the approximate KL exceeds 1.5 x this; None: 0.03 post-training,
    never from scratch (a large value turns it off)"""
    log_std_init: float = -2.0
    """post-training: initial log-std of the Gaussian around the BC chunk (normalised units)"""
    actor_layers: str = "all"
    """post-training: "all" (every VLA weight learns) or "head" (encoders and trunk frozen, only the action head
    and log-std learn: updates cost a forward pass of the trunk, not a backward one)"""
    critic_state: bool = True
    """post-training: the value head reads the privileged state (env obs_mode "rgb+state"); else VLA features"""
    critic_hidden: list[int] = field(default_factory=lambda: [256, 256])
    """post-training: hidden widths of the value MLP"""
    bc_coef: float | None = None
    """post-training: weight of the squared distance between the action mean and the BC policy's (0: off);
    None: 0.1 (0 from scratch, the only value allowed there)"""
    critic_warmup_steps: int | None = None
    """post-training: timesteps during which only the value head learns (the actor is frozen); None: 4096 (0 from
    scratch, the only value allowed there)"""
    buffer_size: int = 300_000
    """SAC: replay buffer size"""
    learning_starts: int = 1000
    """SAC: timesteps of random actions before learning starts"""
    seed: int = 0
    """seeds the model init, the sub-envs' first resets and the action noise"""
    eval_every: int = 0
    """evaluate every this many timesteps and at the end (0: never)"""
    eval_episodes: int = 20
    """episodes per evaluation; episode i uses seed eval_seed + i, as `vlagym eval`"""
    eval_num_envs: int = 1
    """parallel sub-envs of the evaluation"""
    eval_seed: int = 100_000
    """first seed of the evaluation episodes (never used by training, whose envs start from `seed`)"""
    checkpoint_every: int = 0
    """write a checkpoint every this many timesteps (0: only at the end; the end always gets one)"""
    device: str = "auto"
    """"auto" (CUDA when available), "cpu" or "cuda\""""
    torch_threads: int | None = None
    """CPU threads of torch in this process (None: torch's default); 1 is often much faster for the small VLA
    on a machine whose cores are busy (contended thread pools spin)"""
    resume: bool = False
    """continue from OUT/checkpoints/last.json when it exists (otherwise start afresh)"""
    progress: bool = True
    """show a progress bar"""

    def __post_init__(self) -> None:
        self._check_kind()
        self._check_env()
        self._check_numbers()
        self._resolve_defaults()
        train = (self.seed, self.seed + self.n_envs)
        evals = (self.eval_seed, self.eval_seed + self.eval_episodes)
        if train[0] < evals[1] and evals[0] < train[1]:
            raise ValueError(
                f"the training envs' first seeds {train[0]}..{train[1] - 1} overlap the evaluation seeds "
                f"{evals[0]}..{evals[1] - 1}: move seed or eval_seed"
            )

    def _check_kind(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {list(ALGOS)}, got {self.algo!r}")
        if not isinstance(self.from_scratch, bool):
            raise ValueError(f"from_scratch must be a bool, got {self.from_scratch!r}")
        if self.from_scratch:
            if self.policy:
                raise ValueError("give either a BC checkpoint (policy) or from_scratch=True, not both")
            if not self.task:
                raise ValueError("from_scratch needs a task")
            for name, neutral in SCRATCH_NEUTRAL.items():
                if getattr(self, name) not in (None, neutral):
                    raise ValueError(f"{name} applies to post-training of a BC checkpoint, not from_scratch runs")
            return
        if not self.policy:
            raise ValueError("post-training needs a BC checkpoint folder (policy); or set from_scratch=True")
        if self.algo != "ppo":
            raise ValueError(
                f"post-training with RLConfig uses PPO; algo={self.algo!r} is for from_scratch baselines "
                "(filtered-BC post-training has its own: `vlagym train-fbc`, vlagym.rl.fbc.FilteredBCConfig)"
            )
        from vlagym.policies.checkpoint import read_checkpoint_config  # torch: only when a config is built
        from vlagym.policies.config import VLAConfig
        from vlagym.rl.sb3_policy import check_rl_config

        self.policy = str(self.policy)
        meta = read_checkpoint_config(self.policy)
        check_rl_config(VLAConfig.from_dict(meta["config"]))
        if not self.task:
            self.task = (meta.get("extra") or {}).get("env_id")
            if not self.task:
                raise ValueError(f"checkpoint {self.policy} names no env_id; give the task")

    def _check_env(self) -> None:
        from vlagym.rl.envs import VECTORIZATION_MODES  # SB3: only when a config is built
        from vlagym.rl.sb3_policy import ACTOR_LAYERS

        self.task = check_task_and_env_kwargs(
            self.task, self.env_kwargs, RESERVED_ENV_KWARGS, "reward, max_episode_steps and the obs mode are options"
        )
        if self.vectorization not in VECTORIZATION_MODES:
            raise ValueError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {self.vectorization!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {list(REWARDS)}, got {self.reward!r}")
        if self.actor_layers not in ACTOR_LAYERS:
            raise ValueError(f"actor_layers must be one of {list(ACTOR_LAYERS)}, got {self.actor_layers!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {list(DEVICES)}, got {self.device!r}")

    def _check_numbers(self) -> None:
        for name, low in (
            ("total_timesteps", 1),
            ("n_envs", 1),
            ("n_epochs", 1),
            ("buffer_size", 1),
            ("learning_starts", 0),
            ("seed", 0),
            ("eval_every", 0),
            ("eval_episodes", 1),
            ("eval_num_envs", 1),
            ("eval_seed", 0),
            ("checkpoint_every", 0),
        ):
            check_int(name, getattr(self, name), low)
        # options where None means "the default of this kind of run" (or "none")
        optional_ints = (
            ("max_episode_steps", 1),
            ("chunk_size", 1),
            ("torch_threads", 1),
            ("n_steps", 1),
            ("critic_warmup_steps", 0),
            ("batch_size", 2),
        )
        for name, low in optional_ints:
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), low)
        for name in ("max_minutes", "lr", "reward_scale", "target_kl", "log_std_lr"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name), 0.0, low_open=True)
        check_float("critic_lr", self.critic_lr, 0.0, low_open=True)
        check_float("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_float("gae_lambda", self.gae_lambda, 0.0, 1.0)
        check_float("clip_range", self.clip_range, 0.0, low_open=True)
        check_float("max_grad_norm", self.max_grad_norm, 0.0, low_open=True)
        for name in ("ent_coef", "vf_coef", "bc_coef"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name), 0.0)
        check_float("log_std_init", self.log_std_init, -20.0, 2.0)
        self.critic_hidden = list(self.critic_hidden)
        for w in self.critic_hidden:
            check_int("each critic_hidden entry", w, 1)
        for name in ("critic_state", "resume", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")

    def _resolve_defaults(self) -> None:
        kind = self.algo if self.from_scratch else "post"
        if self.lr is None:
            self.lr = DEFAULT_LR[kind]
        if self.batch_size is None:
            self.batch_size = DEFAULT_BATCH[kind]
        if self.n_steps is None:
            self.n_steps = DEFAULT_N_STEPS[kind]
        if self.target_kl is None:
            self.target_kl = DEFAULT_TARGET_KL[kind]
        for name, value in (SCRATCH_NEUTRAL if self.from_scratch else POST_TRAINING_DEFAULTS).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if not self.from_scratch:
            from vlagym.policies.checkpoint import read_checkpoint_config

            steps = read_checkpoint_config(self.policy)["config"]["n_action_steps"]
            if self.chunk_size not in (None, steps):
                raise ValueError(
                    f"chunk_size={self.chunk_size!r}: post-training executes the checkpoint's n_action_steps={steps} "
                    "actions per RL step (what `vlagym eval` executes); leave chunk_size unset"
                )
            self.chunk_size = steps
        elif self.chunk_size is None:
            self.chunk_size = 1
        if self.reward_scale is None:
            self.reward_scale = 1.0 / self.chunk_size if self.reward == "dense" else 1.0
        if self.algo == "ppo" and self.batch_size > self.n_steps * self.n_envs:
            raise ValueError(
                f"batch_size={self.batch_size} is larger than a rollout "
                f"(n_steps * n_envs = {self.n_steps * self.n_envs})"
            )
