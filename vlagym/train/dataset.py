"""The behaviour-cloning dataset over demo files (see `vlagym.train.layout`), and their statistics.

`DemoDataset` yields one sample per (demo, t) with LeRobot-style keys: the observation at t (images per
camera as uint8, proprio, optionally state and a history of past frames), the instruction, and the next K
actions (the expert's `expert_actions` where a demo has them) with a padding mask where the chunk runs past
the episode end. Only demos marked complete count.

`load_or_compute_stats(path)` returns per-key statistics (mean, std, min, max, q01, q99) of the low-dim
arrays, computed once by streaming over the file (no images) and cached beside it as `FILE.stats.json`.
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import Dataset

from vlagym.io import atomic_write_json
from vlagym.train import layout
from vlagym.train.augment import AugmentDraw
from vlagym.wrappers.normalize import MODES as NORMALIZATIONS
from vlagym.wrappers.normalize import NormStats

logger = logging.getLogger(__name__)

LOWDIM_KEYS = ("proprio", "state")
STATS_KEYS = ("actions", *LOWDIM_KEYS)
STAT_FIELDS = ("mean", "std", "min", "max", "q01", "q99")
IMAGE_FORMATS = ("chw", "hwc")
STATS_FORMAT = "vlagym-stats"
STATS_VERSION = 1
STATS_BINS = 10_000  # histogram bins per dimension for the quantiles: error at most (max - min) / STATS_BINS
OPEN_EPISODES = 1024  # per process: the episodes whose HDF5 datasets stay open (least recently used go)
NORM_EPS = 1e-6  # floor of std or of the range: constant dimensions (padding slots of the state) stay finite

Stats = dict[str, dict[str, list[float]]]
PathLike = str | os.PathLike


# ---------------------------------------------------------------------------- reading demo files
def _as_paths(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    out = [Path(p) for p in paths]
    if not out:
        raise ValueError("no demo files given")
    return out


def _check_format(f: h5py.File, path: Path) -> h5py.Group:
    fmt, version = f.attrs.get("format"), f.attrs.get("format_version")
    if fmt != layout.FORMAT:
        raise ValueError(f"{path}: not a vlagym demo file (format attribute {fmt!r}, expected {layout.FORMAT!r})")
    if version != layout.FORMAT_VERSION:
        raise ValueError(f"{path}: demo format version {version!r}, this vlagym reads {layout.FORMAT_VERSION}")
    if "data" not in f:
        raise ValueError(f"{path}: no /data group")
    return f["data"]


def _demo_number(path: Path, name: str) -> int:
    suffix = name.removeprefix(layout.DEMO_PREFIX)
    if not name.startswith(layout.DEMO_PREFIX) or not suffix.isdigit():
        raise ValueError(f"{path}: unexpected group /data/{name} (expected {layout.demo_name(0)!r}, ...)")
    return int(suffix)


def complete_demos(data: h5py.Group, path: Path) -> list[str]:
    """Names of the complete demos in numeric order (demo_2 before demo_10)."""
    names = sorted(data, key=lambda name: _demo_number(path, name))
    return [name for name in names if bool(data[name].attrs.get("complete", False))]


def _text_attr(group: h5py.Group, name: str) -> str:
    value = group.attrs.get(name, "")
    return value.decode() if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------------------- statistics
class _Moments:
    """Count, mean, sum of squared deviations, min and max per dimension, merged block by block (Chan et al.)."""

    def __init__(self, dim: int) -> None:
        self.count = 0
        self.mean = np.zeros(dim)
        self.m2 = np.zeros(dim)
        self.min = np.full(dim, np.inf)
        self.max = np.full(dim, -np.inf)

    def update(self, x: np.ndarray) -> None:
        n = len(x)
        if n == 0:
            return
        mean = x.mean(axis=0)
        m2 = ((x - mean) ** 2).sum(axis=0)
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.count * n / total)
        self.count = total
        self.min = np.minimum(self.min, x.min(axis=0))
        self.max = np.maximum(self.max, x.max(axis=0))


class _Histogram:
    """Fixed bins per dimension over [min, max] with each bin's count, min and max, for quantiles in bounded memory.

    An order statistic is placed inside its bin by rank between the bin's smallest and largest value, so it is
    exact when a bin holds one distinct value (discrete data: gripper commands, integer steps) and within one
    bin width otherwise.
    """

    def __init__(self, lo: np.ndarray, hi: np.ndarray, bins: int) -> None:
        self.lo, self.bins = lo, bins
        self.width = np.where(hi > lo, (hi - lo) / bins, 1.0)
        shape = (len(lo), bins)
        self.counts = np.zeros(shape, dtype=np.int64)
        self.bin_min = np.full(shape, np.inf)
        self.bin_max = np.full(shape, -np.inf)

    def update(self, x: np.ndarray) -> None:
        idx = np.clip(((x - self.lo) / self.width).astype(np.int64), 0, self.bins - 1)
        flat = (idx + np.arange(x.shape[1]) * self.bins).ravel()
        values = x.ravel()
        self.counts += np.bincount(flat, minlength=self.counts.size).reshape(self.counts.shape)
        np.minimum.at(self.bin_min.reshape(-1), flat, values)
        np.maximum.at(self.bin_max.reshape(-1), flat, values)

    def _order_statistic(self, d: int, cum: np.ndarray, j: int) -> float:
        """The j-th smallest value (0-based) of dimension d."""
        k = int(np.searchsorted(cum, j, side="right"))
        count = int(self.counts[d, k])
        if count == 1:
            return float(self.bin_min[d, k])
        position = (j - (cum[k] - count)) / (count - 1)
        return float(self.bin_min[d, k] + position * (self.bin_max[d, k] - self.bin_min[d, k]))

    def quantile(self, q: float) -> np.ndarray:
        """numpy's default (linear) quantile: interpolate between the order statistics around q * (n - 1)."""
        out = np.empty(len(self.lo))
        for d in range(len(self.lo)):
            cum = np.cumsum(self.counts[d])
            rank = q * (cum[-1] - 1)
            j = int(np.floor(rank))
            below = self._order_statistic(d, cum, j)
            above = self._order_statistic(d, cum, min(j + 1, int(cum[-1]) - 1))
            out[d] = below + (rank - j) * (above - below)
        return out


def _lowdim_arrays(demo: h5py.Group) -> dict[str, h5py.Dataset]:
    arrays = {"actions": layout.label_actions(demo)}
    for key in LOWDIM_KEYS:
        if key in demo["obs"]:
            arrays[key] = demo["obs"][key]
    return arrays


def _iter_lowdim(paths: list[Path]):
    """Yield {stats key: float64 array (N, D)} per complete demo, over all files."""
    for path in paths:
        with h5py.File(path, "r") as f:
            data = _check_format(f, path)
            for name in complete_demos(data, path):
                yield {key: ds[()].astype(np.float64) for key, ds in _lowdim_arrays(data[name]).items()}


def compute_stats(paths: PathLike | Sequence[PathLike], bins: int = STATS_BINS) -> Stats:
    """Statistics of actions, proprio and state over the complete demos of one or more files.

    Two streaming passes over the low-dim arrays (images are never read): exact mean, std (population),
    min and max; q01/q99 from a `bins`-bin histogram per dimension (numpy's linear quantile: exact for
    discrete values such as gripper commands, else within one bin, (max - min) / bins).
    Returns `{key: {"mean": [...], "std": [...], "min": [...], "max": [...], "q01": [...], "q99": [...]}}`
    with float64 lists, for the keys present in every demo.
    """
    paths = _as_paths(paths)
    moments: dict[str, _Moments] = {}
    present: set[str] | None = None
    for arrays in _iter_lowdim(paths):
        present = set(arrays) if present is None else present & set(arrays)
        for key, x in arrays.items():
            moments.setdefault(key, _Moments(x.shape[1])).update(x)
    if present is None or moments["actions"].count == 0:
        raise ValueError(f"no steps in complete demos in {', '.join(map(str, paths))}")
    hists = {key: _Histogram(moments[key].min, moments[key].max, bins) for key in present}
    for arrays in _iter_lowdim(paths):
        for key, hist in hists.items():
            hist.update(arrays[key])
    stats: Stats = {}
    for key in STATS_KEYS:
        if key not in present:
            continue
        m = moments[key]
        fields = {
            "mean": m.mean,
            "std": np.sqrt(m.m2 / m.count),
            "min": m.min,
            "max": m.max,
            "q01": hists[key].quantile(0.01),
            "q99": hists[key].quantile(0.99),
        }
        stats[key] = {name: [float(v) for v in value] for name, value in fields.items()}
    return stats


def stats_path(path: PathLike) -> Path:
    """Where the statistics of demo file `path` are cached: `FILE` + `layout.STATS_SUFFIX`."""
    path = Path(path)
    return path.with_name(path.name + layout.STATS_SUFFIX)


def _source_signature(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _read_cached_stats(cache: Path, signature: dict[str, int], bins: int) -> Stats | None:
    try:
        blob = json.loads(cache.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        logger.warning("ignoring unreadable statistics cache %s: %s", cache, err)
        return None
    if (
        not isinstance(blob, dict)
        or blob.get("format") != STATS_FORMAT
        or blob.get("version") != STATS_VERSION
        or blob.get("bins") != bins
        or blob.get("source") != signature
    ):
        logger.info("statistics cache %s is stale; recomputing", cache)
        return None
    return blob["stats"]


def load_or_compute_stats(path: PathLike, recompute: bool = False, bins: int = STATS_BINS) -> Stats:
    """The statistics of one demo file, from its cache `FILE.stats.json` when that matches the file.

    The cache records the file's size and mtime; when either differs (the file was rewritten or appended
    to), the statistics are recomputed and the cache is rewritten atomically. An unwritable folder only
    costs the cache (a warning), never the statistics.
    """
    path = Path(path)
    cache = stats_path(path)
    signature = _source_signature(path)
    if not recompute:
        cached = _read_cached_stats(cache, signature, bins)
        if cached is not None:
            return cached
    stats = compute_stats(path, bins=bins)
    blob = {
        "format": STATS_FORMAT,
        "version": STATS_VERSION,
        "bins": bins,
        "source": signature,  # of the file as it was before computing: a write meanwhile makes the cache stale
        "stats": stats,
    }
    try:
        atomic_write_json(cache, blob)
    except OSError as err:
        logger.warning("could not cache statistics at %s: %s", cache, err)
    return stats


def to_norm_stats(stats: Stats | NormStats, mode: str = "mean_std", eps: float = NORM_EPS) -> NormStats:
    """The wrappers' `NormStats` of dataset statistics, so training and evaluation normalise identically."""
    return NormStats.from_dataset_stats(stats, mode=mode, eps=eps)


# ---------------------------------------------------------------------------- the dataset
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
        augment: applied to each camera's uint8 `(3, H, W)` (or `(T, 3, H, W)`) image as
            `augment(images, generator=g, shared=True)` (e.g. `ImageAugment`); the history frames of one
            camera share a draw, cameras and samples each get their own. Use for training only.
        image_format: `"chw"` (default, torch) or `"hwc"` (as stored) for the image tensors.
        normalization: `"mean_std"`, `"min_max"` or `"quantile"` (see `vlagym.wrappers.normalize`), used when
            `stats` is a plain dict (a `NormStats` brings its own mode).
        seed: with a seed, sample i's augmentation depends only on (seed, epoch, i) (see `set_epoch`);
            without, it is drawn from torch's global generator (which a DataLoader seeds per worker and epoch).

    An item is a dict: `observation.images.<camera>` uint8 `(3, H, W)` / `(T, 3, H, W)`,
    `observation.proprio` float32 `(23,)` / `(T, 23)`, `observation.state` (if asked), `observation_is_pad`
    bool `(T,)` (history > 1 only), `instruction` str, `action` float32 `(K, A)`, `action_is_pad` bool `(K,)`
    (padded steps repeat the episode's last action), `index`, `episode_index`, `frame_index`, `task`.

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
        self.paths = _as_paths(paths)
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

    # -- index
    def _scan(self, cameras: Sequence[str] | None) -> None:
        """Read the episode table (attributes and shapes only) and check the files agree with each other."""
        files, demos, lengths, instructions, tasks = [], [], [], [], []
        found_cameras: list[str] | None = None
        action_dim = None
        self.num_skipped = 0
        for fi, path in enumerate(self.paths):
            with h5py.File(path, "r") as f:
                data = _check_format(f, path)
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
                    self._check_demo(path, name, demo, n, here, found_cameras, action_dim)
                    files.append(fi)
                    demos.append(_demo_number(path, name))
                    lengths.append(n)
                    instructions.append(_text_attr(demo, "instruction"))
                    tasks.append(_text_attr(demo, "task"))
        if found_cameras is None:
            raise ValueError(f"no complete demos in {', '.join(map(str, self.paths))}")
        if cameras is None:
            cameras = found_cameras
        cameras = list(cameras)
        unknown = [c for c in cameras if c not in found_cameras]
        if unknown:
            raise ValueError(f"cameras {cameras} not all in the demo files; available: {found_cameras}")
        self.cameras = cameras
        self.action_dim = int(action_dim)
        self.instructions, self.tasks = instructions, tasks
        self._files = np.asarray(files, dtype=np.int32)
        self._demos = np.asarray(demos, dtype=np.int64)
        self.episode_lengths = np.asarray(lengths, dtype=np.int64)
        # Sample i belongs to the episode e with ends[e-1] <= i < ends[e].
        self._ends = np.cumsum(self.episode_lengths)

    def _check_demo(
        self, path: Path, name: str, demo: h5py.Group, n: int, cameras: list[str], first: list[str], action_dim: int
    ) -> None:
        where = f"{path}:/data/{name}"
        if cameras != first:
            raise ValueError(f"{where} has cameras {cameras}, earlier demos have {first}")
        if demo["actions"].shape != (n, action_dim):
            raise ValueError(f"{where}/actions has shape {demo['actions'].shape}, expected {(n, action_dim)}")
        for key in self.keys:
            if key not in demo["obs"]:
                raise ValueError(f"{where}/obs has no {key!r}; it has {sorted(demo['obs'])}")
            if demo["obs"][key].shape[0] != n:
                raise ValueError(f"{where}/obs/{key} has {demo['obs'][key].shape[0]} steps, num_samples is {n}")
        for cam in cameras:
            ds = demo["obs"][layout.image_key(cam)]
            if ds.dtype != np.uint8 or ds.ndim != 4 or ds.shape[0] != n or ds.shape[3] != 3:
                raise ValueError(
                    f"{where}/obs/{layout.image_key(cam)}: {ds.shape} {ds.dtype}, expected ({n}, H, W, 3) uint8"
                )

    @property
    def num_episodes(self) -> int:
        return len(self.episode_lengths)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

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
        if self.seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        else:
            words = np.random.SeedSequence([self.seed, self.epoch, index]).generate_state(2, dtype=np.uint32)
            seed = (int(words[0]) << 31) ^ int(words[1])
        return torch.Generator().manual_seed(seed)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The items `indices`, as ``[self[i] for i in indices]`` gives them; torch's DataLoader fetches a batch
        through this. Each sample's augmentation is drawn from its own generator, and with an augmentation
        that separates drawing from the pixel work (`ImageAugment`), the pixel work runs once per camera for
        the whole batch."""
        batched = self.augment is not None and hasattr(self.augment, "draw") and hasattr(self.augment, "apply")
        items, draws = [], []
        for index in indices:
            item = self._read(int(index))
            if self.augment is not None:
                generator = self._generator(item["index"])
                for cam in self.cameras:
                    key = f"observation.images.{cam}"
                    if batched:
                        height, width = item[key].shape[-2:]
                        draws.append(self.augment.draw(1, height, width, generator))
                    else:
                        item[key] = self.augment(item[key], generator=generator, shared=True)
            items.append(item)
        if batched and items:
            for c, cam in enumerate(self.cameras):
                key = f"observation.images.{cam}"
                images = self.augment.apply(
                    torch.stack([item[key] for item in items]), AugmentDraw.cat(draws[c :: len(self.cameras)])
                )
                for item, image in zip(items, images, strict=True):
                    item[key] = image
        if self.image_format == "hwc" and self.augment is not None:
            for item in items:
                for cam in self.cameras:
                    key = f"observation.images.{cam}"
                    item[key] = item[key].movedim(-3, -1).contiguous()
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
        item["task"] = self.tasks[episode]
        item["index"] = index
        item["episode_index"] = episode
        item["frame_index"] = t
        return item
