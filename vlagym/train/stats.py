"""Statistics of the low-dim arrays of demo files (actions, proprio, state), for normalisation.

`load_or_compute_stats(path)` returns per-key statistics (mean, std, min, max, q01, q99), computed once by
streaming over the file (no images) and cached beside it as `FILE.stats.json`; `compute_stats(paths)`
computes them over several files together; `to_norm_stats` turns them into the wrappers' `NormStats`, so
training and evaluation normalise identically.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from vlagym.io import atomic_write_json
from vlagym.train import layout
from vlagym.train.demo_reader import PathLike, as_paths, complete_demos, data_group
from vlagym.wrappers.normalize import NormStats

logger = logging.getLogger(__name__)

LOWDIM_KEYS = ("proprio", "state")
STATS_KEYS = ("actions", *LOWDIM_KEYS)
STAT_FIELDS = ("mean", "std", "min", "max", "q01", "q99")
STATS_FORMAT = "vlagym-stats"
STATS_VERSION = 1
STATS_BINS = 10_000  # histogram bins per dimension for the quantiles: error at most (max - min) / STATS_BINS
NORM_EPS = 1e-6  # floor of std or of the range: constant dimensions (padding slots of the state) stay finite

Stats = dict[str, dict[str, list[float]]]


# ---------------------------------------------------------------------------- streaming moments and quantiles
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
            data = data_group(f, path)
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
    paths = as_paths(paths)
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
