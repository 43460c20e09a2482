"""The machine fingerprint: software versions, CPU, GPU and OpenGL renderer of this process.

Recorded beside every results bundle (`vlagym.eval.suite_run`) and speed benchmark (`vlagym.perf`), so that
two results can say what differs between the machines and installs that produced them.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

import vlagym

logger = logging.getLogger(__name__)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _gpu_name() -> str:
    if "torch" not in sys.modules:  # only a checkpoint imports torch; the expert runs without it
        return "not used (no torch in this run)"
    import torch

    if not torch.cuda.is_available():
        return "none (torch.cuda unavailable)"
    return ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))


def _gl_renderer(rendered: bool) -> str:
    """The OpenGL vendor/renderer string, when this run rendered and asking is cheap and safe (EGL/OSMesa)."""
    if not rendered:
        return "not used (state observations)"
    backend = os.environ.get("MUJOCO_GL", "")
    if backend not in ("egl", "osmesa"):  # a failed GLFW context can abort the process: never probe it
        return f"unknown (MUJOCO_GL={backend or 'unset'})"
    try:
        import mujoco
        from OpenGL import GL

        ctx = mujoco.GLContext(16, 16)
        try:
            ctx.make_current()
            parts = [GL.glGetString(name) for name in (GL.GL_VENDOR, GL.GL_RENDERER, GL.GL_VERSION)]
        finally:
            ctx.free()
        return " | ".join(p.decode() if isinstance(p, bytes) else str(p) for p in parts)
    except Exception as err:  # noqa: BLE001 - a fingerprint field, never a reason to fail the run
        logger.info("could not read the GL renderer string: %s", err)
        return "unknown"


def machine_fingerprint(rendered: bool) -> dict[str, Any]:
    """Software versions, machine and renderer of this process (`rendered`: whether it rendered images)."""
    return {
        "versions": {
            "vlagym": vlagym.__version__,
            "mujoco": _version("mujoco"),
            "gymnasium": _version("gymnasium"),
            "numpy": np.__version__,
            "torch": _version("torch"),
            "python": platform.python_version(),
        },
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "gpu": _gpu_name(),
        "gl_renderer": _gl_renderer(rendered),
        "mujoco_gl": os.environ.get("MUJOCO_GL", "unset"),
    }
