"""`BenchConfig`, the options of `vlagym bench`, and the budgets of a full and a quick run.

Imports neither torch nor mujoco (nor the task modules, which import mujoco), so the CLI's `--help` can be
built from this module alone; the sections import what they measure when they run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vlagym.config import Config

SECTIONS = ("env", "env-parts", "render", "vector", "dataset", "bc", "latency", "ppo", "filtered-bc", "rollouts")
#: what `vlagym bench` runs unless --sections says otherwise: "rollouts" starts a Ray cluster (vlagym[ray])
DEFAULT_SECTIONS = SECTIONS[:-1]
DEVICES = ("cpu", "cuda")
MAIN_TASK = "VLA-PickCup-v0"  # the quickstart task: first in the default task list, the one-task sections use it
CAMERAS = ("front", "wrist")
#: a small VLA for --quick: every code path, a fraction of the compute
TINY_POLICY = {"vision_channels": (8, 16), "hidden_dim": 32, "text_layers": 1, "chunk_size": 4}


class BenchError(ValueError):
    """Bad benchmark input (an unknown section or task, a bad number, a file that is not a benchmark)."""


@dataclass(frozen=True)
class Budget:
    """How much each section measures."""

    repeats: int
    """interleaved passes per measurement: the default of `BenchConfig.repeats`"""
    env_steps: int
    """state-mode env steps per task and pass (split into `env_rounds` rounds); rgb gets a quarter"""
    env_rounds: int
    """rounds per pass alternating the env and its raw-physics replay (the pass's ratio is their median)"""
    render_images: int
    """camera images per render setting and pass"""
    vector_steps: int
    """env steps per vector-env configuration and pass, in vector steps of the sub-envs (the first 10 vector
    steps, or half, are warm-up)"""
    vector_sizes: tuple[int, ...]
    """the sub-env counts the vector section measures (beside one env alone)"""
    demo_episodes: int
    """synthetic demo file: episodes"""
    demo_steps: int
    """synthetic demo file: steps per episode"""
    dataset_epochs: int
    """epochs read per DataLoader measurement and pass"""
    dataset_workers: tuple[int, ...]
    """DataLoader worker counts, one row each"""
    batch_size: int
    """dataset and BC batch size"""
    bc_steps: int
    """BC optimiser steps per pass (each pass trains anew)"""
    latency_calls: int
    """timed `select_action` calls per row"""
    ppo_envs: int
    """PPO sub-envs"""
    ppo_n_steps: int
    """PPO RL steps per sub-env per rollout"""
    ppo_iterations: int
    """PPO rollout + update iterations (at least 2: the update time is logged at the next rollout)"""
    fbc_episodes: int
    """filtered-BC collection episodes per round (2 rounds per pass, on `ppo_envs` sub-envs)"""
    fbc_updates: int
    """filtered-BC optimiser steps per round"""
    rollout_episodes: int
    """rollouts: expert episodes per measurement (each backend runs the same seeds)"""


FULL = Budget(
    repeats=3,
    env_steps=2000,
    env_rounds=5,
    render_images=200,
    vector_steps=600,
    vector_sizes=(2, 8, 16),
    demo_episodes=50,
    demo_steps=40,
    dataset_epochs=3,
    dataset_workers=(0, 2),
    batch_size=32,
    bc_steps=100,
    latency_calls=1000,
    ppo_envs=2,
    ppo_n_steps=64,
    ppo_iterations=4,
    fbc_episodes=8,
    fbc_updates=60,
    rollout_episodes=24,
)
QUICK = Budget(
    repeats=1,
    env_steps=40,
    env_rounds=2,
    render_images=4,
    vector_steps=12,
    vector_sizes=(2,),
    demo_episodes=3,
    demo_steps=12,
    dataset_epochs=1,
    dataset_workers=(0,),
    batch_size=8,
    bc_steps=3,
    latency_calls=5,
    ppo_envs=1,
    ppo_n_steps=4,
    ppo_iterations=2,
    fbc_episodes=1,
    fbc_updates=2,
    rollout_episodes=4,
)


def known_tasks() -> list[str]:
    """Every registered task id (imported here, not at module level: the task modules import mujoco)."""
    from vlagym.envs import TASKS

    return sorted(TASKS)


def single_tasks() -> list[str]:
    """Every registered task except the multi-task env, `MAIN_TASK` first."""
    rest = [t for t in known_tasks() if t not in (MAIN_TASK, "VLA-MultiTask-v0")]
    return [MAIN_TASK, *rest]


@dataclass
class BenchConfig(Config):
    """Options of `run_bench` (and `vlagym bench`); saved in the output JSON."""

    sections: list[str] = field(default_factory=lambda: list(DEFAULT_SECTIONS))
    """the sections to run, in this order (see `SECTIONS`; "rollouts", the Ray backend, only when named)"""
    tasks: list[str] | None = None
    """env section: task ids (the other sections use the first); None: every single task, or only
    VLA-PickCup-v0 with `quick`"""
    quick: bool = False
    """tiny budgets and a tiny VLA: checks that every section runs, its numbers mean little (the latency
    section exports only the first head to ONNX: each export takes 15-30 s)"""
    out: str | None = "bench.json"
    """write the results here as JSON (None: do not write)"""
    threads: int = 1
    """torch intra-op threads (1 is fastest for the small VLA on a machine whose cores are busy)"""
    image_size: int = 64
    """camera images (env rgb, vector rgb, render, demo file, policy input), px; 64 is the quickstart's"""
    device: str = "cpu"
    """torch device of the bc, latency and ppo sections: "cpu" or "cuda\""""
    demos: str | None = None
    """dataset/bc/ppo: a demo file (`vlagym demos`) instead of the synthetic one"""
    policy: str | None = None
    """latency: a checkpoint folder instead of freshly initialised policies of both heads"""
    pin: bool = True
    """env and render sections: pin the process to one core (restored afterwards)"""
    repeats: int | None = None
    """interleaved passes per measurement, each table cell their median (latency excepted); None: 3, or 1
    with `quick`"""

    def __post_init__(self) -> None:
        if self.repeats is None:
            self.repeats = self.budget.repeats
        self.sections = list(self.sections)
        unknown = [s for s in self.sections if s not in SECTIONS]
        if unknown or not self.sections:
            raise BenchError(f"unknown sections {unknown or '(none given)'}; known sections: {', '.join(SECTIONS)}")
        if self.tasks is not None:
            self.tasks = [str(t).removeprefix("vlagym:") for t in self.tasks]
            known = known_tasks()
            bad = [t for t in self.tasks if t not in known] or ([] if self.tasks else ["(none given)"])
            if bad:
                raise BenchError(f"unknown tasks {bad}; known tasks: {', '.join(known)}")
        for name, low in (("threads", 1), ("image_size", 16), ("repeats", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise BenchError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.device not in DEVICES:
            raise BenchError(f"device must be one of {list(DEVICES)}, got {self.device!r}")
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise BenchError("device 'cuda' asked for, but torch.cuda is not available on this machine")
        if self.demos is not None and not Path(self.demos).is_file():
            raise BenchError(f"demo file {self.demos!r} does not exist")
        if self.policy is not None and not (Path(self.policy) / "config.json").is_file():
            raise BenchError(f"{self.policy!r} is not a checkpoint folder (no config.json in it)")
        if self.out is not None and not Path(self.out).parent.is_dir():
            raise BenchError(f"the folder of --out {self.out!r} does not exist")

    @property
    def budget(self) -> Budget:
        return QUICK if self.quick else FULL

    @property
    def task_list(self) -> list[str]:
        if self.tasks:
            return list(self.tasks)
        return [MAIN_TASK] if self.quick else single_tasks()
