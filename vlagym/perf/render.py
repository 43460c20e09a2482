"""The render section: what MuJoCo's default visual settings would cost per camera image, one at a time.

The vlagym scene turns multisampling, the large shadow map and fine tessellation off because software
rendering (llvmpipe) pays for them ~100x at small images; this table shows each setting's price.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import gymnasium as gym
import mujoco

from vlagym.perf.config import CAMERAS, BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.timing import interleaved, passes_note, pinned_to_one_core, ratios, summarise
from vlagym.perf.work import Work

#: visual settings changed one at a time (against the scene's own), to show why the scene turns them off
RENDER_ABLATION: dict[str, dict[str, Any]] = {
    "vlagym scene settings": {},
    "+ 4x multisampling": {"offsamples": 4},
    "+ 4096^2 shadow map, shadows on": {"shadowsize": 4096, "castshadow": True},
    "+ default tessellation (28x16)": {"numslices": 28, "numstacks": 16},
    "+ 640x480-sized offscreen buffer": {"buffer": 640},
    "MuJoCo defaults, all of the above": {
        "offsamples": 4,
        "shadowsize": 4096,
        "castshadow": True,
        "numslices": 28,
        "numstacks": 16,
        "buffer": 640,
    },
}
_QUALITY = ("shadowsize", "offsamples", "numslices", "numstacks")


def render_cost(env: gym.Env, size: int, images: int, **changes: Any) -> float:
    """Microseconds per camera image with some visual settings changed (restored afterwards)."""
    u = env.unwrapped
    m = u.model
    saved = {k: getattr(m.vis.quality, k) for k in _QUALITY}
    castshadow = m.light_castshadow.copy()
    offsize = (m.vis.global_.offwidth, m.vis.global_.offheight)
    try:
        for k in _QUALITY:
            if k in changes:
                setattr(m.vis.quality, k, changes[k])
        if changes.get("castshadow"):
            m.light_castshadow[:] = 1
        m.vis.global_.offwidth = m.vis.global_.offheight = changes.get("buffer", size)
        renderer = mujoco.Renderer(m, size, size)
        try:
            for _ in range(3):
                renderer.update_scene(u.data, camera="front")
                renderer.render()
            t = time.perf_counter()
            for i in range(images):
                renderer.update_scene(u.data, camera=CAMERAS[i % 2])
                renderer.render()
            return (time.perf_counter() - t) / images * 1e6
        finally:
            renderer.close()
    finally:
        for k, v in saved.items():
            setattr(m.vis.quality, k, v)
        m.light_castshadow[:] = castshadow
        m.vis.global_.offwidth, m.vis.global_.offheight = offsize


def bench_render(cfg: BenchConfig, work: Work) -> Table:
    """The render table: one row per setting of `RENDER_ABLATION`, on the first task."""
    task, size = cfg.task_list[0], cfg.image_size
    env = gym.make(task, obs_mode="rgb", image_size=size, cameras=CAMERAS)
    try:
        env.reset(seed=0)
        with pinned_to_one_core(cfg.pin) as pinning:
            costs = interleaved(
                {
                    name: functools.partial(render_cost, env, size, cfg.budget.render_images, **changes)
                    for name, changes in RENDER_ABLATION.items()
                },
                cfg.repeats,
                "render",
            )
    finally:
        env.close()
    base = costs["vlagym scene settings"]
    rows = [
        {"setting": name, **summarise({"us_per_image": us, "x_vlagym": ratios(us, base)})} for name, us in costs.items()
    ]
    return Table(
        "render",
        f"What MuJoCo's default visual settings would cost per {size}x{size} image ({task})",
        ["setting"],
        {"setting": "render setting", "us_per_image": "us per image", "x_vlagym": "x vlagym"},
        rows,
        [f"{pinning}; {cfg.budget.render_images} images per setting and pass", passes_note(cfg.repeats)],
    )
