"""Loading speed of the training dataset: samples/s with 0 and 2 DataLoader workers, measured in one run.

    python bench/bench_dataset.py [--file demos.hdf5] [--batch-size 32] [--chunk-size 10] [--epochs 1]

Without --file it writes a synthetic demo file in the real layout to a temporary folder: 50 episodes x
40 steps, front and wrist cameras at 128x128, one gzip-compressed chunk per frame. The synthetic images
are flat-coloured boxes over banded backgrounds, so they compress about as well as rendered frames (random
noise would be stored uncompressed by gzip and decode unrealistically fast).

Each row reads --epochs shuffled epochs through one DataLoader (persistent workers, their start-up
included) and reports samples/s, plain and with `ImageAugment`; the ratio is against the first row
(0 workers) in the same run.
Numbers are for comparison within one run on one machine, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader

from vlagym.train import layout
from vlagym.train.augment import ImageAugment
from vlagym.train.dataset import DemoDataset


def synthetic_images(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """`n` frames of a few coloured boxes drifting over a banded background."""
    yy, xx = np.mgrid[0:size, 0:size]
    # Bands of flat colour like a shaded table and wall: rendered frames gzip about 20-30x, and so do these.
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


def write_synthetic(path: Path, episodes: int, steps: int, size: int, cameras: tuple[str, ...], seed: int) -> Path:
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs.update(
            format=layout.FORMAT,
            format_version=layout.FORMAT_VERSION,
            vlagym_version="bench",
            mujoco_version="bench",
            created="1970-01-01T00:00:00+00:00",
        )
        data = f.create_group("data")
        data.attrs.update(
            env_id="VLA-PickCup-v0",
            env_kwargs=json.dumps({"obs_mode": "rgb+state", "image_size": size, "cameras": list(cameras)}),
            total=episodes * steps,
            obs_keys=json.dumps([layout.image_key(c) for c in cameras] + ["proprio", "state"]),
        )
        for i in range(episodes):
            g = data.create_group(layout.demo_name(i))
            obs = g.create_group("obs")
            for cam in cameras:
                obs.create_dataset(
                    layout.image_key(cam),
                    data=synthetic_images(rng, steps, size),
                    chunks=(1, size, size, 3),
                    compression="gzip",
                )
            obs.create_dataset("proprio", data=rng.normal(size=(steps, 23)).astype(np.float32))
            obs.create_dataset("state", data=rng.normal(size=(steps, 83)).astype(np.float32))
            g.create_dataset("actions", data=rng.uniform(-1, 1, (steps, 7)).astype(np.float32))
            g.create_dataset("rewards", data=np.zeros(steps, np.float32))
            g.create_dataset("dones", data=np.eye(1, steps, steps - 1, dtype=np.uint8)[0])
            g.create_dataset("states", data=rng.normal(size=(steps, 40)))
            g.attrs.update(num_samples=steps, seed=i, instruction="pick up the red cup", success=True)
            g.attrs.update(task="VLA-PickCup-v0", complete=True)
    return path


def samples_per_second(dataset: DemoDataset, workers: int, batch_size: int, epochs: int) -> float:
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(0),
    )
    start = time.perf_counter()
    count = 0
    for _ in range(epochs):
        for batch in loader:
            count += len(batch["index"])
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, help="a demo file (default: write a synthetic one)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--chunk-size", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=3, help="epochs read per measurement")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads in the main process (DataLoader workers always use 1); more than the free cores "
        "makes OpenMP spin and the 0-worker row collapse on a busy machine",
    )
    parser.add_argument("--episodes", type=int, default=50, help="synthetic file: episodes")
    parser.add_argument("--steps", type=int, default=40, help="synthetic file: steps per episode")
    parser.add_argument("--image-size", type=int, default=128, help="synthetic file: image size")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.file
        if path is None:
            start = time.perf_counter()
            path = write_synthetic(
                Path(tmp) / "synthetic.hdf5", args.episodes, args.steps, args.image_size, ("front", "wrist"), seed=0
            )
            seconds = time.perf_counter() - start
            print(f"wrote {path.stat().st_size / 2**20:.1f} MiB synthetic demo file in {seconds:.1f} s")
        plain = DemoDataset(path, chunk_size=args.chunk_size)
        augmented = DemoDataset(path, chunk_size=args.chunk_size, augment=ImageAugment())
        item = plain[0]
        shapes = ", ".join(
            f"{k.removeprefix('observation.images.')} {tuple(v.shape)}"
            for k, v in item.items()
            if k.startswith("observation.images.")
        )
        print(
            f"{path.name}: {len(plain)} samples, {plain.num_episodes} episodes, images {shapes}, "
            f"batch {args.batch_size}, chunk {args.chunk_size}"
        )
        print(
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
            f"{torch.get_num_threads()} torch threads in the main process\n"
        )
        rows = []
        for workers in args.workers:
            rows.append(
                (
                    workers,
                    samples_per_second(plain, workers, args.batch_size, args.epochs),
                    samples_per_second(augmented, workers, args.batch_size, args.epochs),
                )
            )
        base_plain, base_aug = rows[0][1], rows[0][2]
        print("| num_workers | samples/s | ratio | samples/s with ImageAugment | ratio |")
        print("|---:|---:|---:|---:|---:|")
        for workers, p, a in rows:
            print(f"| {workers} | {p:.0f} | {p / base_plain:.2f} | {a:.0f} | {a / base_aug:.2f} |")


if __name__ == "__main__":
    main()
