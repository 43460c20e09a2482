"""vlagym: language-conditioned MuJoCo manipulation tasks and the VLA training loop around them.

import gymnasium as gym
import vlagym

env = gym.make("VLA-PickCup-v0", obs_mode="rgb")
"""

from __future__ import annotations

from vlagym.headless import configure_headless_gl

# Before anything imports mujoco's renderer: headless EGL unless the user chose.
configure_headless_gl()

from vlagym.envs import TASKS, register_envs  # noqa: E402

__version__ = "0.1.0"

register_envs()


def make_expert(env):
    """The scripted expert of `env`'s task: an object with `reset()` and `__call__(obs) -> action`.

    Call `expert.reset()` after every `env.reset()`.
    """
    from vlagym.envs.base import VLAEnv
    from vlagym.envs.multitask import MultiTaskEnv, MultiTaskExpert

    base = env.unwrapped
    if isinstance(base, MultiTaskEnv):
        return MultiTaskExpert(env)
    if not isinstance(base, VLAEnv) or base.expert_cls is None:
        raise ValueError(f"{type(base).__name__} has no scripted expert; vlagym tasks: {sorted(TASKS)}")
    return base.expert_cls(env)


def __getattr__(name: str):
    # `VLAEnv` on first use: `import vlagym` (and `vlagym --help`) must not load mujoco.
    if name == "VLAEnv":
        from vlagym.envs.base import VLAEnv

        return VLAEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TASKS", "VLAEnv", "make_expert", "register_envs", "__version__"]
