"""The behaviour-cloning dataset over demo files (see `vlagym.train.layout`).

`DemoDataset` yields one sample per (demo, t) with LeRobot-style keys: the observation at t (images per
camera as uint8, proprio, optionally state and a history of past frames), the instruction, and the next K
actions (the expert's `expert_actions` where a demo has them) with a padding mask where the chunk runs past
the episode end. Only demos marked complete count.

The statistics of the files (`load_or_compute_stats`, `compute_stats`, `to_norm_stats`) live in
`vlagym.train.stats`; they are re-exported here, where their users have always imported them from.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import Dataset

from vlagym.train import layout
from vlagym.train.augment import NUM_UNIFORMS
from vlagym.train.demo_reader import PathLike, as_paths, complete_demos, data_group, demo_number, text_attr
from vlagym.train.stats import LOWDIM_KEYS, Stats, compute_stats, load_or_compute_stats, stats_path, to_norm_stats
from vlagym.wrappers.normalize import MODES as NORMALIZATIONS
from vlagym.wrappers.normalize import NormStats

IMAGE_FORMATS = ("chw", "hwc")
SHADING_KEY = 1  # the last word of the gain field's draws' key (the view's and jitter's key has none)
OPEN_EPISODES = 1024  # per process: the episodes whose HDF5 datasets stay open (least recently used go)


# ---------------------------------------------------------------------------- the dataset
def counter_uniforms(key: Sequence[int], counters: np.ndarray, k: int) -> np.ndarray:
    """`(len(counters), k)` uniforms in [0, 1): entry (i, j) depends only on (`key`, counters[i], j).

    A counter-based generator (SplitMix64's mixing of a Weyl sequence), vectorised: one sample's draws come
    out the same whichever other samples share its batch, at a few microseconds per batch instead of a
    seeded generator per sample."""
    base = np.random.SeedSequence(list(key)).generate_state(1, dtype=np.uint64)[0]
    z = np.asarray(counters, dtype=np.uint64).reshape(-1, 1) * np.uint64(k) + np.arange(k, dtype=np.uint64)
    z = base + z * np.uint64(0x9E3779B97F4A7C15)  # integer arrays wrap silently
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


class DemoDataset(Dataset):
    """One sample per (complete demo, step t) over one or more demo files.

    Args:
        paths: one demo file or a list of them; episode indices run over the files in the given order.
        chunk_size: K, the number of future actions per sample (actions t .. t+K-1).
        history: T, the number of observation frames (t-T+1 .. t). With T > 1 observations get a leading
            time axis and frames before the episode start repeat frame 0, flagged in `observation_is_pad`.
        cameras: the cameras to load (`None`: every camera in the files; `[]`: no images).
        keys: the low-dim observations to load, from `("proprio", "state")`.
        stats: statistics (`load_or_compute_stats`, or a `NormStats`) to normalise actions and low-dim
            observations with, by the wrappers' `NormStats` maps; `None` (default) returns raw values.
            Normalising inside the policy (statistics in its buffers) is preferred; this is for policies
            that do not.
        augment: applied to each camera's uint8 `(3, H, W)` (or `(T, 3, H, W)`) images: an `ImageAugment`
            (or anything with its `apply(images, uniforms)`) gets the whole batch of a camera at once;
            any other callable is called as `augment(images, generator=g, shared=True)` per item. The history
            frames of one camera share a draw, cameras and samples each get their own. Use for training only.
        image_format: `"chw"` (default, torch) or `"hwc"` (as stored) for the image tensors.
        normalization: `"mean_std"`, `"min_max"` or `"quantile"` (see `vlagym.wrappers.normalize`), used when
            `stats` is a plain dict (a `NormStats` brings its own mode).
        seed: with a seed, sample i's augmentation depends only on (seed, epoch, i) (see `set_epoch`), not on the
            other samples of its batch;
            without, it is drawn from torch's global generator (which a DataLoader seeds per worker and epoch).
        lerobot: how the features of LeRobot v3.0 folders among `paths` map onto the demo keys (a
            `vlagym.train.lerobot.format.LeRobotMapping`; None: its defaults). A folder is read through its
            converted demo file (`vlagym.train.lerobot.read.lerobot_demo_file`), so its items are those of a demo file.
        preload: read every episode's arrays (the loaded cameras and keys, the labels) into memory at
            construction, decoded (`nbytes` is their size), instead of reading each sample from the files. The
            items are the same; reading them is cheaper. DataLoader workers forked later share the arrays.

    An item is a dict: `observation.images.<camera>` uint8 `(3, H, W)` / `(T, 3, H, W)`,
    `observation.proprio` float32 `(23,)` / `(T, 23)`, `observation.state` (if asked), `observation_is_pad`
    bool `(T,)` (history > 1 only), `instruction` str, `action` float32 `(K, A)`, `action_is_pad` bool `(K,)`
    (padded steps repeat the episode's last action), `index`, `episode_index`, `frame_index`, `task`; and
    `task_instruction` str where some episode's steps were labelled under a sub-instruction (`subtasks`).

    HDF5 files are opened lazily in the process that reads them (h5py handles do not survive a fork), so
    the dataset works with any number of DataLoader workers. Construction reads only attributes and shapes.
    """

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        chunk_size: int = 1,
        history: int = 1,
        cameras: Sequence[str] | None = None,
        keys: Sequence[str] = ("proprio",),
        stats: Stats | NormStats | None = None,
        augment: Callable[..., torch.Tensor] | None = None,
        image_format: str = "chw",
        normalization: str = "mean_std",
        seed: int | None = None,
        preload: bool = False,
        lerobot: Any = None,
    ) -> None:
        if int(chunk_size) != chunk_size or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        if int(history) != history or history < 1:
            raise ValueError(f"history must be a positive integer, got {history!r}")
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {list(IMAGE_FORMATS)}, got {image_format!r}")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {list(NORMALIZATIONS)}, got {normalization!r}")
        keys = tuple(keys)
        unknown = [k for k in keys if k not in LOWDIM_KEYS]
        if unknown:
            raise ValueError(f"unknown observation keys {unknown}; known: {list(LOWDIM_KEYS)}")
        self.paths = as_paths(paths)
        if any(p.is_dir() for p in self.paths):  # LeRobot v3.0 folders: read through their converted demo files
            from vlagym.train.lerobot.read import resolve_dataset

            self.paths = [resolve_dataset(p, lerobot) for p in self.paths]
        self.chunk_size = int(chunk_size)
        self.history = int(history)
        self.keys = keys
        self.augment = augment
        self.image_format = image_format
        self.normalization = normalization
        self.seed = seed
        self.epoch = 0
        self._scan(cameras)
        self.stats = None if stats is None else to_norm_stats(stats, normalization)
        if self.stats is not None:
            self.normalization = self.stats.mode
            missing = [k for k in ("action", *keys) if k not in self.stats.keys()]
            if missing:
                raise ValueError(f"stats have no entry for {missing}; they have {sorted(self.stats.keys())}")
            for key, dim in self.dims.items():
                shape = self.stats[key].shape
                if shape != (dim,):
                    raise ValueError(f"stats[{key!r}] have shape {shape}, the data ({dim},)")
        self._pid: int | None = None
        self._handles: dict[int, h5py.File] = {}
        self._episodes: OrderedDict[int, dict[str, h5py.Dataset]] = OrderedDict()
        self._memory: dict[str, np.ndarray] | None = None
        if preload:
            self.preload()

    # -- index
    def _scan(self, cameras: Sequence[str] | None) -> None:
        """Read the episode table (attributes and shapes only) and check the files agree with each other."""
        files, demos, lengths, instructions, tasks, told = [], [], [], [], [], []
        row_bytes: list[dict[str, int]] = []  # per episode: bytes of one step of each array, by `_arrays` key
        found_cameras: list[str] | None = None
        action_dim = None
        self.num_skipped = 0
        for fi, path in enumerate(self.paths):
            with h5py.File(path, "r") as f:
                data = data_group(f, path)
                complete = complete_demos(data, path)
                self.num_skipped += len(data) - len(complete)
                for name in complete:
                    demo = data[name]
                    n = int(demo.attrs["num_samples"])
                    obs = demo["obs"]
                    here = sorted(k.removesuffix(layout.IMAGE_SUFFIX) for k in obs if k.endswith(layout.IMAGE_SUFFIX))
                    if found_cameras is None:
                        found_cameras = here
                        action_dim = demo["actions"].shape[1]
                        # Dimensions of the arrays an item carries (and normalises), by stats key.
                        self.dims = {"action": int(action_dim)}
                        self.dims.update({k: int(obs[k].shape[1]) for k in self.keys if k in obs})
                    row_bytes.append(self._check_demo(path, name, demo, n, here, found_cameras, action_dim))
                    files.append(fi)
                    demos.append(demo_number(path, name))
                    lengths.append(n)
                    instructions.append(text_attr(demo, "instruction"))
                    told.append(text_attr(demo, "task_instruction") or instructions[-1])
                    tasks.append(text_attr(demo, "task"))
        if found_cameras is None:
            raise ValueError(f"no complete demos in {', '.join(map(str, self.paths))}")
        if cameras is None:
            cameras = found_cameras
        cameras = list(cameras)
        unknown = [c for c in cameras if c not in found_cameras]
        if unknown:
            raise ValueError(f"cameras {cameras} not all in the demo files; available: {found_cameras}")
        self.cameras = cameras
        wanted = {"actions", *self.keys, *(layout.image_key(cam) for cam in cameras)}
        # Bytes of the decoded arrays an epoch reads (the loaded cameras and keys, the labels): what `preload` holds.
        self.nbytes = sum(
            n * sum(b for k, b in rows.items() if k in wanted) for n, rows in zip(lengths, row_bytes, strict=True)
        )
        self.action_dim = int(action_dim)
        self.instructions, self.tasks = instructions, tasks
        #: what each episode's task was told, where its steps were labelled under one of its sub-instructions
        #: (`vlagym.train.subtasks`); then items carry it as `task_instruction`
        self.task_instructions = told
        self.subtasks = tuple(sorted({a for a, b in zip(instructions, told, strict=True) if a != b}))
        self._files = np.asarray(files, dtype=np.int32)
        self._demos = np.asarray(demos, dtype=np.int64)
        self.episode_lengths = np.asarray(lengths, dtype=np.int64)
        # Sample i belongs to the episode e with ends[e-1] <= i < ends[e].
        self._ends = np.cumsum(self.episode_lengths)

    def _check_demo(
        self, path: Path, name: str, demo: h5py.Group, n: int, cameras: list[str], first: list[str], action_dim: int
    ) -> dict[str, int]:
        """Check one demo against the first; returns the bytes of one step of each array an item may read, by
        `_arrays` key (the labels, `expert_actions` where present, have the layout of `actions`)."""
        where = f"{path}:/data/{name}"
        if cameras != first:
            raise ValueError(f"{where} has cameras {cameras}, earlier demos have {first}")
        actions, obs = demo["actions"], demo["obs"]
        if actions.shape != (n, action_dim):
            raise ValueError(f"{where}/actions has shape {actions.shape}, expected {(n, action_dim)}")
        row = {"actions": action_dim * actions.dtype.itemsize}
        for key in self.keys:
            if key not in obs:
                raise ValueError(f"{where}/obs has no {key!r}; it has {sorted(obs)}")
            ds = obs[key]
            if ds.shape[0] != n:
                raise ValueError(f"{where}/obs/{key} has {ds.shape[0]} steps, num_samples is {n}")
            row[key] = int(np.prod(ds.shape[1:])) * ds.dtype.itemsize
        for cam in cameras:
            ds = obs[layout.image_key(cam)]
            if ds.dtype != np.uint8 or ds.ndim != 4 or ds.shape[0] != n or ds.shape[3] != 3:
                raise ValueError(
                    f"{where}/obs/{layout.image_key(cam)}: {ds.shape} {ds.dtype}, expected ({n}, H, W, 3) uint8"
                )
            row[layout.image_key(cam)] = int(np.prod(ds.shape[1:]))
        return row

    @property
    def num_episodes(self) -> int:
        return len(self.episode_lengths)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def task_samples(self) -> dict[str, np.ndarray]:
        """The sample indices of each task (the demos' `task` attribute), in order of first appearance."""
        tasks = list(dict.fromkeys(self.tasks))
        per_sample = np.repeat([tasks.index(t) for t in self.tasks], self.episode_lengths)
        return {task: np.flatnonzero(per_sample == i) for i, task in enumerate(tasks)}

    def locate(self, index: int) -> tuple[int, int]:
        """(episode_index, frame_index) of sample `index`."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample index {index} out of range for {len(self)} samples")
        episode = int(np.searchsorted(self._ends, index, side="right"))
        start = int(self._ends[episode - 1]) if episode else 0
        return episode, index - start

    def set_epoch(self, epoch: int) -> None:
        """Select the augmentation draws of `epoch` (with `seed`); DataLoader workers see it from the next epoch."""
        self.epoch = int(epoch)

    # -- per-process file handles
    def _arrays(self, episode: int) -> dict[str, h5py.Dataset]:
        """The HDF5 datasets of `episode` ("actions", low-dim keys, image keys), opened in this process."""
        pid = os.getpid()
        if self._pid != pid:
            # A forked worker inherits the parent's handles: never use them, open its own.
            self._handles, self._episodes = {}, OrderedDict()
            self._pid = pid
        arrays = self._episodes.get(episode)
        if arrays is not None:
            self._episodes.move_to_end(episode)
            return arrays
        fi = int(self._files[episode])
        f = self._handles.get(fi)
        if f is None:
            # No chunk cache: samples are read in random order, so decompressed frames are rarely reused,
            # and a cache per open dataset would grow with the number of episodes held open.
            f = self._handles[fi] = h5py.File(self.paths[fi], "r", rdcc_nbytes=0)
        demo = f["data"][layout.demo_name(int(self._demos[episode]))]
        # Looking datasets up by name costs as much as reading a frame: keep them per episode.
        arrays = {"actions": layout.label_actions(demo)}
        arrays.update({key: demo["obs"][key] for key in self.keys})
        arrays.update({layout.image_key(cam): demo["obs"][layout.image_key(cam)] for cam in self.cameras})
        self._episodes[episode] = arrays
        if len(self._episodes) > OPEN_EPISODES:
            self._episodes.popitem(last=False)
        return arrays

    @property
    def preloaded(self) -> bool:
        return self._memory is not None

    def preload(self) -> None:
        """Read every episode's arrays into memory (`nbytes` of them, decoded) and close the files; the items
        stay the same. Call it before a DataLoader forks its workers, so that they share the arrays."""
        if self._memory is not None:
            return
        # One array per key over all episodes (episode e at rows ends[e-1]:ends[e]), so that a batch is one gather.
        episodes = [self._arrays(e) for e in range(self.num_episodes)]
        memory = {}
        for key in episodes[0]:
            shapes = {a[key].shape[1:] for a in episodes}
            if len(shapes) > 1:
                raise ValueError(f"the demos' {key!r} arrays have different shapes {sorted(shapes)}; preload needs one")
            dtype = np.result_type(*(a[key].dtype for a in episodes))
            memory[key] = np.empty((len(self), *shapes.pop()), dtype=dtype)
        starts = self._ends - self.episode_lengths
        for e, arrays in enumerate(episodes):
            for key, array in arrays.items():
                memory[key][starts[e] : self._ends[e]] = array[()]
        self._memory = memory
        self.close()

    def close(self) -> None:
        """Close the files this process opened (they reopen on the next read)."""
        if self._pid == os.getpid():
            self._episodes.clear()
            for f in self._handles.values():
                f.close()
        self._handles, self._episodes = {}, OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_handles"], state["_episodes"], state["_pid"] = {}, OrderedDict(), None
        return state

    # -- items
    def _generator(self, index: int) -> torch.Generator:
        """Sample `index`'s generator, for an augmentation without `apply` (a plain callable)."""
        if self.seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        else:
            words = np.random.SeedSequence([self.seed, self.epoch, index]).generate_state(2, dtype=np.uint32)
            seed = (int(words[0]) << 31) ^ int(words[1])
        return torch.Generator().manual_seed(seed)

    def _uniforms(self, indices: np.ndarray, camera: int, k: int, *key: int) -> np.ndarray:
        """`(len(indices), k)` uniforms in [0, 1) for camera number `camera` of the samples `indices`: with a
        seed, a function of (seed, epoch, index, camera, *key) alone; without, from torch's global generator."""
        if self.seed is None:
            return torch.rand(len(indices), k, dtype=torch.float64).numpy()
        return counter_uniforms([self.seed, self.epoch, camera, *key], indices, k)

    def _augment_uniforms(self, indices: np.ndarray, camera: int) -> np.ndarray:
        """`ImageAugment.apply`'s draws for camera number `camera` of the samples `indices`. The gain field's come
        from a key of their own, so turning it on leaves the view's and the jitter's draws as they were."""
        uniforms = self._uniforms(indices, camera, NUM_UNIFORMS)
        extra = getattr(self.augment, "num_uniforms", NUM_UNIFORMS) - NUM_UNIFORMS
        if extra <= 0:
            return uniforms
        return np.concatenate([uniforms, self._uniforms(indices, camera, extra, SHADING_KEY)], axis=1)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The items `indices`, as ``[self[i] for i in indices]`` gives them; torch's DataLoader fetches a batch
        through this. With an augmentation that takes its draws as uniforms (`ImageAugment.apply`), each
        sample's draws depend on (seed, epoch, index, camera) alone and the pixel work runs once per camera for
        the whole batch; a plain callable augments item by item, from each sample's own generator."""
        read = self._gather(indices) if self._memory is not None else [self._read(int(i)) for i in indices]
        if self.augment is None or not read:
            return read
        keys = [f"observation.images.{cam}" for cam in self.cameras]
        if hasattr(self.augment, "apply"):
            index = np.array([item["index"] for item in read], dtype=np.int64)
            for c, (cam, key) in enumerate(zip(self.cameras, keys, strict=True)):
                images = torch.stack([item[key] for item in read])
                images = self.augment.apply(images, self._augment_uniforms(index, c), camera=cam)
                for item, image in zip(read, images, strict=True):
                    item[key] = image
        else:
            for item in read:
                generator = self._generator(item["index"])
                for key in keys:
                    item[key] = self.augment(item[key], generator=generator, shared=True)
        if self.image_format == "hwc":
            for item in read:
                for key in keys:
                    item[key] = item[key].movedim(-3, -1).contiguous()
        return read

    def _gather(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """`_read` of many items at once from the preloaded arrays: one gather per key (the same values)."""
        index = np.asarray(indices, dtype=np.int64).reshape(-1)
        index = np.where(index < 0, index + len(self), index)
        bad = (index < 0) | (index >= len(self))
        if bad.any():
            raise IndexError(f"sample index {int(np.asarray(indices)[bad][0])} out of range for {len(self)} samples")
        episode = np.searchsorted(self._ends, index, side="right")
        n = self.episode_lengths[episode]
        start = self._ends[episode] - n
        t = index - start
        frames = t[:, None] + np.arange(1 - self.history, 1)  # (B, T); early frames repeat frame 0
        rows = start[:, None] + np.clip(frames, 0, None)
        rows = rows if self.history > 1 else rows[:, 0]
        batch: dict[str, torch.Tensor] = {}
        for cam in self.cameras:
            images = torch.from_numpy(self._memory[layout.image_key(cam)][rows])
            if self.augment is not None or self.image_format == "chw":
                images = images.movedim(-1, -3).contiguous()
            batch[f"observation.images.{cam}"] = images
        for key in self.keys:
            x = self._memory[key][rows]
            if self.stats is not None:
                x = self.stats.normalize(key, x)
            batch[f"observation.{key}"] = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        if self.history > 1:
            batch["observation_is_pad"] = torch.from_numpy(frames < 0)
        steps = t[:, None] + np.arange(self.chunk_size)
        actions = self._memory["actions"][start[:, None] + np.minimum(steps, n[:, None] - 1)]  # past the end: last
        if self.stats is not None:
            actions = self.stats.normalize("action", actions)
        batch["action"] = torch.from_numpy(np.ascontiguousarray(actions, dtype=np.float32))
        batch["action_is_pad"] = torch.from_numpy(steps >= n[:, None])
        items = []
        for i, (e, frame) in enumerate(zip(episode.tolist(), t.tolist(), strict=True)):
            item: dict[str, Any] = {key: value[i] for key, value in batch.items()}
            item.update(instruction=self.instructions[e], task=self.tasks[e], index=int(index[i]))
            if self.subtasks:
                item["task_instruction"] = self.task_instructions[e]
            item.update(episode_index=e, frame_index=frame)
            items.append(item)
        return items

    def _read(self, index: int) -> dict[str, Any]:
        """Item `index` before augmentation (images CHW when there is an augmentation to apply)."""
        if index < 0:
            index += len(self)
        episode, t = self.locate(index)
        arrays = self._arrays(episode)
        n = int(self.episode_lengths[episode])
        item: dict[str, Any] = {}

        frames = np.arange(t - self.history + 1, t + 1)
        first = max(0, t - self.history + 1)
        rows = np.clip(frames, 0, None) - first  # rows of the [first, t] block; early frames repeat frame 0
        for cam in self.cameras:
            block = arrays[layout.image_key(cam)][first : t + 1]
            images = torch.from_numpy(block[rows] if self.history > 1 else block[0])
            if self.augment is not None or self.image_format == "chw":
                images = images.movedim(-1, -3).contiguous()
            item[f"observation.images.{cam}"] = images
        for key in self.keys:
            x = arrays[key][first : t + 1][rows]
            if self.stats is not None:
                x = self.stats.normalize(key, x)
            x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
            item[f"observation.{key}"] = x if self.history > 1 else x[0]
        if self.history > 1:
            item["observation_is_pad"] = torch.from_numpy(frames < 0)

        steps = np.arange(t, t + self.chunk_size)
        actions = arrays["actions"][t : min(t + self.chunk_size, n)]
        actions = actions[np.minimum(steps, n - 1) - t]  # past the end: repeat the last action
        if self.stats is not None:
            actions = self.stats.normalize("action", actions)
        item["action"] = torch.from_numpy(np.ascontiguousarray(actions, dtype=np.float32))
        item["action_is_pad"] = torch.from_numpy(steps >= n)
        item["instruction"] = self.instructions[episode]
        if self.subtasks:
            item["task_instruction"] = self.task_instructions[episode]
        item["task"] = self.tasks[episode]
        item["index"] = index
        item["episode_index"] = episode
        item["frame_index"] = t
        return item


# `complete_demos` and the statistics are re-exported for the modules that import them from here.
__all__ = [
    "DemoDataset",
    "complete_demos",
    "compute_stats",
    "load_or_compute_stats",
    "stats_path",
    "to_norm_stats",
]
