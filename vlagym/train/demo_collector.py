"""The vectorised demo collector: the task's scripted expert runs inside each sub-env of a gymnasium vector env.

Experts need privileged simulator state, which an async vector env keeps in its worker processes. So the
expert runs *inside* each sub-env, in a small wrapper (`_ExpertRecorder`, given to `gym.make_vec` through
`wrappers=`): after every reset and step it computes the expert's next action and reads the privileged state
and the MuJoCo state, and returns them in `info`. The main process only sends those actions back. The same
code path serves sync and async vector envs.

Seeding: episode i (0, 1, ...) is reset with seed `seed + i` whichever sub-env runs it, and finished episodes
are handed on in episode order, so what gets written is the same for any `num_envs` and vectorization mode.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import warnings
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

import vlagym
from vlagym.envs.multitask import MultiTaskEnv
from vlagym.envs.pool import make_vec
from vlagym.envs.robot import Robot
from vlagym.train.configs import DemoConfig
from vlagym.train.demo_writer import DemoEpisode, DemoJournal

logger = logging.getLogger(__name__)

RECORD_KEY = "demo_record"  # the info key `_ExpertRecorder` fills
GAVE_UP_KEY = "expert_gave_up"  # set by `_ExpertRecorder` where the expert cannot finish a policy's episode
NOISE_STREAM = 0x4E015E  # the action noise of episode `seed` comes from default_rng([NOISE_STREAM, seed])


# ---------------------------------------------------------------------------- expert inside each sub-env
@dataclass(frozen=True)
class _StepRecord:
    """What the collector needs besides the observation, made in the sub-env's own process."""

    seed: int | None
    """seed of the reset that began this episode"""
    t: int
    """steps since that reset"""
    action: np.ndarray
    """the expert's action for this observation"""
    proprio: np.ndarray
    state: np.ndarray
    sim_state: np.ndarray
    """mj_getState(mjSTATE_INTEGRATION): before the action, after the observation"""
    task: str


class _ExpertRecorder(gym.Wrapper):
    """Runs the task's scripted expert on this sub-env and puts a `_StepRecord` in `info[RECORD_KEY]`.

    Reading state leaves the simulation untouched, so the env's trajectory is the one a plain env
    replaying the recorded actions follows (a test replays demos to check it).
    """

    def __init__(self, env: gym.Env, recover: bool = False):
        super().__init__(env)
        self.expert = vlagym.make_expert(env)
        self.expert.recover = recover  # another policy acts: the expert follows the scene, not its own plan
        self._seed: int | None = None
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.expert.reset()
        self._seed, self._t = seed, 0
        info[RECORD_KEY] = self._record(obs)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        if self.expert.recover and not (terminated or truncated) and self.expert.hopeless():
            truncated = True  # the expert cannot label past here (e.g. the cup knocked over): the episode ends
            info[GAVE_UP_KEY] = True
        if not (terminated or truncated):  # an ended episode needs no next action
            info[RECORD_KEY] = self._record(obs)
        return obs, reward, terminated, truncated, info

    def _record(self, obs) -> _StepRecord:
        base = self.env.unwrapped
        sim = base.current if isinstance(base, MultiTaskEnv) else base
        task = base.task if isinstance(base, MultiTaskEnv) else (self.env.spec.id if self.env.spec else "")
        state = sim.state_vector()
        proprio = np.array(obs["proprio"], np.float32) if isinstance(obs, dict) else state[: Robot.PROPRIO_DIM].copy()
        action = np.asarray(self.expert(obs), np.float32)
        return _StepRecord(self._seed, self._t, action, proprio, state, sim.sim_state(), task)


# ---------------------------------------------------------------------------- the collection loop
class DemoCollector:
    """Runs episodes first .. end - 1 in a vector env and hands them, in episode order, to the journal.

    With `policy` (batched: `reset(mask, seeds)`, `__call__(obs) -> actions`, as `vlagym.eval.adapters`'
    policies) the policy's actions are executed and the expert's are kept as labels (DAgger).
    """

    def __init__(self, envs: gym.vector.VectorEnv, cfg: DemoConfig, journal: DemoJournal, first: int, bar, policy=None):
        self.envs, self.cfg, self.journal, self.bar = envs, cfg, journal, bar
        self.policy = policy
        self.k = envs.num_envs
        self.next_episode = first
        self.next_to_write = first
        self.running: list[DemoEpisode | None] = [None] * self.k
        self.actions = np.zeros((self.k, *envs.single_action_space.shape), np.float32)
        self.labels = np.zeros_like(self.actions)  # the expert's actions (self.actions adds the noise)
        self.finished: dict[int, DemoEpisode] = {}
        self.successes = 0
        self.failed_seeds: list[int] = []
        self.cut_short = 0  # episodes ended because the expert gave up (`ScriptedExpert.hopeless`)

    def _assign(self, i: int) -> int | None:
        """Give sub-env i the next episode; its seed, or None when every episode has been handed out."""
        if self.next_episode >= self.cfg.episodes:
            self.running[i] = None
            return None
        ep = DemoEpisode(index=self.next_episode, seed=self.cfg.seed + self.next_episode)
        ep.acted_by_policy = self.policy is not None
        if self.cfg.action_noise > 0:
            ep.noise = np.random.default_rng([NOISE_STREAM, ep.seed])
        self.running[i] = ep
        self.next_episode += 1
        return ep.seed

    def _record(self, i: int, obs, info: dict[str, Any], at_reset: bool) -> None:
        ep = self.running[i]
        rec = info[RECORD_KEY][i] if info.get(f"_{RECORD_KEY}", np.zeros(self.k, bool))[i] else None
        # Guards the autoreset handling: every record must continue this episode, from its own seed.
        if rec is None or rec.seed != ep.seed or rec.t != len(ep):
            got = "nothing" if rec is None else f"step {rec.t} of seed {rec.seed}"
            raise RuntimeError(f"sub-env {i} is out of step: expected step {len(ep)} of seed {ep.seed}, got {got}")
        if at_reset:
            ep.instruction = str(info["instruction"][i])
            ep.task = rec.task
        if self.cfg.has_images():
            for camera in self.cfg.cameras:
                ep.images.setdefault(camera, []).append(np.array(obs["images"][camera][i]))
        ep.proprio.append(rec.proprio)
        ep.state.append(rec.state)
        ep.sim_states.append(rec.sim_state)
        self.labels[i] = rec.action
        self.actions[i] = rec.action
        if ep.noise is not None:
            arm = slice(0, len(rec.action) - 1)  # the last entry is the gripper command: never perturbed
            noisy = rec.action[arm] + ep.noise.normal(0.0, self.cfg.action_noise, len(rec.action) - 1)
            self.actions[i, arm] = np.clip(noisy, -1.0, 1.0)

    def _finish(self, ep: DemoEpisode, success: bool) -> None:
        ep.success = success
        self.finished[ep.index] = ep
        if success:
            self.successes += 1
        else:
            self.failed_seeds.append(ep.seed)
            logger.info("episode %d (seed %d) failed after %d steps", ep.index, ep.seed, len(ep))
        self.bar.update(1)
        self.bar.set_postfix(success=self.successes, failed=len(self.failed_seeds))
        # Commit in episode order, so the file does not depend on which sub-env finished first.
        batch = []
        while self.next_to_write in self.finished:
            done = self.finished.pop(self.next_to_write)
            self.next_to_write += 1
            if done.success or self.cfg.keep_failures:
                batch.append(done)
        if batch:
            self.journal.commit(batch)

    def _act(self, obs) -> None:
        """With a policy: its actions replace the expert's for every sub-env running an episode."""
        if self.policy is None:
            return
        acted = np.asarray(self.policy(obs), np.float32)
        for i, ep in enumerate(self.running):
            if ep is not None:
                self.actions[i] = acted[i]

    def _reset_policy(self, mask: np.ndarray) -> None:
        if self.policy is not None:
            seeds = np.array([ep.seed if ep is not None else -1 for ep in self.running], np.int64)
            self.policy.reset(mask, seeds)

    def run(self) -> None:
        seeds = [self._assign(i) for i in range(self.k)]  # k <= remaining episodes: every sub-env gets one
        obs, info = self.envs.reset(seed=seeds)
        for i in range(self.k):
            self._record(i, obs, info, at_reset=True)
        self._reset_policy(np.ones(self.k, bool))
        while any(ep is not None for ep in self.running):
            self._act(obs)
            obs, reward, terminated, truncated, info = self.envs.step(self.actions)
            done = terminated | truncated
            restart = np.zeros(self.k, bool)
            for i, ep in enumerate(self.running):
                if ep is None:  # idle: runs throw-away episodes (autoreset, zero actions) until the others end
                    continue
                ep.actions.append(self.actions[i].copy())
                ep.expert_actions.append(self.labels[i].copy())
                ep.rewards.append(float(reward[i]))
                if done[i]:
                    self.cut_short += bool(info.get(f"_{GAVE_UP_KEY}", np.zeros(self.k, bool))[i])
                    self._finish(ep, bool(info["success"][i]))
                    restart[i] = self._assign(i) is not None
                    self.actions[i] = 0.0
                else:
                    self._record(i, obs, info, at_reset=False)
            # Gymnasium 1.x vector envs autoreset in NEXT_STEP mode: a sub-env whose episode ended is reset
            # by the *next* step() call, without a seed, and that call ignores its action. A sub-env that
            # starts a new episode is therefore reset here, with its episode's seed, through reset_mask:
            # that also clears its pending autoreset, so the next step() steps it with the expert's action.
            # Idle sub-envs are left to autoreset; their output is ignored. `_record` checks every
            # record's seed and step count, so a reset the vector env made on its own would fail loudly.
            if restart.any():
                seeds = [ep.seed if restart[i] else None for i, ep in enumerate(self.running)]
                obs, info = self.envs.reset(seed=seeds, options={"reset_mask": restart})
                for i in np.flatnonzero(restart):
                    self._record(i, obs, info, at_reset=True)
                self._reset_policy(restart)


def ignore_sigint(env: gym.Env, main_pid: int) -> gym.Env:
    """Run in each async worker as it builds its env: Ctrl-C reaches the whole process group, and the main
    process alone should handle it (it closes the workers), instead of every worker dying with a traceback.
    AsyncVectorEnv also builds one env in the main process (to read the spaces): that one is left alone."""
    if os.getpid() != main_pid:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return env


def make_demo_envs(cfg: DemoConfig, num_envs: int) -> gym.vector.VectorEnv:
    """The vector env of `cfg`'s task, an expert recording inside each sub-env; autoreset is left to the collector."""
    vector_kwargs: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "copy": False}
    wrappers: list = [functools.partial(_ExpertRecorder, recover=cfg.policy is not None)]
    if cfg.vectorization == "async":
        # Gymnasium 1.4's async worker clears its pending autoreset on a masked reset only with shared
        # memory; without it a seeded reset would be followed by an unseeded one.
        vector_kwargs["shared_memory"] = True
        wrappers.append(functools.partial(ignore_sigint, main_pid=os.getpid()))
    return make_vec(
        cfg.task,
        num_envs=num_envs,
        vectorization_mode=cfg.vectorization,
        vector_kwargs=vector_kwargs,
        wrappers=wrappers,
        **cfg.make_kwargs(),
    )


def close_envs(envs: gym.vector.VectorEnv, graceful: bool) -> None:
    """Close the vector env; after an exception, terminate async workers instead of talking to them.

    An interrupt can land inside `step_wait` after some workers' replies were read: a graceful close
    would then wait forever for replies that were already consumed.
    """
    if graceful or not isinstance(envs, gym.vector.AsyncVectorEnv):
        envs.close()
        return
    try:
        with warnings.catch_warnings():  # "Calling close while waiting for a pending call": expected here
            warnings.simplefilter("ignore")
            envs.close(terminate=True)
    except Exception:  # noqa: BLE001 - already unwinding from another error: make sure the workers end
        for process in envs.processes:
            if process.is_alive():
                process.terminate()
        envs.closed = True  # else its __del__ tries the same close again and prints the error
