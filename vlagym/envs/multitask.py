"""VLA-MultiTask-v0: every episode draws one task of the suite, so one policy trains and evaluates on all."""

from __future__ import annotations

import difflib
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

MULTITASK_ID = "VLA-MultiTask-v0"


class MultiTaskEnv(gym.Env):
    """One episode = one task of the suite, drawn uniformly.

    Task:
        Whatever the drawn task asks; the instruction says which.

    Randomisations:
        The task (uniform over `tasks`), then everything that task randomises.
        `reset(seed=s)` draws the task and the task's own seed from `s`, so the
        episode is fully determined by `s`.

    Success:
        The drawn task's success (`info["success"]`); `info["task"]` names it.

    Instructions:
        The drawn task's templates, under the same `split` / `instruction_split`.

    Every task shares the robot, cameras, observation and action spaces (checked
    at construction). Each task runs inside its own registered `TimeLimit`, so an
    episode is truncated at that task's horizon, exactly as in single-task runs.
    Every other keyword argument is passed to each task.
    """

    description = "Each episode draws one task of the suite (a `tasks` kwarg selects a subset)."
    family = "multi-task"
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array", "human"], "render_fps": 20}

    def __init__(self, tasks: list[str] | tuple[str, ...] | None = None, render_mode: str | None = None, **kwargs):
        from vlagym.envs import TASKS  # the registry lists this env too; import late to avoid a cycle

        known = sorted(t for t in TASKS if t != MULTITASK_ID)
        tasks = list(known if tasks is None else ([tasks] if isinstance(tasks, str) else tasks))
        if not tasks:
            raise ValueError(f"tasks must name at least one task; known: {known}")
        for task in tasks:
            if task not in known:
                hint = difflib.get_close_matches(str(task), known, n=1)
                did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise ValueError(f"unknown task {task!r}{did_you_mean}; known: {known}")
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"tasks has duplicates: {tasks}")
        self.tasks = tuple(tasks)
        self.render_mode = render_mode
        self.envs = {t: gym.make(t, render_mode=render_mode, disable_env_checker=True, **kwargs) for t in self.tasks}
        first = self.envs[self.tasks[0]]
        for task, env in self.envs.items():
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise RuntimeError(f"{task} does not share the observation/action spaces of {self.tasks[0]}")
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        self.metadata = {**self.metadata, "render_fps": first.metadata["render_fps"]}
        self.task = self.tasks[0]

    @property
    def current(self):
        """The drawn task's env (its unwrapped `VLAEnv`)."""
        return self.envs[self.task].unwrapped

    # Scene access follows the drawn task, like a single-task env's.
    @property
    def model(self):
        return self.current.model

    @property
    def data(self):
        return self.current.data

    @property
    def instruction(self) -> str:
        return self.current.instruction

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        task_seed = int(self.np_random.integers(2**31 - 1))
        obs, info = self.envs[self.task].reset(seed=task_seed, options=options)
        info["task"] = self.task
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.envs[self.task].step(action)
        info["task"] = self.task
        return obs, reward, terminated, truncated, info

    def render(self):
        return self.envs[self.task].render()

    def close(self):
        for env in getattr(self, "envs", {}).values():
            env.close()


class MultiTaskExpert:
    """Delegates to the scripted expert of the drawn task, made afresh at every reset."""

    recover = False  # passed on to the task's expert (`ScriptedExpert.recover`)

    def __init__(self, env):
        self.env = env.unwrapped
        self.reset()

    def reset(self) -> None:
        current = self.env.current
        self.expert = current.expert_cls(current)

    def __call__(self, obs=None) -> np.ndarray:
        if self.expert.env is not self.env.current:  # a reset drew another task since our reset()
            self.reset()
        self.expert.recover = self.recover
        return self.expert(obs)
