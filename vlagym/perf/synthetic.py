"""A synthetic demo file in the real layout: what the dataset, bc and post-training sections read by default.

Writing it costs no simulation (one env reset for the shapes); reading it costs what reading collected demos
costs, since its frames compress like rendered ones and it is stored as `vlagym demos` stores.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import gymnasium as gym
import h5py
import mujoco
import numpy as np

import vlagym
from vlagym.perf.config import CAMERAS
from vlagym.train import layout


def synthetic_images(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """`n` frames of a few coloured boxes drifting over a banded background.

    Bands of flat colour like a shaded table and wall: rendered frames gzip about 20-30x, and so do these
    (random noise would be stored uncompressed by gzip and decode unrealistically fast).
    """
    yy, xx = np.mgrid[0:size, 0:size]
    background = np.stack([xx * 8 // size, yy * 8 // size, np.full_like(xx, 3)], axis=-1) * 25.0
    frames = np.empty((n, size, size, 3), np.uint8)
    boxes = rng.uniform(0, size * 0.8, (4, 2))
    colors = rng.uniform(0, 255, (4, 3))
    velocity = rng.uniform(-1.5, 1.5, (4, 2))
    for t in range(n):
        img = background.copy()
        for (x, y), color in zip(boxes + t * velocity, colors, strict=True):
            x0, y0 = int(np.clip(x, 0, size - 8)), int(np.clip(y, 0, size - 8))
            img[y0 : y0 + size // 6, x0 : x0 + size // 6] = color
        frames[t] = np.clip(img, 0, 255)
    return frames


def write_synthetic_demos(path: Path, task: str, episodes: int, steps: int, image_size: int, seed: int = 0) -> Path:
    """A demo file in the layout of `vlagym.train.layout` with synthetic contents, the shapes taken from `task`.

    Compressed like `vlagym demos` writes (gzip, one frame per chunk), so reading it costs what reading
    collected demos costs; writing it costs no simulation.
    """
    env_kwargs = {"obs_mode": "rgb+state", "image_size": image_size, "cameras": list(CAMERAS)}
    env = gym.make(task, **env_kwargs)
    try:
        obs, _ = env.reset(seed=seed)
        u = env.unwrapped
        state_size = mujoco.mj_stateSize(u.model, mujoco.mjtState.mjSTATE_INTEGRATION)
    finally:
        env.close()
    proprio_dim, state_dim, action_dim = len(obs["proprio"]), len(obs["state"]), env.action_space.shape[0]
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs.update(
            format=layout.FORMAT,
            format_version=layout.FORMAT_VERSION,
            vlagym_version=vlagym.__version__,
            mujoco_version=mujoco.__version__,
            created=datetime.now(timezone.utc).isoformat(),
        )
        data = f.create_group("data")
        data.attrs.update(
            env_id=task,
            env_kwargs=json.dumps(env_kwargs),
            total=episodes * steps,
            obs_keys=json.dumps([layout.image_key(c) for c in CAMERAS] + ["proprio", "state"]),
        )
        for i in range(episodes):
            g = data.create_group(layout.demo_name(i))
            o = g.create_group("obs")
            for cam in CAMERAS:
                o.create_dataset(
                    layout.image_key(cam),
                    data=synthetic_images(rng, steps, image_size),
                    chunks=(1, image_size, image_size, 3),
                    compression="gzip",
                )
            o.create_dataset("proprio", data=rng.normal(size=(steps, proprio_dim)).astype(np.float32))
            o.create_dataset("state", data=rng.normal(size=(steps, state_dim)).astype(np.float32))
            g.create_dataset("actions", data=rng.uniform(-1, 1, (steps, action_dim)).astype(np.float32))
            g.create_dataset("rewards", data=np.zeros(steps, np.float32))
            g.create_dataset("dones", data=(np.arange(steps) == steps - 1).astype(np.uint8))
            g.create_dataset("states", data=rng.normal(size=(steps, state_size)))
            g.attrs.update(num_samples=steps, seed=i, instruction=obs["instruction"], success=True, task=task)
            g.attrs["complete"] = True  # last, as the collector does: a demo without it is unfinished
    return path
