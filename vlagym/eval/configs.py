"""The options of every evaluation command, as config dataclasses that validate themselves.

    EvalConfig         vlagym eval                      (`vlagym.eval.evaluate.evaluate`)
    SuiteRunConfig     vlagym eval --suite NAME         (`vlagym.eval.suite_run.run_suite`)
    CurveConfig        vlagym curve RUN                 (`vlagym.eval.curve.run_curve`)
    CompareConfig      vlagym compare A B               (`vlagym.eval.compare.compare_runs`)
    ReplicatesConfig   vlagym replicates BASE RUN ...   (`vlagym.eval.compare.replicate_runs`)

The command line builds its options from these classes (a field's docstring is its help), so importing this
module loads neither torch nor mujoco: validation that needs a heavier module imports it where it runs.
A bad value raises the error the command reports (`EvalError`, `CurveError`, `PairingError`; all ValueError),
quoting the value.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import vlagym
from vlagym.config import Config
from vlagym.distributed import backend_problem
from vlagym.envs.constants import VECTORIZATION_MODES
from vlagym.eval.layout import CHECKPOINT_FILES
from vlagym.eval.stats import ALPHA, GROUPINGS, PairingError

EXPERT = "expert"
#: the per-episode outcomes a bundle records and `compare` can pair
METRICS = ("success", "success_at_end")
SEQUENTIAL_MIN_EPISODES = 20


class EvalError(ValueError):
    """Bad evaluation input (unknown task, missing checkpoint, invalid option)."""


class CurveError(ValueError):
    """A run folder, start checkpoint or option the curve cannot use; the message names it."""


def check_checkpoint_folder(folder: str | os.PathLike) -> dict[str, Any]:
    """The `config.json` of a checkpoint folder `vlagym eval` can load; `EvalError` naming what is wrong if it
    is not one (the policy's own loader, `vlagym.policies.read_checkpoint_config`, checks the format)."""
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


FACTORY_PATTERN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def policy_kind(policy: str) -> str:
    """What a --policy names: "expert", "served" (ws:// or wss://, a policy server), "factory"
    (package.module:function returning a batched policy) or "checkpoint" (a folder)."""
    if policy == EXPERT:
        return "expert"
    if policy.startswith(("ws://", "wss://")):
        return "served"
    if FACTORY_PATTERN.fullmatch(policy) and not os.path.exists(policy):
        return "factory"
    return "checkpoint"


def check_policy(policy: str) -> None:
    """`EvalError` when `policy` names a checkpoint folder that is not one (served and factory policies are
    checked when they load)."""
    if policy_kind(policy) == "checkpoint":
        check_checkpoint_folder(policy)


#: EvalConfig fields that do not change an evaluation's episodes: a resumed run may differ in these.
RUN_ONLY_FIELDS = ("out", "progress", "backend", "address", "workers", "unit_size", "resume", "videos")


def check_backend(cfg: Any, error: type[ValueError]) -> None:
    """The backend options of an eval or suite config."""
    problem = backend_problem(cfg.backend, cfg.address, cfg.workers, cfg.unit_size)
    if problem:
        raise error(problem)


def _check_at_least_one(cfg: Any, names: tuple[str, ...], error: type[ValueError]) -> None:
    for name in names:
        if getattr(cfg, name) < 1:
            raise error(f"{name} must be at least 1, got {getattr(cfg, name)}")


# ---------------------------------------------------------------------------- vlagym eval
@dataclass
class EvalConfig(Config):
    """Options of `vlagym eval` / `evaluate()`."""

    policy: str
    """"expert" (each task's scripted expert), a checkpoint folder (model.safetensors + config.json), a policy
    server ws://HOST:PORT (openpi protocol) or package.module:factory (a batched policy, docs/serving.md)"""
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
    """"sync", "async" or "pool" (a worker per CPU, each stepping a slice; `vlagym.envs.pool`) vector env: the
    same episodes in each (the expert acts inside the workers' sub-envs)"""
    image_size: int | None = None
    """camera image side; unset means the checkpoint's (the env default for the expert's videos)"""
    cameras: list[str] | None = None
    """cameras of the image observation; unset means the checkpoint's"""
    n_action_steps: int | None = None
    """actions executed of each predicted chunk before the next prediction (1..chunk size), without temporal
    ensembling; unset means the checkpoint's"""
    temporal_ensemble: bool = False
    """predict every step and execute the average of the overlapping chunks' actions (ACT's temporal ensemble)"""
    served_mapping: dict[str, Any] = field(default_factory=dict)
    """a policy server's keys and action conversion (`vlagym.eval.served.ServedMapping` fields; empty: the LIBERO
    convention, or what a vlagym server announces)"""
    progress: bool = True
    """show a progress bar"""
    backend: str = "local"
    """"local" (this process and its vector env) or "ray" (workers on a Ray cluster, each with a vector env of
    num_envs; docs/ray.md): the same episodes"""
    address: str | None = None
    """Ray cluster to join ("auto", "HOST:6379", "ray://HOST:10001"); unset: $RAY_ADDRESS, else a new local one"""
    workers: int | None = None
    """Ray workers (one CPU each); unset: one per CPU of the cluster"""
    unit_size: int | None = None
    """Ray: episodes per work unit (unset: twice num_envs); the driver hands out a few hundred units a second,
    so a large cluster wants larger units (docs/ray.md). The episodes do not depend on it"""
    resume: bool = False
    """continue an interrupted evaluation in `out` with the same settings: only the episodes it lacks run"""

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
        else:
            check_policy(self.policy)
        if self.served_mapping and policy_kind(self.policy) != "served":
            raise EvalError("served_mapping is for a policy server (--policy ws://HOST:PORT)")
        _check_at_least_one(self, ("episodes", "num_envs"), EvalError)
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
        check_backend(self, EvalError)

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


# ---------------------------------------------------------------------------- vlagym eval --suite NAME
@dataclass
class SuiteRunConfig(Config):
    """Options of `vlagym eval --suite NAME`."""

    suite: str
    """benchmark suite name (`vlagym bench-suite list`)"""
    policy: str
    """"expert", a checkpoint folder (model.safetensors + config.json), a policy server ws://HOST:PORT or
    package.module:factory (docs/serving.md)"""
    out: str = "eval"
    """output folder (bundle.json, bundle.md)"""
    episodes: int | None = None
    """episodes per task and split; unset means the protocol's (a smaller number is a quick, partial run)"""
    num_envs: int = 1
    """parallel sub-envs; a checkpoint's outcomes can depend on it, so it is part of the reproduction command"""
    vectorization: str = "sync"
    """"sync", "async" or "pool" (a worker per CPU, each stepping a slice; `vlagym.envs.pool`) vector env: the
    same episodes in each (the expert acts inside the workers' sub-envs)"""
    progress: bool = True
    """show a progress bar"""
    language_controls: bool = False
    """also run the language controls (correct / empty / swapped instruction) where a task supports them"""
    videos: int = 0
    """per task and split, record this many episodes as mp4, taking each outcome in turn (failures first)"""
    sequential_width: float | None = None
    """sequential stopping: a task x split stops once its Wilson 95% interval is at most this wide (a fraction,
    0.2 = 20 points); unset runs every episode"""
    sequential_min_episodes: int = SEQUENTIAL_MIN_EPISODES
    """sequential stopping: never stop before this many episodes"""
    served_mapping: dict[str, Any] = field(default_factory=dict)
    """a policy server's keys and action conversion (`vlagym.eval.served.ServedMapping` fields)"""
    backend: str = "local"
    """"local" or "ray" (workers on a Ray cluster, each with a vector env of num_envs; docs/ray.md)"""
    address: str | None = None
    """Ray cluster to join ("auto", "HOST:6379", "ray://HOST:10001"); unset: $RAY_ADDRESS, else a new local one"""
    workers: int | None = None
    """Ray workers (one CPU each); unset: one per CPU of the cluster"""
    unit_size: int | None = None
    """Ray: episodes per work unit (unset: twice num_envs); the driver hands out a few hundred units a second,
    so a large cluster wants larger units (docs/ray.md). The episodes do not depend on it"""
    resume: bool = False
    """continue an interrupted run in `out` with the same settings: only the episodes it lacks run"""

    def __post_init__(self) -> None:
        from vlagym.eval.suites import get_suite  # here: the suites check their tasks' env classes (mujoco)

        protocol = get_suite(self.suite)  # SuiteError (a ValueError) naming the known suites
        if self.episodes is not None and self.episodes < 1:
            raise EvalError(f"episodes must be at least 1, got {self.episodes}")
        self._check_sequential(protocol.episodes if self.episodes is None else self.episodes)
        if self.videos < 0:
            raise EvalError(f"videos must be non-negative, got {self.videos}")
        if self.num_envs < 1:
            raise EvalError(f"num_envs must be at least 1, got {self.num_envs}")
        if self.vectorization not in VECTORIZATION_MODES:
            raise EvalError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {self.vectorization!r}")
        if self.policy != EXPERT:
            check_policy(self.policy)  # EvalError naming what is missing
        if self.served_mapping and policy_kind(self.policy) != "served":
            raise EvalError("served_mapping is for a policy server (--policy ws://HOST:PORT)")
        check_backend(self, EvalError)

    def _check_sequential(self, episodes: int) -> None:
        width, least = self.sequential_width, self.sequential_min_episodes
        if width is None:
            if least != SEQUENTIAL_MIN_EPISODES:
                raise EvalError(
                    f"sequential_min_episodes (--sequential-min-episodes) is {least} but sequential stopping is off: "
                    "set sequential_width (--sequential-width) too"
                )
            return
        if not 0 < width <= 1:  # False for NaN too
            raise EvalError(
                f"sequential_width (--sequential-width) must be in (0, 1] (a fraction: 0.2 is 20 points), got {width}"
            )
        if least < 1:
            raise EvalError(f"sequential_min_episodes (--sequential-min-episodes) must be at least 1, got {least}")
        if least > episodes:
            raise EvalError(
                f"sequential_min_episodes (--sequential-min-episodes) is {least}, more than the {episodes} episodes "
                "per task and split: sequential stopping could never apply"
            )


# ---------------------------------------------------------------------------- vlagym curve
@dataclass
class CurveConfig(Config):
    """Options of `vlagym curve` / `run_curve()`."""

    run: str
    """run folder of `vlagym train-bc` or `vlagym train-rl` (checkpoints/step_N inside)"""
    out: str | None = None
    """output folder; unset: RUN/test_curve"""
    episodes: int = 50
    """episodes per point (per task)"""
    num_envs: int = 1
    """parallel sub-envs of the vector env"""
    seed: int = 100_000
    """episode i uses seed + i at every point; pick seeds training never used (e.g. 200000 for a test set)"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """env kwargs overriding the checkpoints', e.g. {"split": "heldout_paraphrase"}"""
    every: int = 1
    """evaluate every this many checkpoints (in step order), and always the last"""
    start: str | None = None
    """the checkpoint the run started from, evaluated as point 0; unset: the BC checkpoint a post-training run
    names (``bc_checkpoint`` in its checkpoints' config), when it still exists"""
    include_start: bool = True
    """evaluate the start point and pair every point with it; off: the run's checkpoints alone"""
    vectorization: str = "sync"
    """"sync", "async" or "pool" (a worker per CPU, each stepping a slice; `vlagym.envs.pool`) vector env"""
    n_action_steps: int | None = None
    """actions executed of each predicted chunk (no ensembling); unset: each checkpoint's own"""
    temporal_ensemble: bool = False
    """execute the temporal ensemble of the overlapping chunks at every point"""
    progress: bool = True
    """show a progress bar per evaluation"""

    def __post_init__(self) -> None:
        if not Path(self.run).is_dir():
            raise CurveError(f"run folder {self.run!r} does not exist")
        _check_at_least_one(self, ("episodes", "num_envs", "every"), CurveError)
        if self.seed < 0:
            raise CurveError(f"seed must be non-negative, got {self.seed}")
        if self.vectorization not in VECTORIZATION_MODES:
            raise CurveError(f"vectorization must be one of {list(VECTORIZATION_MODES)}, got {self.vectorization!r}")
        if not isinstance(self.env_kwargs, dict):
            raise CurveError(f"env_kwargs must be a JSON object, got {self.env_kwargs!r}")
        if self.start is not None and not self.include_start:
            raise CurveError("give a start checkpoint or leave the start out, not both")

    @property
    def out_dir(self) -> Path:
        """The output folder: `out`, or RUN/test_curve."""
        return Path(self.out) if self.out is not None else Path(self.run) / "test_curve"


# ---------------------------------------------------------------------------- vlagym compare / replicates
def _check_metric_and_alpha(metric: str, alpha: float) -> None:
    if metric not in METRICS:
        raise PairingError(f"--metric must be one of {list(METRICS)}, got {metric!r}")
    if not 0 < alpha < 1:
        raise PairingError(f"--alpha must be between 0 and 1, got {alpha}")


@dataclass
class CompareConfig(Config):
    """Options of `vlagym compare A B`: paired comparison of two runs of the same protocol."""

    a: str
    """run A: a bundle folder or bundle.json (or an eval folder / results.json)"""
    b: str
    """run B, same protocol and seeds as A"""
    metric: str = "success"
    """the outcome compared: success (at any step) or success_at_end"""
    alpha: float = ALPHA
    """significance level of McNemar's exact test"""
    by: Literal["task", "split"] = "task"
    """one test per task (over its splits) or per split (over its tasks), then all episodes"""
    json: bool = False
    """print the comparison as JSON"""

    def __post_init__(self) -> None:
        _check_metric_and_alpha(self.metric, self.alpha)
        if self.by not in GROUPINGS:
            raise PairingError(f"--by must be one of {list(GROUPINGS)}, got {self.by!r}")


@dataclass
class ReplicatesConfig(Config):
    """Options of `vlagym replicates BASELINE RUN [RUN ...]`: replicate runs of one recipe against one baseline."""

    baseline: str
    """the baseline run (e.g. the BC checkpoint's evaluation): bundle or eval folder"""
    runs: list[str]
    """the replicate runs (e.g. one post-training seed each), same protocol and seeds as the baseline"""
    metric: str = "success"
    """the outcome compared: success (at any step) or success_at_end"""
    alpha: float = ALPHA
    """significance level of the per-run tests and of the interval across runs"""
    json: bool = False
    """print the result as JSON"""

    def __post_init__(self) -> None:
        _check_metric_and_alpha(self.metric, self.alpha)
        if not self.runs:
            raise PairingError("give at least one run beside the baseline")
        if len(set(self.runs)) != len(self.runs):
            raise PairingError(f"a run is given twice: {self.runs}")


# ---------------------------------------------------------------------------- vlagym serve
@dataclass
class ServeConfig(Config):
    """Options of `vlagym serve CHECKPOINT`: a checkpoint served over the openpi websocket protocol."""

    checkpoint: str
    """a vlagym policy checkpoint folder"""
    host: str = "127.0.0.1"
    """address to listen on (0.0.0.0: every interface)"""
    port: int = 8000
    """port to listen on (0: any free port, printed)"""
    n_action_steps: int | None = None
    """actions of each chunk a client executes (announced to vlagym clients); unset means the checkpoint's"""

    def __post_init__(self) -> None:
        check_checkpoint_folder(self.checkpoint)
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise EvalError(f"port must be between 0 and 65535, got {self.port!r}")
        if self.n_action_steps is not None and self.n_action_steps < 1:
            raise EvalError(f"n_action_steps must be at least 1, got {self.n_action_steps}")
