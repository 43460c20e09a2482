"""The training data: each round's kept successes as a demo file with per-episode weights
(``OUT/rollouts/round_<r>.hdf5``, written by `vlagym.rl.collection.files.write_rollouts`, whose docstring lists
the attributes), and batches that mix them with the demos, drawn ahead of the updates in a background thread.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from torch.utils.data import default_collate

from vlagym.policies.vla import IMAGE_KEY, PROPRIO_KEY, VLAPolicy
from vlagym.rl.collection.episodes import RolloutEpisode
from vlagym.rl.collection.files import WEIGHT_ATTR
from vlagym.rl.fbc.config import ROLLOUTS_DIR
from vlagym.train.augment import ImageAugment
from vlagym.train.configs import AugmentConfig
from vlagym.train.dataset import DemoDataset
from vlagym.train.demo_reader import complete_demos

_LOWDIM = (PROPRIO_KEY, "action", "action_is_pad", "instruction")  # what a batch item keeps besides its images


# ---------------------------------------------------------------------------- rollout files
def rollout_path(out: str | os.PathLike, round_: int) -> Path:
    """``OUT/rollouts/round_<r>.hdf5``: the kept successes of round r."""
    return Path(out) / ROLLOUTS_DIR / f"round_{round_:04d}.hdf5"


def success_weights(successes: list[RolloutEpisode], weighting: str, gamma: float = 1.0) -> list[float]:
    """Each successful episode's sampling weight: 1 ("episode"), or 1 / (successes of its state) ("state"; the
    hindsight replays of a seed's failures share a unit of their own: their scenes differ from the seed's by
    where the target stands); times gamma^T for an episode of T steps (the discounted 0/1 return)."""

    def state(e: RolloutEpisode) -> tuple[int, bool]:
        return e.seed, e.target_xy is not None

    counts: dict[tuple[int, bool], int] = {}
    for e in successes:
        counts[state(e)] = counts.get(state(e), 0) + 1
    base = [1.0 / counts[state(e)] if weighting == "state" else 1.0 for e in successes]
    return [w * gamma ** len(e.actions) for w, e in zip(base, successes, strict=True)]


def read_sample_weights(path: str | os.PathLike) -> np.ndarray:
    """The per-episode weights of a rollout file, in its demos' order (1 where none is stored)."""
    with h5py.File(path, "r") as f:
        data = f["data"]
        return np.array([float(data[n].attrs.get(WEIGHT_ATTR, 1.0)) for n in complete_demos(data, Path(path))])


def demo_dataset(paths: list[str], policy: VLAPolicy, augment: AugmentConfig | None, seed: int) -> DemoDataset | None:
    """The training samples of demo (or rollout) files as `policy` reads them, augmented by `augment` (None:
    not augmented); None without files."""
    if not paths:
        return None
    return DemoDataset(
        paths,
        chunk_size=policy.config.chunk_size,
        cameras=list(policy.config.cameras),
        keys=("proprio",),
        augment=None if augment is None else ImageAugment(augment),
        seed=seed,
    )


# ---------------------------------------------------------------------------- batches
class Mixture:
    """Batches with a fixed share from the demos and the rest from the successes, drawn by one generator.

    Samples are drawn uniformly from each source, or, with `weights` (one per sample of `successes`, in its
    order), each success sample with probability proportional to its weight."""

    def __init__(
        self,
        demos: DemoDataset | None,
        successes: DemoDataset | None,
        demo_fraction: float,
        batch: int,
        weights: np.ndarray | None = None,
    ):
        if demos is None and successes is None:
            raise ValueError("nothing to train on: no demos and no successful episode yet")
        n_demo = round(batch * demo_fraction) if demos is not None else 0
        if successes is None:
            n_demo = batch
        self.parts = [(demos, n_demo, None), (successes, batch - n_demo, None)]
        if weights is not None and successes is not None:
            weights = np.asarray(weights, np.float64)
            if weights.shape != (len(successes),) or not np.all(np.isfinite(weights) & (weights > 0)):
                raise ValueError(
                    f"need one positive finite weight per success sample ({len(successes)}), got shape "
                    f"{weights.shape}, min {weights.min() if weights.size else None}"
                )
            cdf = np.cumsum(weights)
            self.parts[1] = (successes, batch - n_demo, cdf / cdf[-1])

    def batch(self, rng: np.random.Generator) -> dict[str, Any]:
        items = []
        for dataset, n, cdf in self.parts:
            if dataset is None or n == 0:
                continue
            for item in dataset.__getitems__(draw(rng, len(dataset), n, cdf).tolist()):  # one augmentation pass
                items.append({k: v for k, v in item.items() if k.startswith(IMAGE_KEY) or k in _LOWDIM})
        return default_collate(items)


def draw(rng: np.random.Generator, size: int, n: int, cdf: np.ndarray | None) -> np.ndarray:
    """`n` sample indices in [0, size): uniform, or by the normalised cumulative weights `cdf`."""
    if cdf is None:
        return rng.integers(0, size, n)
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), size - 1)


class Prefetch:
    """Draws `n` batches in a background thread, at most `depth` ahead of the training loop, so reading and
    augmenting the next batch overlaps the current update. The thread is the only caller of `draw` (and so the
    only user of its generator and datasets), so the batches are exactly those of calling `draw` inline.

    Use as a context manager: leaving it early (an error in the loop) stops the thread; an error in `draw`
    is raised in the loop. ``depth=0`` draws inline, in the loop's thread."""

    def __init__(self, draw: Callable[[], Any] | None, n: int, depth: int = 2):
        self._draw, self._n, self._inline = draw, n, depth == 0
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="filtered-bc-batches", daemon=True)

    def _put(self, item: tuple[Any, BaseException | None]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for _ in range(self._n):
                if not self._put((self._draw(), None)):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the training loop, which raises it
            self._put((None, e))

    def __enter__(self) -> Iterator[Any]:
        if self._inline:
            return (self._draw() for _ in range(self._n))
        self._thread.start()
        return self._batches()

    def _batches(self) -> Iterator[Any]:
        for _ in range(self._n):
            batch, error = self._queue.get()
            if error is not None:
                raise error
            yield batch

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
