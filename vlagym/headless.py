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

#: Why offscreen rendering cannot work in this process, once known. Creating a
#: GL context again after a failure can abort the process (GLFW in MuJoCo 3.x),
#: so renderers check this first and raise instead of retrying.
gl_failure: str | None = None


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
    the process).

    MuJoCo 4.x looks the context class up each time a Renderer is created, so
    pointing it at the EGL class is enough. MuJoCo 3.x has by then loaded GLFW's
    GL entry points and cannot switch; there the first render raises a clear
    error (see `vlagym.envs.rendering.make_renderer`) and we say why now.
    """
    try:
        import mujoco

        if int(mujoco.__version__.split(".")[0]) < 4:
            raise ImportError(f"MuJoCo {mujoco.__version__} cannot switch GL backends after import")
        module = importlib.import_module("mujoco.rendering.classic.gl_context")
        from mujoco.egl import GLContext
    except Exception as err:  # noqa: BLE001 - any failure leaves mujoco's own choice in place
        global gl_failure
        gl_failure = (
            "mujoco was imported before vlagym with MUJOCO_GL unset and there is no display, so MuJoCo chose "
            f"GLFW, which cannot render here ({err})"
        )
        logger.warning("%s. Set MUJOCO_GL=egl in the environment, or import vlagym before mujoco.", gl_failure)
        return
    module.GLContext = GLContext
    logger.info("mujoco was imported before vlagym; switched its offscreen rendering to EGL")
