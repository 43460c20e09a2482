"""Run a policy in a vector env for a fixed list of seeds, one record per episode.

Gymnasium 1.x vector envs reset finished sub-envs automatically, by default on
the *next* `step()` (whose action that sub-env then ignores) and with no seed.
Evaluation needs episode i to start from `reset(seed=seeds[i])` whichever
sub-env runs it, so the rollout envs are made with autoreset disabled
(`make_rollout_envs`) and this module resets finished sub-envs itself, with
the next seed of the list, through `reset(seed=..., options={"reset_mask": ...})`.
A policy that samples (the flow head) learns each new episode's seed through
`on_episode_start(mask, seeds=...)`, so it can draw that episode's noise from a
generator of its own. Episode k runs on sub-env `positions[k] % num_envs` (its position in the whole run,
by default k), at a fixed row of a batch of `num_envs` rows: a torch policy's batched products round a row
differently with its row and the batch size, but not with what the other rows hold, so an episode depends on its
seed, its position and `num_envs` alone. A part of a run (a Ray worker's unit, the episodes a resumed run has
left) given its positions acts as it did in the whole run. A sub-env that finished its share first runs
throw-away episodes meanwhile: 1.6-11% more vector steps than handing the next seed to whichever sub-env is
free (simulated, docs/ray.md), for records that do not depend on who ran them.

A torch policy acts on one intra-op thread, in every vectorization mode. At batch size 1 the default VLA's
chunks differ in the last bits between one and two threads (measured; from batch 2 on they agree), so a fixed
count makes an episode the same on a 2-core laptop, a Ray worker (one CPU) and a pool. It costs nothing
measurable in a sync env (default VLA at 64 px, 1 and 8 sub-envs: within 2%), and where the sub-envs step in
worker processes (pool, async) a second thread would spin after each call on the core a worker needs (an
8-env PickCup evaluation measured 1.3x faster with one).

Besides success, every record carries a few flags accumulated from the task
predicates the env reports in `info` each step (grasped, a wrong object
handled, reach distance, instability) and the `outcome` that
`vlagym.eval.diagnostics.classify` derives from them. Reading them costs a few
array operations per vector step and nothing inside `env.step()`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from tqdm.auto import tqdm

import vlagym
from vlagym.envs.pool import make_vec
from vlagym.eval.diagnostics import GRASP_KEYS, REACH_KEY, WRONG_KEYS, classify

logger = logging.getLogger(__name__)

BatchPolicy = Callable[[object], np.ndarray]


@dataclass
class EpisodeRecord:
    """What one episode did."""

    seed: int
    task: str
    instruction: str
    success: bool
    """success at any step"""
    success_at_end: bool
    """success at the last step"""
    length: int
    episode_return: float
    ever_grasped: bool | None = None
    """the target (or handle) was held between both pads at some step; None if the task reports no grasp"""
    grasped_at_end: bool | None = None
    """... at the last step"""
    wrong_object: bool | None = None
    """the task's wrong-object predicate was true at some step; None if the task has none"""
    min_reach_distance: float | None = None
    """closest approach (m) of the grasp site to the task's reach point; None if the task reports none"""
    sim_unstable: bool = False
    """the episode ended because the simulation diverged"""
    outcome: str = ""
    """`vlagym.eval.diagnostics.classify` of this record ("" when never classified)"""


def make_rollout_envs(
    env_id: str, num_envs: int, vectorization_mode: str = "sync", expert: bool = False, **env_kwargs
) -> gym.vector.VectorEnv:
    """A vector env with autoreset disabled, as `run_episodes` needs ("sync", "async" or "pool").

    `expert` with sub-envs in worker processes ("async", "pool"): each sub-env's scripted expert acts inside it
    (`ExpertActs`), and `ExpertPolicy` only sends placeholders; a sync env's experts are reached directly."""
    wrappers = [ExpertActs] if expert and vectorization_mode != "sync" else []
    envs = make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        wrappers=wrappers,
        vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED},
        **env_kwargs,
    )
    envs.expert_inside = bool(wrappers)  # read by `ExpertPolicy`
    return envs


def accepts(callback: Callable[..., object], keyword: str) -> bool:
    """Whether `callback` accepts `keyword` (an `on_episode_start` that wants the episodes' seeds, or repeats)."""
    try:
        params = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return any(p.name == keyword or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _entry(info: dict, key: str, i: int, default):
    if key in info and info.get(f"_{key}", np.ones(len(info[key]), bool))[i]:
        return info[key][i]
    return default


class _PredicateFlags:
    """Per-sub-env running flags of the task predicates in a vector env's `info` (see `EpisodeRecord`)."""

    def __init__(self, n: int):
        self.grasp_seen, self.ever_grasped, self.grasped_now = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
        self.wrong_seen, self.wrong = np.zeros(n, bool), np.zeros(n, bool)
        self.min_reach = np.full(n, np.inf)
        self.unstable = np.zeros(n, bool)

    def clear(self, mask: np.ndarray) -> None:
        for a in (self.grasp_seen, self.ever_grasped, self.grasped_now, self.wrong_seen, self.wrong, self.unstable):
            a[mask] = False
        self.min_reach[mask] = np.inf

    def update(self, info: dict) -> None:
        grasped_now = np.zeros_like(self.grasped_now)
        for key in GRASP_KEYS:
            if key in info:
                valid = np.asarray(info.get(f"_{key}", True), bool)
                grasped_now |= np.asarray(info[key], bool) & valid
                self.grasp_seen |= valid
        self.grasped_now[:] = grasped_now
        self.ever_grasped |= grasped_now
        for key in WRONG_KEYS:
            if key in info:
                valid = np.asarray(info.get(f"_{key}", True), bool)
                self.wrong |= np.asarray(info[key], bool) & valid
                self.wrong_seen |= valid
        if REACH_KEY in info:
            reach = np.where(np.asarray(info.get(f"_{REACH_KEY}", True), bool), info[REACH_KEY], np.inf)
            np.minimum(self.min_reach, reach.astype(float), out=self.min_reach)
        if "sim_unstable" in info:
            self.unstable |= np.asarray(info["sim_unstable"], bool) & np.asarray(info.get("_sim_unstable", True), bool)

    def record_fields(self, i: int) -> dict:
        grasp, wrong = bool(self.grasp_seen[i]), bool(self.wrong_seen[i])
        reach = float(self.min_reach[i])
        return {
            "ever_grasped": bool(self.ever_grasped[i]) if grasp else None,
            "grasped_at_end": bool(self.grasped_now[i]) if grasp else None,
            "wrong_object": bool(self.wrong[i]) if wrong else None,
            "min_reach_distance": reach if np.isfinite(reach) else None,
            "sim_unstable": bool(self.unstable[i]),
        }


class _Slots:
    """Which episode of the seed list each sub-env runs (-1: a throw-away episode), and its reset seed: sub-env i
    runs the episodes whose position is i modulo the number of sub-envs, in order."""

    def __init__(self, n: int, seeds: list[int], positions: Sequence[int]):
        self.seeds = seeds
        self.spare = max(seeds, default=0) + 1_000_000  # throw-away episodes use seeds no evaluation asks for
        self.episode = np.full(n, -1)  # index into `seeds` of the episode each sub-env runs, -1 = throw-away
        self.seed = np.zeros(n, np.int64)  # the reset seed of the episode each sub-env runs
        self.repeat = np.zeros(n, np.int64)  # how many episodes of its seed come before it (0: throw-away)
        self.queues: list[deque[int]] = [deque() for _ in range(n)]
        self.repeats = [0] * len(seeds)
        seen: dict[int, int] = {}
        for k in sorted(range(len(seeds)), key=lambda k: positions[k]):
            self.queues[positions[k] % n].append(k)
            self.repeats[k] = seen.get(seeds[k], 0)
            seen[seeds[k]] = self.repeats[k] + 1

    def assign(self, mask: np.ndarray) -> list[int]:
        """Give the sub-envs in `mask` their next episodes (or throw-away ones); their reset seeds, in order."""
        out = []
        for i in np.flatnonzero(mask):
            if self.queues[i]:
                self.episode[i] = self.queues[i].popleft()
                out.append(self.seeds[self.episode[i]])
                self.repeat[i] = self.repeats[self.episode[i]]
            else:
                self.episode[i] = -1
                out.append(self.spare)
                self.repeat[i] = 0
                self.spare += 1
            self.seed[i] = out[-1]
        return out


class _Running:
    """What each sub-env's current episode has done so far: instruction, task, return, length, success, flags."""

    def __init__(self, n: int, default_task: str):
        self.instructions, self.tasks = [""] * n, [default_task] * n
        self.returns, self.lengths, self.ever = np.zeros(n), np.zeros(n, int), np.zeros(n, bool)
        self.flags = _PredicateFlags(n)

    def start(self, mask: np.ndarray, info: dict) -> None:
        """The sub-envs in `mask` reset with `info`: read their instruction and task, clear their counters."""
        for i in np.flatnonzero(mask):
            self.instructions[i] = str(_entry(info, "instruction", i, ""))
            self.tasks[i] = str(_entry(info, "task", i, self.tasks[i]))
        self.returns[mask], self.lengths[mask], self.ever[mask] = 0.0, 0, False
        self.flags.clear(mask)

    def step(self, reward: np.ndarray, info: dict) -> np.ndarray:
        """Account one vector step; returns each sub-env's success at this step."""
        self.returns += reward
        self.lengths += 1
        success = np.array([bool(_entry(info, "success", i, False)) for i in range(len(self.ever))])
        self.ever |= success
        self.flags.update(info)
        return success

    def record(self, i: int, seed: int, success_now: bool) -> EpisodeRecord:
        """The finished episode of sub-env `i`, classified."""
        record = EpisodeRecord(
            seed=seed,
            task=self.tasks[i],
            instruction=self.instructions[i],
            success=bool(self.ever[i]),
            success_at_end=bool(success_now),
            length=int(self.lengths[i]),
            episode_return=float(self.returns[i]),
            **self.flags.record_fields(i),
        )
        record.outcome = classify(record)
        return record


def _episode_start_callback(
    on_episode_start: Callable[..., None] | None, slots: _Slots
) -> Callable[[np.ndarray], None]:
    """`on_episode_start` called as `run_episodes` promises: with `seeds=` when it takes them."""
    if on_episode_start is None:
        return lambda mask: None
    if accepts(on_episode_start, "repeats"):
        return lambda mask: on_episode_start(mask, seeds=slots.seed.copy(), repeats=slots.repeat.copy())
    if accepts(on_episode_start, "seeds"):
        return lambda mask: on_episode_start(mask, seeds=slots.seed.copy())
    return on_episode_start


def _reset_done(
    envs: gym.vector.VectorEnv, done: np.ndarray, slots: _Slots, running: _Running, reset_options: dict | None
):
    """Reset the finished sub-envs with the next seeds of the list; the new observations."""
    seed_list: list[int | None] = [None] * envs.num_envs
    for i, s in zip(np.flatnonzero(done), slots.assign(done), strict=True):
        seed_list[i] = s
    obs, reset_info = envs.reset(seed=seed_list, options={**(reset_options or {}), "reset_mask": done})
    running.start(done, reset_info)
    return obs


def run_episodes(
    envs: gym.vector.VectorEnv,
    policy: BatchPolicy,
    seeds: Sequence[int],
    on_episode_start: Callable[..., None] | None = None,
    progress: bool = True,
    reset_options: dict | None = None,
    on_step: Callable[[dict], None] | None = None,
    on_record: Callable[[int, EpisodeRecord], None] | None = None,
    positions: Sequence[int] | None = None,
) -> list[EpisodeRecord]:
    """Run `policy` (batched observations -> batched actions) until every seed has had its episode.

    `on_episode_start(mask)` is called after sub-envs in `mask` reset, so a
    stateful policy (action queues, experts) can reset those slots; when it
    accepts a `seeds` keyword it gets `seeds=` an int64 array with the reset seed
    of every sub-env's current episode (throw-away episodes included), e.g. to
    seed a sampling policy's per-episode noise, and when it accepts `repeats` also
    `repeats=`: how many episodes of the same seed come before each one (by position;
    the tries of one state when a seed repeats). Records are
    returned in the order of `seeds`. Sub-envs left without a seed keep running
    throw-away episodes until the last real one ends; those are not recorded.
    `reset_options` go to every sub-env reset (e.g. `{"swap_target": True}`, see `VLAEnv.reset`).
    `on_step(info)` sees the vector env's `info` after every step (before finished sub-envs reset), e.g. to
    collect what a wrapper inside the sub-envs reports at an episode's end. `on_record(k, record)` gets each
    episode's record as it finishes (k: its index in `seeds`), e.g. to journal it. `positions` (distinct, one per
    seed; default 0, 1, ...) place each episode in the whole run it is part of: see the module docstring.
    """
    mode = envs.metadata.get("autoreset_mode")
    if mode != AutoresetMode.DISABLED:
        raise ValueError(f"run_episodes needs autoreset disabled, got {mode}: make the envs with make_rollout_envs()")
    seeds = [int(s) for s in seeds]
    positions = list(range(len(seeds))) if positions is None else [int(p) for p in positions]
    if len(positions) != len(seeds) or len(set(positions)) != len(positions) or min(positions, default=0) < 0:
        raise ValueError(f"positions must be {len(seeds)} distinct non-negative ints, one per seed")
    slots = _Slots(envs.num_envs, seeds, positions)
    started = _episode_start_callback(on_episode_start, slots)
    running = _Running(envs.num_envs, envs.spec.id if envs.spec else "")
    records: list[EpisodeRecord | None] = [None] * len(seeds)
    mask = np.ones(envs.num_envs, bool)
    obs, info = envs.reset(seed=slots.assign(mask), options=dict(reset_options) if reset_options else None)
    running.start(mask, info)
    started(mask)
    bar = tqdm(total=len(seeds), desc="episodes", unit="ep", disable=not progress)
    with bar, _one_torch_thread():
        while any(r is None for r in records):
            obs, reward, terminated, truncated, info = envs.step(policy(obs))
            if on_step is not None:
                on_step(info)
            success = running.step(reward, info)
            done = terminated | truncated
            for i in np.flatnonzero(done):
                k = slots.episode[i]
                if k >= 0:
                    records[k] = running.record(i, seeds[k], success[i])
                    if on_record is not None:
                        on_record(k, records[k])
                    bar.update(1)
            if done.any() and any(r is None for r in records):
                obs = _reset_done(envs, done, slots, running, reset_options)
                started(done)
    return records  # type: ignore[return-value]


def _one_torch_thread() -> contextlib.AbstractContextManager:
    """torch (if a policy loaded it) on one intra-op thread for the block; restored after."""
    if "torch" not in sys.modules:
        return contextlib.nullcontext()
    from vlagym.train.run import torch_threads  # torch is loaded already (a policy uses it)

    return torch_threads(1)


class ExpertActs(gym.Wrapper):
    """The task's scripted expert acts in this sub-env: `step` executes the expert's action, computed here from
    the simulator state, and ignores the one it is given (a placeholder). For vector envs whose sub-envs live
    in worker processes, out of the main process's reach; the actions are `VectorExpert`'s in a sync env."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.expert = vlagym.make_expert(env)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.expert.reset()
        return obs, info

    def step(self, action):
        return self.env.step(self.expert())


class VectorExpert:
    """The scripted experts of a *sync* vector env's sub-envs as one batched policy.

    Experts read privileged simulator state, which only a sync vector env
    exposes (`envs.envs`); pass `on_episode_start=expert.reset` to `run_episodes`.
    """

    def __init__(self, envs: gym.vector.SyncVectorEnv):
        if not hasattr(envs, "envs"):
            raise ValueError("VectorExpert needs a sync vector env (experts read each sub-env's simulator state)")
        self.experts = [vlagym.make_expert(env) for env in envs.envs]

    def reset(self, mask: np.ndarray) -> None:
        for i in np.flatnonzero(mask):
            self.experts[i].reset()

    def __call__(self, obs) -> np.ndarray:
        return np.stack([expert(None) for expert in self.experts])
