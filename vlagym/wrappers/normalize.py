"""Normalisation of actions and observations with fixed statistics (from a dataset, saved with a checkpoint).

Gymnasium's own `NormalizeObservation` keeps running statistics; these wrappers
apply *fixed* ones, the same at training and evaluation time, so a policy
trained on normalised demonstrations sees exactly the numbers it was trained on.

Modes (`NormStats.mode`, overridable per wrapper):

* ``"mean_std"``: ``(x - mean) / max(std, eps)``;
* ``"min_max"``: ``[min, max] -> [-1, 1]``;
* ``"quantile"``: ``[q01, q99] -> [-1, 1]`` (robust to outliers; values beyond
  the quantiles map beyond [-1, 1] and are never clipped, so the map stays invertible).

The range of the two bounded modes is floored at `eps` as well, so a constant
feature never divides by zero. Every map is affine, so `unnormalize` is its
exact inverse (up to floating-point rounding).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vlagym.io import atomic_write_json

MODES = ("mean_std", "min_max", "quantile")
STAT_FIELDS = ("mean", "std", "min", "max", "q01", "q99")
FORMAT = "vlagym-normstats"
FORMAT_VERSION = 1


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown normalisation mode {mode!r}; valid choices: {list(MODES)}")
    return mode


@dataclass(frozen=True)
class FeatureStats:
    """Statistics of one feature (an observation key or the action), each a (nested) list of floats of one shape."""

    mean: list
    std: list
    min: list
    max: list
    q01: list
    q99: list
    _arrays: dict[str, np.ndarray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        arrays = {name: np.asarray(getattr(self, name), dtype=np.float64) for name in STAT_FIELDS}
        shapes = {name: a.shape for name, a in arrays.items()}
        if len(set(shapes.values())) != 1:
            raise ValueError(f"statistics of one feature must share one shape, got {shapes}")
        for name, a in arrays.items():
            if not np.isfinite(a).all():
                raise ValueError(
                    f"statistic {name!r} has non-finite entries at {np.argwhere(~np.isfinite(a)).tolist()}"
                )
        if (arrays["std"] < 0).any():
            raise ValueError("statistic 'std' has negative entries")
        if (arrays["min"] > arrays["max"]).any() or (arrays["q01"] > arrays["q99"]).any():
            raise ValueError("statistics need min <= max and q01 <= q99 entry-wise")
        object.__setattr__(self, "_arrays", arrays)
        for name, a in arrays.items():  # plain lists, whatever was passed: JSON-ready and comparable with ==
            object.__setattr__(self, name, a.tolist())

    @property
    def shape(self) -> tuple[int, ...]:
        return self._arrays["mean"].shape

    def array(self, name: str) -> np.ndarray:
        """One statistic as a float64 array (read-only view; do not modify)."""
        return self._arrays[name]

    def to_dict(self) -> dict[str, list]:
        return {name: self._arrays[name].tolist() for name in STAT_FIELDS}

    @classmethod
    def from_array(cls, data: np.ndarray) -> FeatureStats:
        """Statistics over the first axis of `data` (samples x feature shape)."""
        x = np.asarray(data, dtype=np.float64)
        if x.ndim < 1 or len(x) == 0:
            raise ValueError(f"need at least one sample along the first axis, got shape {x.shape}")
        q01, q99 = np.quantile(x, [0.01, 0.99], axis=0)
        return cls(
            mean=x.mean(0).tolist(),
            std=x.std(0).tolist(),
            min=x.min(0).tolist(),
            max=x.max(0).tolist(),
            q01=q01.tolist(),
            q99=q99.tolist(),
        )


@dataclass(frozen=True)
class NormStats:
    """Fixed normalisation statistics per key (e.g. "proprio", "state", "action"), serialisable to JSON.

    Attributes:
        features: key -> its statistics.
        mode: default normalisation mode, one of `MODES`.
        eps: floor of `std` (mean_std) and of the range (min_max, quantile).
    """

    features: dict[str, FeatureStats]
    mode: str = "mean_std"
    eps: float = 1e-6

    def __post_init__(self) -> None:
        _check_mode(self.mode)
        if not (isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"eps must be a positive finite number, got {self.eps!r}")
        for key, stats in self.features.items():
            if not isinstance(stats, FeatureStats):
                raise TypeError(f"features[{key!r}] must be a FeatureStats, got {type(stats).__name__}")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(cls, data: Mapping[str, np.ndarray], mode: str = "mean_std", eps: float = 1e-6) -> NormStats:
        """Statistics of each key's samples (first axis = samples), e.g. ``{"proprio": (N, 23), "action": (N, 7)}``."""
        return cls({key: FeatureStats.from_array(x) for key, x in data.items()}, mode=mode, eps=eps)

    @classmethod
    def from_features(
        cls, features: Mapping[str, Mapping[str, Any]], mode: str = "mean_std", eps: float = 1e-6
    ) -> NormStats:
        """From plain ``{key: {"mean": [...], "std": [...], "min", "max", "q01", "q99"}}`` (e.g. a dataset's stats)."""
        out = {}
        for key, stats in features.items():
            missing = [name for name in STAT_FIELDS if name not in stats]
            if missing:
                raise ValueError(f"statistics of {key!r} lack {missing}")
            out[key] = FeatureStats(**{name: stats[name] for name in STAT_FIELDS})
        return cls(out, mode=mode, eps=eps)

    @classmethod
    def from_dataset_stats(cls, stats: Mapping[str, Any] | NormStats, mode: str = "mean_std", eps: float = 1e-6):
        """From a demo dataset's statistics (`vlagym.train.dataset.compute_stats`); a `NormStats` passes through.

        The dataset's "actions" entry becomes "action", the key of a policy's output and of `NormalizeAction`.
        """
        if isinstance(stats, NormStats):
            return stats
        features = {("action" if key == "actions" else key): value for key, value in stats.items()}
        return cls.from_features(features, mode=mode, eps=eps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "mode": self.mode,
            "eps": self.eps,
            "features": {key: stats.to_dict() for key, stats in self.features.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NormStats:
        if d.get("format") != FORMAT:
            raise ValueError(f"not normalisation statistics: format is {d.get('format')!r}, expected {FORMAT!r}")
        if d.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"unsupported statistics format_version {d.get('format_version')!r}; this vlagym reads {FORMAT_VERSION}"
            )
        return cls.from_features(d["features"], mode=d["mode"], eps=float(d["eps"]))

    def save(self, path: str | os.PathLike) -> Path:
        """Write JSON atomically (a temp file in the same folder, then `os.replace`)."""
        return atomic_write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike) -> NormStats:
        return cls.from_dict(json.loads(Path(path).read_text()))

    # ------------------------------------------------------------------ the maps
    def keys(self) -> list[str]:
        return list(self.features)

    def __getitem__(self, key: str) -> FeatureStats:
        if key not in self.features:
            raise KeyError(f"no normalisation statistics for {key!r}; statistics exist for {sorted(self.features)}")
        return self.features[key]

    def _affine(self, key: str, mode: str | None) -> tuple[np.ndarray, np.ndarray]:
        """(offset, scale) with normalised = (x - offset) / scale."""
        stats = self[key]
        mode = _check_mode(self.mode if mode is None else mode)
        if mode == "mean_std":
            return stats.array("mean"), np.maximum(stats.array("std"), self.eps)
        lo, hi = ("min", "max") if mode == "min_max" else ("q01", "q99")
        lo, hi = stats.array(lo), stats.array(hi)
        half_range = np.maximum(hi - lo, self.eps) / 2.0
        return lo + half_range, half_range

    def normalize(self, key: str, x: np.ndarray, mode: str | None = None) -> np.ndarray:
        """`x` (feature shape, or any leading batch dims) in normalised units, float64."""
        offset, scale = self._affine(key, mode)
        return (np.asarray(x, dtype=np.float64) - offset) / scale

    def unnormalize(self, key: str, x: np.ndarray, mode: str | None = None) -> np.ndarray:
        """The exact inverse of `normalize`, float64."""
        offset, scale = self._affine(key, mode)
        return np.asarray(x, dtype=np.float64) * scale + offset


# ---------------------------------------------------------------------- wrappers
def _check_shape(stats: NormStats, key: str, space: spaces.Space) -> spaces.Box:
    if not isinstance(space, spaces.Box):
        raise TypeError(f"{key!r} must be a Box space to normalise, got {space}")
    shape = stats[key].shape
    # Stats may cover the trailing dims (an action chunk (K, A) normalised with per-action stats (A,)).
    if len(shape) > len(space.shape) or space.shape[len(space.shape) - len(shape) :] != shape:
        raise ValueError(f"statistics of {key!r} have shape {shape}, the space has shape {space.shape}")
    return space


def _normalised_box(stats: NormStats, key: str, space: spaces.Box, mode: str) -> spaces.Box:
    """The image of `space` under the map (increasing, since every scale is positive); infinite sides stay infinite."""
    dtype = space.dtype if np.issubdtype(space.dtype, np.floating) else np.float32
    low, high = stats.normalize(key, space.low, mode), stats.normalize(key, space.high, mode)
    return spaces.Box(low.astype(dtype), high.astype(dtype), space.shape, dtype)


class NormalizeAction(gym.ActionWrapper):
    """The policy acts in normalised units; actions are mapped back to the env's units before stepping.

    `action_space` becomes the normalised image of the env's action space.
    `reverse_action` maps an env action to the policy's units (e.g. to normalise
    expert demonstrations); it is the exact inverse of `action`.
    """

    def __init__(self, env: gym.Env, stats: NormStats, key: str = "action", mode: str | None = None):
        super().__init__(env)
        if not isinstance(stats, NormStats):
            raise TypeError(f"stats must be a NormStats, got {type(stats).__name__}")
        self.stats, self.key = stats, key
        self.mode = _check_mode(stats.mode if mode is None else mode)
        env_space = _check_shape(stats, key, env.action_space)
        self.action_space = _normalised_box(stats, key, env_space, self.mode)

    def _checked(self, action: Any, space: spaces.Box) -> np.ndarray:
        a = np.asarray(action)
        if a.shape != space.shape:
            raise ValueError(f"action must have shape {space.shape}, got {a.shape}")
        return a

    def action(self, action: Any) -> np.ndarray:
        a = self._checked(action, self.action_space)
        return self.stats.unnormalize(self.key, a, self.mode).astype(self.env.action_space.dtype)

    def reverse_action(self, action: Any) -> np.ndarray:
        a = self._checked(action, self.env.action_space)
        return self.stats.normalize(self.key, a, self.mode).astype(self.action_space.dtype)


class NormalizeObservation(gym.ObservationWrapper):
    """Normalises the named keys of a `Dict` observation, or a whole `Box` observation, with fixed statistics.

    Args:
        keys: `Dict` observation keys to normalise; default ``("proprio",)``. For a
            `Box` observation, the one statistics key it uses; default ``("state",)``.
        mode: overrides `stats.mode`.

    A key without statistics raises `KeyError` (listing the keys that have some)
    at construction: nothing is ever passed through unnormalised by accident.
    Other `Dict` entries (images, instruction) pass through unchanged.
    """

    def __init__(self, env: gym.Env, stats: NormStats, keys: Sequence[str] | None = None, mode: str | None = None):
        super().__init__(env)
        if not isinstance(stats, NormStats):
            raise TypeError(f"stats must be a NormStats, got {type(stats).__name__}")
        self.stats = stats
        self.mode = _check_mode(stats.mode if mode is None else mode)
        space = env.observation_space
        self._is_box = isinstance(space, spaces.Box)
        if isinstance(keys, str):
            keys = (keys,)
        if self._is_box:
            self.keys = tuple(keys) if keys is not None else ("state",)
            if len(self.keys) != 1:
                raise ValueError(f"a Box observation is normalised with one statistics key, got keys={list(self.keys)}")
            self.observation_space = _normalised_box(
                stats, self.keys[0], _check_shape(stats, self.keys[0], space), self.mode
            )
        elif isinstance(space, spaces.Dict):
            self.keys = tuple(keys) if keys is not None else ("proprio",)
            if not self.keys:
                raise ValueError("keys must name at least one observation key")
            new = dict(space.spaces)
            for key in self.keys:
                if key not in space.spaces:
                    raise KeyError(f"observation has no key {key!r}; its keys: {list(space.spaces)}")
                new[key] = _normalised_box(stats, key, _check_shape(stats, key, space[key]), self.mode)
            self.observation_space = spaces.Dict(new)
        else:
            raise TypeError(f"NormalizeObservation needs a Box or Dict observation space, got {space}")

    def _map(self, key: str, x: np.ndarray, space: spaces.Box) -> np.ndarray:
        return self.stats.normalize(key, x, self.mode).astype(space.dtype)

    def observation(self, observation: Any) -> Any:
        if self._is_box:
            return self._map(self.keys[0], observation, self.observation_space)
        out = dict(observation)
        for key in self.keys:
            out[key] = self._map(key, observation[key], self.observation_space[key])
        return out
