"""vlagym tasks and their registration."""

from __future__ import annotations

import importlib
from typing import Any

from gymnasium.envs.registration import register, registry

#: id -> (entry point, max_episode_steps)
TASKS: dict[str, tuple[str, int]] = {
    "VLA-PickCup-v0": ("vlagym.envs.pick_cup:PickCupEnv", 100),
    "VLA-PickObject-v0": ("vlagym.envs.pick_object:PickObjectEnv", 100),
    "VLA-PlaceCupOnPlate-v0": ("vlagym.envs.place_cup:PlaceCupOnPlateEnv", 150),
    "VLA-PlaceCupInBowl-v0": ("vlagym.envs.place_cup:PlaceCupInBowlEnv", 150),
    "VLA-PushCube-v0": ("vlagym.envs.push_cube:PushCubeEnv", 150),
    "VLA-StackBlocks-v0": ("vlagym.envs.stack_blocks:StackBlocksEnv", 150),
    "VLA-PressButton-v0": ("vlagym.envs.press_button:PressButtonEnv", 80),
    "VLA-OpenDrawer-v0": ("vlagym.envs.drawer:OpenDrawerEnv", 120),
    "VLA-CloseDrawer-v0": ("vlagym.envs.drawer:CloseDrawerEnv", 120),
    "VLA-PutCupInDrawer-v0": ("vlagym.envs.put_cup_in_drawer:PutCupInDrawerEnv", 250),
}


# The multi-task env runs each task inside that task's own TimeLimit; its own
# limit is the longest of them, so it never cuts a task short.
TASKS["VLA-MultiTask-v0"] = ("vlagym.envs.multitask:MultiTaskEnv", max(steps for _, steps in TASKS.values()))


def register_envs() -> None:
    """Register every vlagym task with Gymnasium (idempotent)."""
    for env_id, (entry_point, max_steps) in TASKS.items():
        if env_id not in registry:
            register(
                id=env_id,
                entry_point=entry_point,
                vector_entry_point=f"vlagym.envs.vector_entry:{env_id}",  # a string: specs stay JSON
                max_episode_steps=max_steps,
            )


def __getattr__(name: str) -> Any:
    # `VLAEnv` on first use: importing vlagym (and its command line) must not load mujoco.
    if name == "VLAEnv":
        from vlagym.envs.base import VLAEnv

        return VLAEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def can_move_target(env_id: str) -> bool:
    """Whether the task's envs take ``reset(options={"target_xy": ...})`` (what hindsight replays need)."""
    from vlagym.envs.base import VLAEnv

    module, _, name = TASKS[env_id][0].partition(":")
    cls = getattr(importlib.import_module(module), name)
    return issubclass(cls, VLAEnv) and cls._move_target is not VLAEnv._move_target


__all__ = ["TASKS", "VLAEnv", "can_move_target", "register_envs"]
