"""A small synthetic demo file in the exact layout of `vlagym.train.layout`, with values that encode (demo, t).

Demo d (numbered within its file) of length N has, at step t:
    actions[t]      = [t, d, tag, 0.1 * t * j for j = 3 .. A-1]
    obs/proprio[t]  = [t, d, tag, small noise ...]      obs/state[t] = [-t, d, tag, ...]
    obs/<cam>_rgb[t] = noise, with pixel (0, 0) = (t, d, camera number)
so tests can check which frames and actions a sample carries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np
import pytest

from vlagym.train import layout

CAMERAS = ("front", "wrist")
PROPRIO_DIM = 23
STATE_DIM = 83


def write_demo_file(
    path: Path,
    lengths: Sequence[int] = (5, 3, 7),
    incomplete: Sequence[int] = (),
    unfinished: Sequence[int] = (),
    cameras: Sequence[str] = CAMERAS,
    image_size: int = 8,
    action_dim: int = 7,
    tag: float = 0.0,
    seed: int = 0,
) -> Path:
    """Write demos of the given lengths; `incomplete` demos get complete=False, `unfinished` no attribute."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs.update(
            format=layout.FORMAT,
            format_version=layout.FORMAT_VERSION,
            vlagym_version="0.1.0",
            mujoco_version="test",
            created=datetime.now(timezone.utc).isoformat(),
        )
        data = f.create_group("data")
        obs_keys = [layout.image_key(c) for c in cameras] + ["proprio", "state"]
        data.attrs.update(
            env_id="VLA-PickCup-v0",
            env_kwargs=json.dumps({"obs_mode": "rgb+state", "image_size": image_size}),
            total=sum(n for i, n in enumerate(lengths) if i not in incomplete and i not in unfinished),
            obs_keys=json.dumps(obs_keys),
        )
        for d, n in enumerate(lengths):
            t = np.arange(n, dtype=np.float32)
            g = data.create_group(layout.demo_name(d))
            obs = g.create_group("obs")
            for ci, cam in enumerate(cameras):
                images = rng.integers(0, 256, (n, image_size, image_size, 3), dtype=np.uint8)
                images[:, 0, 0] = np.stack([np.arange(n) % 256, np.full(n, d), np.full(n, ci)], axis=1)
                obs.create_dataset(
                    layout.image_key(cam),
                    data=images,
                    chunks=(1, image_size, image_size, 3),
                    compression="gzip",
                )
            proprio = rng.normal(size=(n, PROPRIO_DIM)).astype(np.float32) * 0.01
            proprio[:, :3] = np.stack([t, np.full(n, d), np.full(n, tag)], axis=1)
            state = rng.normal(size=(n, STATE_DIM)).astype(np.float32)
            state[:, :3] = np.stack([-t, np.full(n, d), np.full(n, tag)], axis=1)
            obs.create_dataset("proprio", data=proprio)
            obs.create_dataset("state", data=state)
            actions = 0.1 * t[:, None] * np.arange(action_dim, dtype=np.float32)
            actions[:, :3] = np.stack([t, np.full(n, d), np.full(n, tag)], axis=1)
            g.create_dataset("actions", data=actions.astype(np.float32))
            g.create_dataset("rewards", data=np.zeros(n, np.float32))
            dones = np.zeros(n, np.uint8)
            dones[-1] = 1
            g.create_dataset("dones", data=dones)
            g.create_dataset("states", data=rng.normal(size=(n, 40)))
            g.attrs.update(
                num_samples=n,
                seed=d,
                instruction=f"pick up the cup {d}",
                success=True,
                task="VLA-PickCup-v0",
            )
            if d in incomplete:
                g.attrs["complete"] = False
            elif d not in unfinished:
                g.attrs["complete"] = True  # written last, as the collector does
    return path


@pytest.fixture
def demo_file_factory(tmp_path) -> Callable[..., Path]:
    """`demo_file_factory(name="demos.hdf5", **write_demo_file kwargs)` -> the path of a fresh file."""

    def _make(name: str = "demos.hdf5", **kwargs) -> Path:
        return write_demo_file(tmp_path / name, **kwargs)

    return _make


@pytest.fixture
def demo_file(demo_file_factory) -> Path:
    """Three complete demos of lengths 5, 3 and 7, cameras front and wrist, 8x8 images."""
    return demo_file_factory()
