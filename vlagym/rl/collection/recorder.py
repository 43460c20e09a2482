"""`RolloutRecorder`: records its sub-env's episodes in the demos layout and relabels the failures by replaying
them (hindsight: the target moved to where the gripper closed; delayed close: the close put off by k steps).

It runs inside each sub-env, so it works in async vector envs too. At the end of an episode it hands over, in
the step's ``info``:

* ``RECORD_KEY``: the episode (a `RolloutEpisode`), when it succeeded;
* ``FAILURE_KEY``: with `record_failures`, the episode when it failed (DAgger relabels every visited state);
* ``HINDSIGHT_KEY``: with `hindsight`, the outcome of a failed episode's hindsight replay (a `Replay`);
* ``DELAY_KEY``: with `close_delays`, the outcome of a failed episode's delayed-close replays (a `Replay`).

A replay leaves the sub-env in its last state: the collection resets it before its next episode.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from vlagym.envs.multitask import MultiTaskEnv
from vlagym.envs.robot import Robot
from vlagym.eval.diagnostics import REACH_KEY
from vlagym.rl.collection.episodes import Replay, RolloutEpisode, close_point, first_close

RECORD_KEY = "rollout_record"
FAILURE_KEY = "rollout_failure"
HINDSIGHT_KEY = "rollout_hindsight"
DELAY_KEY = "rollout_close_delay"
STATE_TARGET_XY = slice(Robot.PROPRIO_DIM, Robot.PROPRIO_DIM + 2)  # the target's x, y in `VLAEnv.state_vector`
HINDSIGHT_MIN_MOVE = 0.01  # metres: a gripper that closed this near the target's start replays the same episode
_OBSERVED = ("images", "proprio", "state", "sim_state", "reach")  # what a step record holds before its action


class RolloutRecorder(gym.Wrapper):
    """Records the episode and, when it fails, relabels it by replay (see the module docstring).

    Hindsight: a failed episode whose gripper closed away from the target is replayed at once with the same
    seed and the target moved to where the gripper first closed (``reset(options={"target_xy": ...})``, which
    refuses a layout the task could not have drawn), then the episode's own actions, to the first success or
    the end of the actions. The arm moves as before until it touches something, so the replay shows the
    policy's own trajectory in a scene where it reaches the target.

    Delayed close: a failed episode whose gripper closed is replayed in its own scene with the first close put
    off by k steps, for each k of `close_delays` in turn until one succeeds. The recorder keeps a copy of the
    simulator's data (`mujoco.MjData`) from just before the first closing command; each replay resets the env
    (the same seed: the wrappers' and the task's episode state), copies that data back and steps on from there,
    so it continues the episode exactly and nothing before the close runs again.
    """

    def __init__(
        self, env: gym.Env, hindsight: bool = False, close_delays: tuple[int, ...] = (), record_failures: bool = False
    ):
        super().__init__(env)
        self.hindsight = bool(hindsight)
        self.record_failures = bool(record_failures)
        self.close_delays = tuple(int(k) for k in close_delays)
        self._seed: int | None = None
        self._options: dict[str, Any] | None = None
        self._steps: list[dict[str, Any]] = []
        self._success = False
        self._close_at: int | None = None  # the step of the episode's first closing command
        self._at_close: mujoco.MjData | None = None  # the simulator's data just before it
        self._instruction, self._task = "", ""

    # ------------------------------------------------------------------ recording
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._seed, self._success, self._close_at = seed, False, None
        self._options = copy.deepcopy(options)
        self._instruction, self._task = str(info.get("instruction", "")), str(info.get("task", ""))
        if not self._task:
            self._task = self.env.spec.id if self.env.spec else ""
        self._steps = [self._step_record(obs, info)]
        return obs, info

    def step(self, action):
        if self.close_delays and self._close_at is None and float(np.asarray(action)[-1]) >= 0:
            self._keep_close_state()
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps[-1]["action"], self._steps[-1]["reward"] = np.array(action, np.float32), float(reward)
        self._success |= bool(info.get("success", False))
        if not (terminated or truncated):
            self._steps.append(self._step_record(obs, info))
            return obs, reward, terminated, truncated, info
        if self._success:
            info[RECORD_KEY] = self._episode(self._steps)
        elif self._seed is not None:
            if self.record_failures:
                info[FAILURE_KEY] = self._episode(self._steps)
            if self.hindsight:
                info[HINDSIGHT_KEY] = self._hindsight()
            if self.close_delays:
                info[DELAY_KEY] = self._delayed_close()
        self._steps = []
        return obs, reward, terminated, truncated, info

    def _sim(self):
        base = self.env.unwrapped
        return base.current if isinstance(base, MultiTaskEnv) else base

    def _step_record(self, obs: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
        sim = self._sim()
        reach = info.get(REACH_KEY)
        return {
            "images": {cam: np.array(img) for cam, img in obs["images"].items()},
            "proprio": np.array(obs["proprio"], np.float32),
            "state": sim.state_vector().astype(np.float32),
            "sim_state": sim.sim_state(),
            "reach": None if reach is None else float(reach),
        }

    def _episode(
        self, steps: list[dict[str, Any]], target_xy: tuple[float, float] | None = None, close_delay: int = 0
    ) -> RolloutEpisode:
        actions = np.stack([s["action"] for s in steps])
        close = first_close(actions)
        return RolloutEpisode(
            seed=int(self._seed) if self._seed is not None else -1,
            instruction=self._instruction,
            task=self._task,
            images={cam: np.stack([s["images"][cam] for s in steps]) for cam in steps[0]["images"]},
            proprio=np.stack([s["proprio"] for s in steps]),
            state=np.stack([s["state"] for s in steps]),
            states=np.stack([s["sim_state"] for s in steps]),
            actions=actions,
            rewards=np.array([s["reward"] for s in steps], np.float32),
            target_xy=target_xy,
            close_delay=close_delay,
            close_distance=None if close is None else steps[close]["reach"],
        )

    # ------------------------------------------------------------------ hindsight
    def _hindsight(self) -> Replay:
        """The hindsight replay of the failed episode just recorded."""
        seed = int(self._seed)
        actions = np.stack([s["action"] for s in self._steps])
        point = close_point(actions, np.stack([s["proprio"] for s in self._steps]))
        if point is None:
            return Replay(seed, None, 0, "no_close")
        # where the target stood at the start (the failed episode may have pushed it): the privileged state's
        target = self._steps[0]["state"][STATE_TARGET_XY]
        if float(np.hypot(*(point[:2] - target))) < HINDSIGHT_MIN_MOVE:
            return Replay(seed, None, 0, "at_target")
        xy = (float(point[0]), float(point[1]))
        try:
            obs, info = self.env.reset(seed=seed, options={"target_xy": xy})
        except ValueError:  # the task cannot move its target there (workspace, spacing) or at all
            return Replay(seed, None, 0, "layout")
        steps: list[dict[str, Any]] = []
        success = False
        for action in actions:
            steps.append(self._step_record(obs, info))
            obs, reward, terminated, truncated, info = self.env.step(action)
            steps[-1]["action"], steps[-1]["reward"] = np.array(action, np.float32), float(reward)
            success = bool(info.get("success", False))
            if success or terminated or truncated:
                break
        return Replay(seed, self._episode(steps, target_xy=xy) if success else None, len(steps), "")

    # ------------------------------------------------------------------ delayed close
    def _keep_close_state(self) -> None:
        """Copy the simulator's data as it is before the episode's first closing command is applied."""
        sim = self._sim()
        if self._at_close is None or self._at_close.model is not sim.model:  # a multi-task env changes models
            self._at_close = mujoco.MjData(sim.model)
        mujoco.mj_copyData(self._at_close, sim.model, sim.data)
        self._close_at = len(self._steps) - 1

    def _delayed_close(self) -> Replay:
        """The delayed-close replays of the failed episode just recorded: the first that succeeds, or none."""
        seed, start = int(self._seed), self._close_at
        if start is None:
            return Replay(seed, None, 0, "no_close")
        if start == 0:  # no action before the close to go on with
            return Replay(seed, None, 0, "at_start")
        simulated = 0
        for k in self.close_delays:
            steps, success = self.continue_from_close(k)
            simulated += len(steps) - start
            if success:
                return Replay(seed, self._episode(steps, close_delay=k), simulated, "", close_delay=k)
        return Replay(seed, None, simulated, "")

    def continue_from_close(self, delay: int) -> tuple[list[dict[str, Any]], bool]:
        """Replay the episode just recorded from its first close, put off by `delay` steps (`delay` copies of the
        action before it, then the episode's own actions from the close on, as many as keep the episode's
        length), to a success, the gripper opening again, or the end: (the steps, the recorded ones before the
        close included; whether it succeeded). `delay` 0 continues the episode as it was."""
        start = self._close_at
        if start is None:
            raise RuntimeError("the episode just recorded never closed the gripper")
        actions = [s["action"] for s in self._steps]
        edited = ([actions[start - 1]] * delay if start > 0 else []) + actions[start:]
        edited = edited[: len(actions) - start]
        self.env.reset(seed=self._seed, options=self._options)  # the wrappers' and the task's episode state
        sim = self._sim()
        mujoco.mj_copyData(sim.data, sim.model, self._at_close)
        steps = self._steps[:start] + [{key: self._steps[start][key] for key in _OBSERVED}]
        closed = success = False
        for action in edited:
            if closed and action[-1] < 0:  # the grasp let go: a success from here would re-grasp
                break
            closed = closed or bool(action[-1] >= 0)
            obs, reward, terminated, truncated, info = self.env.step(action)
            steps[-1]["action"], steps[-1]["reward"] = action, float(reward)
            success = bool(info.get("success", False))
            if success or terminated or truncated:
                break
            steps.append(self._step_record(obs, info))
        if "action" not in steps[-1]:  # stopped before stepping: the last observation has no action
            steps.pop()
        return steps, success
