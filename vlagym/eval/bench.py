"""Speed benchmarks of the whole loop, measured side by side in one run (`vlagym bench`).

Sections, each a function ``(cfg, work) -> Table`` of rows:

    env      per task: env steps/s with state and with rgb observations beside the raw physics limit (the
             same model replaying the very same controls from the same states with `mujoco.mj_step` alone,
             alternated in rounds; median ratio), and reset time; the process pinned to one core
    render   what MuJoCo's default visual settings would cost per camera image, one setting at a time
    vector   env steps/s of `gym.make_vec`: sync/async with 1 and 2 sub-envs, state and rgb
    dataset  `DemoDataset` samples/s through a DataLoader, plain and with `ImageAugment`, per worker count
    bc       behaviour-cloning samples/s of `train_bc` (from its TensorBoard log, start-up excluded)
    latency  `select_action` p50/p99 at batch 1: the chunk queue, predicting every call, temporal ensembling
    ppo      PPO env steps/s of `train_rl` (rollout only, and rollout + update), from scratch on state
             (SB3's MlpPolicy) and post-training the VLA on rgb

Every rate of the env, render, vector, dataset, bc and ppo tables is the median of `repeats` passes, run
interleaved: pass 1 of every measurement of a table (of the env table: of one task's columns, task after
task), then pass 2 of every one, and so on, so that slow drifts of the machine's speed hit all of them alike;
ratios between rows are taken within each pass, then their median. Every pass's value stays in the row's
`samples` (metric -> values in pass order). Latency reports p50/p99 over its many calls instead.

The dataset, bc and ppo sections share one demo file (synthetic, in the real layout, unless `demos` names
one) and one BC checkpoint (the bc section's), in a temporary folder removed at the end.

`run_bench` returns a JSON-ready document (config, fingerprint, every section's rows); `compare_runs` pairs
the rows of two such documents and gives new / old per metric. Numbers are for comparison within one run,
or between two runs on the same quiet machine; they are never asserted in tests.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import gymnasium as gym
import h5py
import mujoco
import numpy as np

import vlagym
from vlagym.eval.suite_run import machine_fingerprint
from vlagym.io import atomic_write_json
from vlagym.train import layout

logger = logging.getLogger(__name__)
T = TypeVar("T")

FORMAT = "vlagym-bench"
FORMAT_VERSION = 1
SECTIONS = ("env", "render", "vector", "dataset", "bc", "latency", "ppo", "filtered-bc")
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
    """vector steps per vector-env configuration and pass (the first 10, or half, are warm-up)"""
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


FULL = Budget(
    repeats=3,
    env_steps=2000,
    env_rounds=5,
    render_images=200,
    vector_steps=600,
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
)
QUICK = Budget(
    repeats=1,
    env_steps=40,
    env_rounds=2,
    render_images=4,
    vector_steps=12,
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
)


def single_tasks() -> list[str]:
    """Every registered task except the multi-task env, `MAIN_TASK` first."""
    rest = sorted(t for t in vlagym.TASKS if t not in (MAIN_TASK, "VLA-MultiTask-v0"))
    return [MAIN_TASK, *rest]


@dataclass
class BenchConfig:
    """Options of `run_bench` (and `vlagym bench`); saved in the output JSON."""

    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    """the sections to run, in this order (see `SECTIONS`)"""
    tasks: list[str] | None = None
    """env section: task ids (the other sections use the first); None: every single task, or only
    VLA-PickCup-v0 with `quick`"""
    quick: bool = False
    """tiny budgets and a tiny VLA: checks that every section runs, its numbers mean little"""
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
            bad = [t for t in self.tasks if t not in vlagym.TASKS] or ([] if self.tasks else ["(none given)"])
            if bad:
                raise BenchError(f"unknown tasks {bad}; known tasks: {', '.join(sorted(vlagym.TASKS))}")
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Table:
    """One section's results: rows of equal keys, the `key` columns name a row (compare pairs rows on them)."""

    section: str
    title: str
    key: list[str]
    columns: dict[str, str]
    """column -> header, in display order"""
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------- repeated passes
def interleaved(measures: dict[str, Callable[[], T]], repeats: int, section: str = "") -> dict[str, list[T]]:
    """Pass 1 of every measurement (in the dict's order), then pass 2 of every one, ...; each one's results
    in pass order.

    A slow drift of the machine's speed (a background job, throttling) then hits every measurement alike,
    instead of whichever ran last, and ratios between them taken within a pass stay fair.
    """
    samples: dict[str, list[T]] = {name: [] for name in measures}
    for p in range(repeats):
        for name, measure in measures.items():
            logger.info("%s: %s, pass %d/%d", section, name, p + 1, repeats)
            samples[name].append(measure())
    return samples


def transpose(passes: Sequence[dict[str, T]]) -> dict[str, list[T]]:
    """Per-pass dicts of metrics -> metric: the values in pass order."""
    return {k: [d[k] for d in passes] for k in passes[0]}


def ratios(values: Sequence[float], bases: Sequence[float]) -> list[float]:
    """Pass by pass `value / base` (the same pass's, so a drift between passes cancels)."""
    return [v / b if b else math.nan for v, b in zip(values, bases, strict=True)]


def summarise(samples: dict[str, Sequence[float]]) -> dict[str, Any]:
    """Row cells: per metric the median of its passes, and every pass's value under "samples"."""
    row: dict[str, Any] = {k: float(np.median(v)) for k, v in samples.items()}
    row["samples"] = {k: [float(x) for x in v] for k, v in samples.items()}
    return row


def passes_note(repeats: int) -> str:
    """The footnote saying what a cell of a repeated table is."""
    if repeats == 1:
        return "a single pass per cell (--repeats 1)"
    return f"median of {repeats} interleaved passes (ratios: median of each pass's ratio)"


class _Work:
    """What the sections share: a scratch folder, the demo file and the BC checkpoint (each made once)."""

    def __init__(self, cfg: BenchConfig, folder: Path):
        self.cfg, self.folder = cfg, folder
        self._demos: Path | None = Path(cfg.demos) if cfg.demos else None
        self.checkpoint: Path | None = None

    def demo_file(self) -> Path:
        if self._demos is None:
            b = self.cfg.budget
            start = time.perf_counter()
            self._demos = write_synthetic_demos(
                self.folder / "synthetic.hdf5",
                self.cfg.task_list[0],
                b.demo_episodes,
                b.demo_steps,
                self.cfg.image_size,
            )
            logger.info("wrote a synthetic demo file in %.1f s", time.perf_counter() - start)
        return self._demos

    def bc_checkpoint(self) -> Path:
        if self.checkpoint is None:
            bc_pass(self.cfg, self)  # sets it
        assert self.checkpoint is not None
        return self.checkpoint

    def new_folder(self, prefix: str) -> Path:
        """A fresh scratch folder (one per training pass)."""
        return Path(tempfile.mkdtemp(prefix=f"{prefix}_", dir=self.folder))


# ---------------------------------------------------------------------------- env and render
@contextlib.contextmanager
def pinned_to_one_core(enabled: bool) -> Iterator[str]:
    """Pin the process to its first allowed core while inside (one core: no migration, no SMT sibling noise)."""
    if not (enabled and hasattr(os, "sched_setaffinity")):
        yield "not pinned"
        return
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    try:
        yield f"pinned to core {core}"
    finally:
        os.sched_setaffinity(0, before)


def rollout_with_log(env: gym.Env, steps: int, seed: int) -> tuple[float, list[dict[str, Any]], float]:
    """Random actions for `steps` env steps (resetting at episode end).

    Returns step seconds (resets excluded); per episode the model as that episode had it (tasks move fixtures
    and switch parked objects' contacts per episode), its start state, the controls and the final qpos; and
    seconds per reset.
    """
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, size=(steps, 7)).astype(np.float32)
    u = env.unwrapped
    env.reset(seed=seed)  # warm-up: the first reset creates the renderer
    episodes: list[dict[str, Any]] = []
    step_time = reset_time = 0.0

    def start_episode(episode_seed: int) -> None:
        nonlocal reset_time
        t = time.perf_counter()
        env.reset(seed=episode_seed)
        reset_time += time.perf_counter() - t
        episodes.append({"model": copy.copy(u.model), "state": u.sim_state(), "ctrls": [], "final_qpos": None})

    start_episode(seed)
    for i, a in enumerate(actions):
        t = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(a)
        step_time += time.perf_counter() - t
        episodes[-1]["ctrls"].append(u.data.ctrl.copy())
        episodes[-1]["final_qpos"] = u.data.qpos.copy()
        if terminated or truncated:
            start_episode(seed + i + 1)
    if not episodes[-1]["ctrls"]:
        episodes.pop()
    return step_time, episodes, reset_time / (len(episodes) + 1)


def raw_physics_time(env: gym.Env, episodes: list[dict[str, Any]]) -> tuple[float, bool]:
    """Seconds `mj_step` alone takes for the same models, substeps, controls and start states, and whether
    the replay ended every episode in exactly the env's state (it must)."""
    n_substeps = env.unwrapped.n_substeps
    total, identical = 0.0, True
    for ep in episodes:
        m = ep["model"]
        d = mujoco.MjData(m)
        mujoco.mj_setState(m, d, ep["state"], mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(m, d)
        t = time.perf_counter()
        for c in ep["ctrls"]:
            d.ctrl[:] = c
            mujoco.mj_step(m, d, nstep=n_substeps)
        total += time.perf_counter() - t
        identical &= bool(np.array_equal(d.qpos, ep["final_qpos"]))
    return total, identical


def state_pass(env: gym.Env, steps: int, rounds: int) -> dict[str, Any]:
    """One pass of a state env: `rounds` blocks of `steps` env steps, each followed by its raw-physics replay.

    Alternating in blocks makes drifts of the machine's speed hit both sides alike; the env / physics ratio
    is the median over the blocks. Every block replays the same seeds in every pass: passes do equal work.
    """
    step_total = raw_total = reset_total = 0.0
    block_ratios, identical = [], True
    for r in range(rounds):
        step_s, episodes, reset_s = rollout_with_log(env, steps, seed=1000 * r)
        raw_s, same = raw_physics_time(env, episodes)
        step_total, raw_total, reset_total = step_total + step_s, raw_total + raw_s, reset_total + reset_s
        block_ratios.append(step_s / raw_s)
        identical &= same
    return {
        "state_steps_per_s": steps * rounds / step_total,
        "raw_physics_steps_per_s": steps * rounds / raw_total,
        "env_over_physics": float(np.median(block_ratios)),
        "reset_state_ms": reset_total / rounds * 1e3,
        "replay_identical": identical,
    }


def rgb_pass(env: gym.Env, steps: int) -> dict[str, float]:
    """One pass of an rgb env: steps/s and reset time."""
    step_s, _, reset_s = rollout_with_log(env, steps, seed=0)
    return {"rgb_steps_per_s": steps / step_s, "reset_rgb_ms": reset_s * 1e3}


def bench_task(task: str, steps: int, rounds: int, image_size: int, repeats: int = 1) -> dict[str, Any]:
    """State and rgb rates, the physics limit and reset times of one task: medians of `repeats` interleaved
    passes (a state pass, then an rgb pass, then the next state pass, ...)."""
    per_round, rgb_steps = max(steps // rounds, 10), max(steps // 4, 10)
    with contextlib.ExitStack() as stack:
        state = gym.make(task, obs_mode="state")
        stack.callback(state.close)
        rgb = gym.make(task, obs_mode="rgb", image_size=image_size, cameras=CAMERAS)
        stack.callback(rgb.close)
        samples = interleaved(
            {"state": lambda: state_pass(state, per_round, rounds), "rgb": lambda: rgb_pass(rgb, rgb_steps)},
            repeats,
            f"env {task}",
        )
    metrics = {**transpose(samples["state"]), **transpose(samples["rgb"])}
    identical = all(metrics.pop("replay_identical"))
    return {"task": task, "replay_identical": identical, **summarise(metrics)}


def bench_env(cfg: BenchConfig, work: _Work) -> Table:
    b = cfg.budget
    with pinned_to_one_core(cfg.pin) as pinning:
        rows = [bench_task(task, b.env_steps, b.env_rounds, cfg.image_size, cfg.repeats) for task in cfg.task_list]
    return Table(
        "env",
        "Env steps/s per task beside the raw physics limit",
        ["task"],
        {
            "task": "task",
            "state_steps_per_s": "state steps/s",
            "raw_physics_steps_per_s": "raw mj_step steps/s",
            "env_over_physics": f"env / physics time (median of {b.env_rounds} rounds)",
            "replay_identical": "replay identical",
            "rgb_steps_per_s": "rgb steps/s",
            "reset_state_ms": "reset ms (state)",
            "reset_rgb_ms": "reset ms (rgb)",
        },
        rows,
        [
            f"{pinning}; rgb: front + wrist cameras at {cfg.image_size}x{cfg.image_size}, random actions",
            "raw mj_step: the same models, substeps, controls and start states, replayed with mujoco.mj_step alone",
            passes_note(cfg.repeats),
        ],
    )


#: visual settings changed one at a time (against the scene's own), to show why the scene turns them off
RENDER_ABLATION: dict[str, dict[str, Any]] = {
    "vlagym scene settings": {},
    "+ 4x multisampling": {"offsamples": 4},
    "+ 4096^2 shadow map, shadows on": {"shadowsize": 4096, "castshadow": True},
    "+ default tessellation (28x16)": {"numslices": 28, "numstacks": 16},
    "+ 640x480-sized offscreen buffer": {"buffer": 640},
    "MuJoCo defaults, all of the above": {
        "offsamples": 4,
        "shadowsize": 4096,
        "castshadow": True,
        "numslices": 28,
        "numstacks": 16,
        "buffer": 640,
    },
}
_QUALITY = ("shadowsize", "offsamples", "numslices", "numstacks")


def render_cost(env: gym.Env, size: int, images: int, **changes: Any) -> float:
    """Microseconds per camera image with some visual settings changed (restored afterwards)."""
    u = env.unwrapped
    m = u.model
    saved = {k: getattr(m.vis.quality, k) for k in _QUALITY}
    castshadow = m.light_castshadow.copy()
    offsize = (m.vis.global_.offwidth, m.vis.global_.offheight)
    try:
        for k in _QUALITY:
            if k in changes:
                setattr(m.vis.quality, k, changes[k])
        if changes.get("castshadow"):
            m.light_castshadow[:] = 1
        m.vis.global_.offwidth = m.vis.global_.offheight = changes.get("buffer", size)
        renderer = mujoco.Renderer(m, size, size)
        try:
            for _ in range(3):
                renderer.update_scene(u.data, camera="front")
                renderer.render()
            t = time.perf_counter()
            for i in range(images):
                renderer.update_scene(u.data, camera=CAMERAS[i % 2])
                renderer.render()
            return (time.perf_counter() - t) / images * 1e6
        finally:
            renderer.close()
    finally:
        for k, v in saved.items():
            setattr(m.vis.quality, k, v)
        m.light_castshadow[:] = castshadow
        m.vis.global_.offwidth, m.vis.global_.offheight = offsize


def bench_render(cfg: BenchConfig, work: _Work) -> Table:
    task, size = cfg.task_list[0], cfg.image_size
    env = gym.make(task, obs_mode="rgb", image_size=size, cameras=CAMERAS)
    try:
        env.reset(seed=0)
        with pinned_to_one_core(cfg.pin) as pinning:
            costs = interleaved(
                {
                    name: functools.partial(render_cost, env, size, cfg.budget.render_images, **changes)
                    for name, changes in RENDER_ABLATION.items()
                },
                cfg.repeats,
                "render",
            )
    finally:
        env.close()
    base = costs["vlagym scene settings"]
    rows = [
        {"setting": name, **summarise({"us_per_image": us, "x_vlagym": ratios(us, base)})} for name, us in costs.items()
    ]
    return Table(
        "render",
        f"What MuJoCo's default visual settings would cost per {size}x{size} image ({task})",
        ["setting"],
        {"setting": "render setting", "us_per_image": "us per image", "x_vlagym": "x vlagym"},
        rows,
        [f"{pinning}; {cfg.budget.render_images} images per setting and pass", passes_note(cfg.repeats)],
    )


# ---------------------------------------------------------------------------- vector envs
VECTOR_CONFIGS = (("sync", 1), ("async", 1), ("sync", 2), ("async", 2))


def vector_steps_per_s(task: str, mode: str, num_envs: int, steps: int, **kwargs: Any) -> float:
    """Env steps/s (all sub-envs together) of random actions after a warm-up (renderers, first contacts)."""
    warmup = min(10, steps // 2)
    envs = gym.make_vec(task, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    try:
        rng = np.random.default_rng(0)
        actions = rng.uniform(-1, 1, (steps, num_envs, 7)).astype(np.float32)
        envs.reset(seed=0)
        for a in actions[:warmup]:
            envs.step(a)
        t = time.perf_counter()
        for a in actions[warmup:]:
            envs.step(a)
        return (steps - warmup) * num_envs / (time.perf_counter() - t)
    finally:
        envs.close()


def bench_vector(cfg: BenchConfig, work: _Work) -> Table:
    task = cfg.task_list[0]
    obs_modes = {"state": {"obs_mode": "state"}, "rgb": {"obs_mode": "rgb", "image_size": cfg.image_size}}

    def label(obs: str, mode: str, n: int) -> str:
        return f"{obs} {mode} x{n}"

    rates = interleaved(
        {
            label(obs, mode, n): functools.partial(vector_steps_per_s, task, mode, n, cfg.budget.vector_steps, **kw)
            for obs, kw in obs_modes.items()
            for mode, n in VECTOR_CONFIGS
        },
        cfg.repeats,
        "vector",
    )
    rows = []
    for obs in obs_modes:
        base = rates[label(obs, *VECTOR_CONFIGS[0])]
        for mode, n in VECTOR_CONFIGS:
            r = rates[label(obs, mode, n)]
            rows.append(
                {"obs": obs, "mode": mode, "num_envs": n, **summarise({"steps_per_s": r, "x_sync_1": ratios(r, base)})}
            )
    return Table(
        "vector",
        f"Vector-env scaling ({task}, env steps/s of all sub-envs together)",
        ["obs", "mode", "num_envs"],
        {"obs": "obs", "mode": "mode", "num_envs": "sub-envs", "steps_per_s": "steps/s", "x_sync_1": "x sync x1"},
        rows,
        [f"{os.cpu_count()} CPUs; random actions; rgb at {cfg.image_size} px", passes_note(cfg.repeats)],
    )


# ---------------------------------------------------------------------------- dataset
def synthetic_images(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """`n` frames of a few coloured boxes drifting over a banded background.

    Bands of flat colour like a shaded table and wall: rendered frames gzip about 20-30x, and so do these
    (random noise would be stored uncompressed by gzip and decode unrealistically fast).
    """
    yy, xx = np.mgrid[0:size, 0:size]
    background = np.stack([xx * 8 // size, yy * 8 // size, np.full_like(xx, 3)], axis=-1) * 25.0
    frames = np.empty((n, size, size, 3), np.uint8)
    boxes = rng.uniform(0, size * 0.8, (4, 2))
    colors = rng.uniform(0, 255, (4, 3))
    velocity = rng.uniform(-1.5, 1.5, (4, 2))
    for t in range(n):
        img = background.copy()
        for (x, y), color in zip(boxes + t * velocity, colors, strict=True):
            x0, y0 = int(np.clip(x, 0, size - 8)), int(np.clip(y, 0, size - 8))
            img[y0 : y0 + size // 6, x0 : x0 + size // 6] = color
        frames[t] = np.clip(img, 0, 255)
    return frames


def write_synthetic_demos(path: Path, task: str, episodes: int, steps: int, image_size: int, seed: int = 0) -> Path:
    """A demo file in the layout of `vlagym.train.layout` with synthetic contents, the shapes taken from `task`.

    Compressed like `vlagym demos` writes (gzip, one frame per chunk), so reading it costs what reading
    collected demos costs; writing it costs no simulation.
    """
    env_kwargs = {"obs_mode": "rgb+state", "image_size": image_size, "cameras": list(CAMERAS)}
    env = gym.make(task, **env_kwargs)
    try:
        obs, _ = env.reset(seed=seed)
        u = env.unwrapped
        state_size = mujoco.mj_stateSize(u.model, mujoco.mjtState.mjSTATE_INTEGRATION)
    finally:
        env.close()
    proprio_dim, state_dim, action_dim = len(obs["proprio"]), len(obs["state"]), env.action_space.shape[0]
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs.update(
            format=layout.FORMAT,
            format_version=layout.FORMAT_VERSION,
            vlagym_version=vlagym.__version__,
            mujoco_version=mujoco.__version__,
            created=datetime.now(timezone.utc).isoformat(),
        )
        data = f.create_group("data")
        data.attrs.update(
            env_id=task,
            env_kwargs=json.dumps(env_kwargs),
            total=episodes * steps,
            obs_keys=json.dumps([layout.image_key(c) for c in CAMERAS] + ["proprio", "state"]),
        )
        for i in range(episodes):
            g = data.create_group(layout.demo_name(i))
            o = g.create_group("obs")
            for cam in CAMERAS:
                o.create_dataset(
                    layout.image_key(cam),
                    data=synthetic_images(rng, steps, image_size),
                    chunks=(1, image_size, image_size, 3),
                    compression="gzip",
                )
            o.create_dataset("proprio", data=rng.normal(size=(steps, proprio_dim)).astype(np.float32))
            o.create_dataset("state", data=rng.normal(size=(steps, state_dim)).astype(np.float32))
            g.create_dataset("actions", data=rng.uniform(-1, 1, (steps, action_dim)).astype(np.float32))
            g.create_dataset("rewards", data=np.zeros(steps, np.float32))
            g.create_dataset("dones", data=(np.arange(steps) == steps - 1).astype(np.uint8))
            g.create_dataset("states", data=rng.normal(size=(steps, state_size)))
            g.attrs.update(num_samples=steps, seed=i, instruction=obs["instruction"], success=True, task=task)
            g.attrs["complete"] = True  # last, as the collector does: a demo without it is unfinished
    return path


def loader_samples_per_s(dataset: Any, workers: int, batch_size: int, epochs: int) -> float:
    """Samples/s of `epochs` shuffled epochs through one DataLoader (persistent workers, start-up included)."""
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(0),
    )
    start = time.perf_counter()
    count = 0
    for _ in range(epochs):
        for batch in loader:
            count += len(batch["index"])
    return count / (time.perf_counter() - start)


class _OneByOne:
    """A dataset seen through `__getitem__` alone, so a DataLoader fetches its batches item by item."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]


def bench_dataset(cfg: BenchConfig, work: _Work) -> Table:
    from vlagym.train.augment import ImageAugment
    from vlagym.train.dataset import DemoDataset

    b, path = cfg.budget, work.demo_file()
    chunk = _policy_config(cfg, "l1").chunk_size
    plain = DemoDataset(path, chunk_size=chunk)
    augmented = DemoDataset(path, chunk_size=chunk, augment=ImageAugment())
    # the same items fetched one by one: augmented per item, as before DemoDataset.__getitems__
    datasets = {"plain": plain, "augmented": augmented, "augmented item by item": _OneByOne(augmented)}
    rates = interleaved(
        {
            f"{name}, {workers} workers": functools.partial(
                loader_samples_per_s, data, workers, b.batch_size, b.dataset_epochs
            )
            for workers in b.dataset_workers
            for name, data in datasets.items()
        },
        cfg.repeats,
        "dataset",
    )
    first = b.dataset_workers[0]
    rows: list[dict[str, Any]] = []
    for workers in b.dataset_workers:
        p, a = rates[f"plain, {workers} workers"], rates[f"augmented, {workers} workers"]
        one = rates[f"augmented item by item, {workers} workers"]
        metrics = {
            "samples_per_s": p,
            "x_first": ratios(p, rates[f"plain, {first} workers"]),
            "augmented_samples_per_s": a,
            "augmented_x_first": ratios(a, rates[f"augmented, {first} workers"]),
            "augmented_one_by_one_per_s": one,
            "x_one_by_one": ratios(a, one),
        }
        rows.append({"num_workers": workers, **summarise(metrics)})
    source = "synthetic" if cfg.demos is None else Path(cfg.demos).name
    return Table(
        "dataset",
        "Dataset samples/s (DemoDataset through a DataLoader)",
        ["num_workers"],
        {
            "num_workers": "DataLoader workers",
            "samples_per_s": "samples/s",
            "x_first": "x first row",
            "augmented_samples_per_s": "samples/s with ImageAugment",
            "augmented_x_first": "x first row",
            "augmented_one_by_one_per_s": "augmented, fetched item by item",
            "x_one_by_one": "batched x item by item",
        },
        rows,
        [
            f"{source} demo file: {len(plain)} samples in {plain.num_episodes} episodes; batch {b.batch_size}, "
            f"chunks of {chunk} actions, {b.dataset_epochs} shuffled epoch(s) per row, worker start-up included",
            "batched: the DataLoader fetches a batch with DemoDataset.__getitems__, augmenting it in one pass; "
            "item by item: the same items through __getitem__ alone",
            passes_note(cfg.repeats),
        ],
    )


# ---------------------------------------------------------------------------- training
def _policy_config(cfg: BenchConfig, head: str) -> Any:
    from vlagym.policies import VLAConfig

    return VLAConfig(head=head, image_size=cfg.image_size, **(TINY_POLICY if cfg.quick else {}))


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every TensorBoard scalar under `folder`: tag -> [(step, value), ...] in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: sorted((e.step, e.value) for e in acc.Scalars(tag)) for tag in acc.Tags()["scalars"]}


def steady_rate(points: list[tuple[int, float]], per_step: int) -> float:
    """The rate between the first and the last log point of a cumulative `samples_per_s` log.

    Point k says k * per_step samples took k * per_step / rate_k seconds since the start; the difference of
    two points leaves out the start-up before the first one (the first batches, the DataLoader's start).
    """
    (k0, r0), (k1, r1) = points[0], points[-1]
    if k1 == k0:
        return r1
    return (k1 - k0) * per_step / (k1 * per_step / r1 - k0 * per_step / r0)


def bc_pass(cfg: BenchConfig, work: _Work) -> dict[str, float]:
    """One `train_bc` run from scratch in a fresh folder: its rates and wall time. The first run's final
    checkpoint becomes `work.checkpoint` (latency and ppo use it)."""
    from vlagym.train.bc import BCConfig, train_bc

    b = cfg.budget
    out = work.new_folder("bc")
    bc = BCConfig(
        dataset=[str(work.demo_file())],
        out=str(out),
        policy=_policy_config(cfg, "l1"),
        steps=b.bc_steps,
        batch_size=b.batch_size,
        warmup_steps=min(100, b.bc_steps),
        checkpoint_every=0,
        log_every=max(1, b.bc_steps // 10),
        device=cfg.device,
        progress=False,
    )
    start = time.perf_counter()
    result = train_bc(bc)
    wall = time.perf_counter() - start
    work.checkpoint = work.checkpoint or Path(result["checkpoint"])
    points = read_scalars(out / "tb")["train/samples_per_s"]
    return {
        "params": sum(p.numel() for p in result["policy"].parameters()),
        "samples_per_s": steady_rate(points, b.batch_size),
        "samples_per_s_from_start": points[-1][1],
        "wall_s": wall,
    }


def bench_bc(cfg: BenchConfig, work: _Work) -> Table:
    b = cfg.budget
    head = _policy_config(cfg, "l1").head
    metrics = transpose(interleaved({head: lambda: bc_pass(cfg, work)}, cfg.repeats, "bc")[head])
    row = {"device": cfg.device, "head": head, "params": metrics.pop("params")[0], **summarise(metrics)}
    return Table(
        "bc",
        "BC training samples/s (train_bc)",
        ["device", "head"],
        {
            "device": "device",
            "head": "head",
            "params": "parameters",
            "samples_per_s": "samples/s",
            "samples_per_s_from_start": "samples/s incl. first steps",
            "wall_s": "wall s (set-up, checkpoint)",
        },
        [row],
        [
            f"{b.bc_steps} steps of batch {b.batch_size}, {cfg.image_size} px, ImageAugment on, 0 DataLoader "
            f"workers, {cfg.threads} torch thread(s); samples/s between the first and the last logged step",
            passes_note(cfg.repeats) + ", each training anew",
        ],
    )


def time_select_action(policy: Any, obs: dict[str, Any], calls: int, warmup: int = 20) -> np.ndarray:
    """Seconds per `select_action(batch_from_obs(obs))` call, as an env loop calls it, after `warmup` calls."""
    import torch

    policy.reset()
    for _ in range(warmup):
        policy.select_action(policy.batch_from_obs(obs))
    policy.reset()
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter()
        action = policy.select_action(policy.batch_from_obs(obs))
        if action.device.type == "cuda":
            torch.cuda.synchronize()
        times[i] = time.perf_counter() - start
    return times


def acting_variants(base: Any) -> list[tuple[str, Any]]:
    """(label, policy): the policy's own acting settings, predicting every call, temporal ensembling."""
    from vlagym.policies import VLAPolicy

    rows = [(f"queue (n_action_steps={base.config.n_action_steps})", base)]
    for label, changes in (
        ("predict every call", {"n_action_steps": 1, "temporal_ensemble": False}),
        ("temporal ensemble", {"n_action_steps": 1, "temporal_ensemble": True}),
    ):
        policy = VLAPolicy(dataclasses.replace(base.config, **changes), base.tokenizer)
        policy.load_state_dict(base.state_dict())
        rows.append((label, policy.to(base.device).eval()))
    return rows


def bench_latency(cfg: BenchConfig, work: _Work) -> Table:
    from vlagym.policies import VLAPolicy

    if cfg.policy:
        bases = [VLAPolicy.from_pretrained(cfg.policy, device=cfg.device)]
    else:  # latency does not depend on the weights
        bases = [VLAPolicy(_policy_config(cfg, head)).to(cfg.device).eval() for head in ("l1", "flow")]
    rows = []
    for base in bases:
        c = base.config
        env = gym.make(cfg.task_list[0], obs_mode="rgb", image_size=c.image_size, cameras=list(c.cameras))
        try:
            obs, _ = env.reset(seed=0)
        finally:
            env.close()
        for label, policy in acting_variants(base):
            logger.info("latency: %s, %s", c.head, label)
            ms = time_select_action(policy, obs, cfg.budget.latency_calls, warmup=min(20, cfg.budget.latency_calls))
            ms *= 1e3
            rows.append(
                {
                    "head": c.head,
                    "acting": label,
                    "p50_ms": float(np.percentile(ms, 50)),
                    "p99_ms": float(np.percentile(ms, 99)),
                    "mean_ms": float(ms.mean()),
                    "max_ms": float(ms.max()),
                }
            )
    return Table(
        "latency",
        "Policy latency: select_action at batch 1",
        ["head", "acting"],
        {"head": "head", "acting": "acting", "p50_ms": "p50 ms", "p99_ms": "p99 ms", "mean_ms": "mean ms"},
        rows,
        [
            f"{cfg.budget.latency_calls} timed calls per row on {cfg.device}, {cfg.threads} torch thread(s), "
            f"a real rgb observation converted by batch_from_obs inside the timed region; "
            + (f"checkpoint {cfg.policy}" if cfg.policy else "freshly initialised policies")
        ],
    )


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


def bench_ppo(cfg: BenchConfig, work: _Work) -> Table:
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
        return {"env_steps": train_rl(rl)["env_steps"], **ppo_rates(Path(rl.out) / "tb")}

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


def fbc_rates(tb: Path) -> dict[str, float]:
    """Collection env steps/s, updates/s and where the time goes, from a `train_filtered_bc` TensorBoard log."""
    s = read_scalars(tb)

    def total(tag: str) -> float:
        return float(sum(v for _, v in s.get(tag, [])))

    env_steps = max(v for _, v in s["time/env_steps"])
    updates = max(k for k, _ in s["time/learn_s"])
    collect_s, learn_s = total("time/collect_s"), total("time/learn_s")
    return {
        "collect_steps_per_s": env_steps / collect_s,
        "updates_per_s": updates / learn_s if learn_s > 0 else math.nan,
        "env_share": total("time/collect_env_s") / (collect_s + learn_s),
        "policy_share": total("time/collect_policy_s") / (collect_s + learn_s),
        "learn_share": learn_s / (collect_s + learn_s),
    }


def bench_filtered_bc(cfg: BenchConfig, work: _Work) -> Table:
    from vlagym.rl.filtered_bc import FilteredBCConfig, train_filtered_bc

    b, task = cfg.budget, cfg.task_list[0]

    def one_run(prefetch: bool) -> dict[str, float]:
        fbc = FilteredBCConfig(
            policy=str(work.bc_checkpoint()),
            task=task,
            demos=[str(work.demo_file())],
            out=str(work.new_folder("fbc")),
            rounds=2,
            episodes_per_round=b.fbc_episodes,
            n_envs=b.ppo_envs,
            updates_per_round=b.fbc_updates,
            batch_size=b.batch_size,
            prefetch=prefetch,
            eval_every=0,
            device=cfg.device,
            progress=False,
        )
        train_filtered_bc(fbc)
        return fbc_rates(Path(fbc.out) / "tb")

    runs = {"batches drawn inline": False, "batches prefetched (default)": True}
    samples = interleaved(
        {label: functools.partial(one_run, prefetch) for label, prefetch in runs.items()}, cfg.repeats, "filtered-bc"
    )
    rows = [{"run": label, **summarise(transpose(passes))} for label, passes in samples.items()]
    return Table(
        "filtered-bc",
        f"Filtered-BC post-training (train_filtered_bc on {task})",
        ["run"],
        {
            "run": "run",
            "collect_steps_per_s": "collection env steps/s",
            "updates_per_s": "updates/s",
            "env_share": "time: env steps",
            "policy_share": "time: policy in collection",
            "learn_share": "time: updates",
        },
        rows,
        [
            f"2 rounds of {b.fbc_episodes} noisy episodes on {b.ppo_envs} sync sub-env(s) and {b.fbc_updates} "
            f"updates of batch {b.batch_size} (half demos), {cfg.image_size} px, ImageAugment on, on {cfg.device}; "
            "the two runs draw identical batches, the second in a background thread while the update runs",
            "time shares are fractions of collection + updates: env steps (simulation, rendering, the "
            "recorder, writing the round's file), the policy while collecting (inference, noise), updates",
            passes_note(cfg.repeats) + ", each training anew",
        ],
    )


SECTION_FUNCTIONS: dict[str, Callable[[BenchConfig, _Work], Table]] = {
    "env": bench_env,
    "render": bench_render,
    "vector": bench_vector,
    "dataset": bench_dataset,
    "bc": bench_bc,
    "latency": bench_latency,
    "ppo": bench_ppo,
    "filtered-bc": bench_filtered_bc,
}


# ---------------------------------------------------------------------------- run, save, compare
def run_bench(cfg: BenchConfig, on_section: Callable[[Table], None] | None = None) -> dict[str, Any]:
    """Run the configured sections in order; returns the JSON document (written to `cfg.out` when set).

    `on_section` is called with each section's table as soon as it is done (the CLI prints it).
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    sections: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="vlagym-bench-") as tmp:
            work = _Work(cfg, Path(tmp))
            for name in cfg.sections:
                t = time.perf_counter()
                table = SECTION_FUNCTIONS[name](cfg, work)
                sections[name] = {**table.to_dict(), "seconds": time.perf_counter() - t}
                if on_section is not None:
                    on_section(table)
    finally:
        torch.set_num_threads(threads)
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": cfg.to_dict(),
        "fingerprint": machine_fingerprint(rendered=True),
        "wall_s": time.perf_counter() - start,
        "sections": sections,
    }
    if cfg.out is not None:
        atomic_write_json(cfg.out, doc)
    return doc


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        if abs(value) >= 100:
            return f"{value:.0f}"
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3f}"
    return str(value)


def format_table(table: Table | dict[str, Any]) -> str:
    """One section as a Markdown table under a heading, its notes below."""
    t = table.to_dict() if isinstance(table, Table) else table
    cols = list(t["columns"])
    lines = [f"### {t['title']}", "", "| " + " | ".join(t["columns"][c] for c in cols) + " |"]
    lines.append("|" + "|".join("---" if c in t["key"] else "---:" for c in cols) + "|")
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in cols) + " |" for row in t["rows"]]
    if t.get("notes"):
        lines += [""] + [f"{note}." for note in t["notes"]]
    return "\n".join(lines)


def format_header(doc: dict[str, Any]) -> str:
    """One line: versions and machine of a run."""
    fp = doc["fingerprint"]
    v = fp["versions"]
    return (
        f"vlagym {v['vlagym']}, MuJoCo {v['mujoco']}, torch {v['torch']}, numpy {v['numpy']}, "
        f"Python {v['python']}; {fp['cpu']} ({fp['cpu_count']} CPUs), GPU: {fp['gpu']}, GL: {fp['gl_renderer']}"
    )


def format_run(doc: dict[str, Any]) -> str:
    """Every section of a run as Markdown."""
    parts = [format_header(doc)]
    parts += [format_table(section) for section in doc["sections"].values()]
    return "\n\n".join(parts)


def read_run(path: str | os.PathLike) -> dict[str, Any]:
    """A `run_bench` JSON document; `BenchError` for a missing file or anything else."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BenchError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BenchError(f'{path}: not a vlagym bench result (no "format": "{FORMAT}")')
    if doc.get("format_version") != FORMAT_VERSION:
        raise BenchError(
            f"{path}: bench format version {doc.get('format_version')!r}; this vlagym reads {FORMAT_VERSION}"
        )
    return doc


def _direction(metric: str) -> int:
    """+1 when more is faster (rates), -1 when less is faster (times), 0 for other numbers (ratios, counts)."""
    if "per_s" in metric:
        return 1
    if metric.endswith(("_ms", "_us", "_s")) or metric.startswith("us_"):
        return -1
    return 0


def spread(row: dict[str, Any], metric: str) -> float | None:
    """(max - min) / median of a metric's passes; None for a single pass or a run saved before passes were
    recorded."""
    values = row.get("samples", {}).get(metric)
    if not values or len(values) < 2:
        return None
    median = float(np.median(values))
    return (max(values) - min(values)) / median if median else None


def compare_runs(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows present in both runs, paired by section and key columns: every numeric metric's old, new,
    new / old, `speedup` (new / old for rates, old / new for times, None for other numbers), and each run's
    `spread` over its passes (None where it has one pass, or was saved without them)."""
    out = []
    for name, a in old["sections"].items():
        b = new["sections"].get(name)
        if b is None:
            continue
        key = a["key"]
        b_rows = {tuple(r.get(k) for k in key): r for r in b["rows"]}
        for row in a["rows"]:
            other = b_rows.get(tuple(row.get(k) for k in key))
            if other is None:
                continue
            for metric, value in row.items():
                v_new = other.get(metric)
                numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (value, v_new))
                if metric in key or not numbers:
                    continue
                ratio = v_new / value if value else math.nan
                direction = _direction(metric)
                speedup = None if direction == 0 else (ratio if direction > 0 else 1 / ratio if ratio else math.inf)
                out.append(
                    {
                        "section": name,
                        "row": ", ".join(str(row[k]) for k in key),
                        "metric": a["columns"].get(metric, metric),
                        "old": value,
                        "new": v_new,
                        "ratio": ratio,
                        "speedup": speedup,
                        "old_spread": spread(row, metric),
                        "new_spread": spread(other, metric),
                    }
                )
    return out


def unpaired(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Sections and rows that only one of two runs holds."""
    notes = []
    for label, a, b in (("old", old, new), ("new", new, old)):
        for name, sec in a["sections"].items():
            other = b["sections"].get(name)
            if other is None:
                notes.append(f"section {name} only in the {label} run")
                continue
            keys = {tuple(r.get(k) for k in other["key"]) for r in other["rows"]}
            missing = [r for r in sec["rows"] if tuple(r.get(k) for k in sec["key"]) not in keys]
            notes += [
                f"{name}: row {', '.join(str(r[k]) for k in sec['key'])} only in the {label} run" for r in missing
            ]
    return notes


def fingerprint_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Versions, machine and budget settings that differ between two runs (their numbers compare less well)."""
    fa, fb = old["fingerprint"], new["fingerprint"]
    diffs = [
        f"{k} {fa['versions'].get(k)} -> {fb['versions'].get(k)}"
        for k in fa["versions"]
        if fa["versions"].get(k) != fb["versions"].get(k)
    ]
    diffs += [f"{k} {fa.get(k)!r} -> {fb.get(k)!r}" for k in ("cpu", "cpu_count", "gpu") if fa.get(k) != fb.get(k)]
    ca, cb = {"repeats": 1, **old["config"]}, {"repeats": 1, **new["config"]}  # runs before --repeats: 1 pass
    diffs += [
        f"{k} {ca.get(k)!r} -> {cb.get(k)!r}"
        for k in ("quick", "repeats", "threads", "image_size", "device", "demos", "policy")
        if ca.get(k) != cb.get(k)
    ]
    return diffs


def format_comparison(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The Markdown comparison of two runs: one line per paired metric, then what differs between the runs."""
    lines = [
        "| section | row | metric | old | new | new / old | speedup | spread old / new |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    for r in compare_runs(old, new):
        speedup = "" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        lines.append(
            f"| {r['section']} | {r['row']} | {r['metric']} | {_cell(float(r['old']))} | {_cell(float(r['new']))} "
            f"| {r['ratio']:.2f} | {speedup} | {pct(r['old_spread'])} / {pct(r['new_spread'])} |"
        )
    lines += [
        "",
        "speedup: new / old for rates, old / new for times (above 1: the new run is faster); spread: (max - min) "
        "/ median of a run's passes (-: one pass), a speedup within it is noise.",
    ]
    notes = unpaired(old, new)
    diffs = fingerprint_differences(old, new)
    if diffs:
        lines.append(f"note: the runs differ in {'; '.join(diffs)}")
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)
