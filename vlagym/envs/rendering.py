"""Offscreen renderers of the envs: made with a clear error when OpenGL is unavailable, and closed (with their
env) at interpreter exit."""

from __future__ import annotations

import atexit
import weakref
from typing import Any

import mujoco

from vlagym import headless

# Envs holding GL contexts are closed at interpreter exit, before MuJoCo's EGL
# module terminates the display (it registers that at its first context, so
# registering ours after the first renderer exists makes ours run first);
# otherwise every Renderer.__del__ prints an EGL error on the way out.
_LIVE_ENVS: weakref.WeakSet = weakref.WeakSet()
_exit_hook_registered = False


def _close_live_envs() -> None:
    for env in list(_LIVE_ENVS):
        env.close()


def _track_renderer_owner(env: Any) -> None:
    global _exit_hook_registered
    _LIVE_ENVS.add(env)
    if not _exit_hook_registered:
        atexit.register(_close_live_envs)
        _exit_hook_registered = True


def make_renderer(env: Any, height: int, width: int) -> mujoco.Renderer:
    """A renderer of `env.model` for `height` x `width` images; `env` is closed at interpreter exit."""
    # The offscreen buffer is sized to this renderer alone: software
    # renderers clear and resolve the whole buffer every frame, so an
    # oversized one costs time at every step.
    env.model.vis.global_.offheight, env.model.vis.global_.offwidth = height, width
    advice = (
        "MuJoCo chooses its OpenGL backend when mujoco is first imported: on a headless Linux machine set "
        "MUJOCO_GL=egl in the environment, or import vlagym before mujoco."
    )
    if headless.gl_failure is not None:
        raise RuntimeError(f"offscreen rendering is unavailable: {headless.gl_failure}. {advice}")
    try:
        renderer = mujoco.Renderer(env.model, height, width)
    except Exception as err:  # mujoco raises FatalError or ImportError depending on the backend
        headless.gl_failure = f"creating an OpenGL context failed ({err})"
        raise RuntimeError(f"could not create an offscreen OpenGL context: {err}. {advice}") from err
    _track_renderer_owner(env)
    return renderer
