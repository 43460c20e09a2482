"""Headless OpenGL set-up, done once when vlagym is imported.

MuJoCo picks its OpenGL backend from MUJOCO_GL when `mujoco` is first imported.
On a Linux machine without a display the only backend that works is EGL (Mesa's
llvmpipe on CPU-only machines), so vlagym selects it when the user has not chosen.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

logger = logging.getLogger(__name__)


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def configure_headless_gl() -> None:
    """Select EGL when nothing is set; a user's own MUJOCO_GL always wins."""
    if not sys.platform.startswith("linux"):
        return
    # llvmpipe's worker threads do not survive fork(): a process that rendered
    # and then forks (AsyncVectorEnv's default start method) deadlocks in the
    # child's first render. Rendering in the calling thread avoids that, and at
    # 64-256 px images it is no slower.
    os.environ.setdefault("LP_NUM_THREADS", "0")
    if "MUJOCO_GL" in os.environ:
        return
    os.environ["MUJOCO_GL"] = "egl"
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    if "mujoco" in sys.modules and not has_display():
        _switch_imported_mujoco_to_egl()


def _switch_imported_mujoco_to_egl() -> None:
    """mujoco was imported before vlagym with MUJOCO_GL unset, so it chose GLFW,
    which cannot work without a display (and a second failed attempt aborts
    the process). Point its renderer at the EGL context class instead; the
    Renderer looks the class up each time one is created."""
    for name in ("mujoco.rendering.classic.gl_context", "mujoco.gl_context"):  # MuJoCo 4.x, 3.x
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        try:
            from mujoco.egl import GLContext
        except Exception as err:  # noqa: BLE001 - any failure leaves mujoco's own choice in place
            logger.warning("mujoco was imported before vlagym and EGL is unavailable (%s); rendering may fail", err)
            return
        module.GLContext = GLContext
        logger.info("mujoco was imported before vlagym; switched its offscreen rendering to EGL")
        return
