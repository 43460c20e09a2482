"""Check and summarise demo files (the layout of `vlagym.train.layout`).

    problems = check_dataset("pick.hdf5")   # [] when the file follows the layout
    info = dataset_info("pick.hdf5")        # counts, action statistics, observation keys

Files that are not demo files — not HDF5, cut short, left open by a killed writer, or another
project's HDF5 (robomimic, say) — get one clear sentence saying which, never an h5py traceback.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vlagym.envs.robot import Robot
from vlagym.train import layout

PathLike = str | os.PathLike
FILE_ATTRS = ("format", "format_version", "vlagym_version", "mujoco_version", "created")
DATA_ATTRS = ("env_id", "env_kwargs", "total", "obs_keys")
DEMO_ATTRS = ("num_samples", "seed", "instruction", "success", "task", "complete")
STATE_DIM = 83
ACTION_DIMS = (7, 8)  # ee_delta_pose, joint_delta_pos
MAX_PROBLEMS_PER_DEMO = 10
_DEMO_NAME = re.compile(rf"^{layout.DEMO_PREFIX}(0|[1-9][0-9]*)$")


class DatasetError(ValueError):
    """A file that cannot be read as a vlagym demo file; the message says why."""


# ---------------------------------------------------------------------------- opening
def _open_error(path: Path, err: OSError) -> DatasetError:
    msg = str(err)
    size = path.stat().st_size
    truncated = re.search(r"eof = (\d+).*stored_eof = (\d+)", msg)
    if truncated:
        return DatasetError(
            f"{path}: the file is truncated: it has {truncated.group(1)} bytes, its HDF5 header says "
            f"{truncated.group(2)} (an interrupted copy, download or write?)"
        )
    if "already open for write" in msg:
        return DatasetError(
            f"{path}: the HDF5 file was not closed by its writer (still flagged open for write; "
            f"`h5clear -s` can clear the flag, but the contents may be inconsistent)"
        )
    first_line = msg.splitlines()[0] if msg else type(err).__name__
    return DatasetError(f"{path}: HDF5 cannot open the file ({size} bytes): {first_line}")


def _foreign_error(path: Path, f: h5py.File) -> DatasetError:
    fmt = f.attrs.get("format")
    keys = sorted(f.keys())
    if fmt is not None:
        return DatasetError(f"{path}: not a vlagym demo file: its format attribute is {fmt!r}, not {layout.FORMAT!r}")
    data = f.get("data")
    if isinstance(data, h5py.Group) and any(name.startswith(layout.DEMO_PREFIX) for name in data):
        return DatasetError(
            f"{path}: an HDF5 file in the robomimic/LIBERO layout (data/demo_*), but not a vlagym demo file: "
            f"it has no format={layout.FORMAT!r} attribute, so its observations and attributes are unknown"
        )
    shown = ", ".join(keys[:10]) + (", ..." if len(keys) > 10 else "")
    return DatasetError(
        f"{path}: an HDF5 file, but not a vlagym demo file (no format={layout.FORMAT!r} attribute; "
        f"top-level members: {shown or 'none'})"
    )


def open_demo_file(path: PathLike) -> h5py.File:
    """Open a demo file read-only, or raise `DatasetError` saying why it is not one."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    if path.is_dir():
        raise DatasetError(f"{path}: is a folder, not a demo file")
    if not h5py.is_hdf5(path):
        raise DatasetError(f"{path}: not an HDF5 file (no HDF5 signature in its {path.stat().st_size} bytes)")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise _open_error(path, e) from None
    if f.attrs.get("format") != layout.FORMAT:
        err = _foreign_error(path, f)
        f.close()
        raise err
    return f


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def demo_names(data: h5py.Group) -> list[str]:
    """Names of the demo groups in numeric order (demo_2 before demo_10); other members are skipped."""
    names = [n for n in data if _DEMO_NAME.match(n)]
    return sorted(names, key=lambda n: int(n.removeprefix(layout.DEMO_PREFIX)))


# ---------------------------------------------------------------------------- checks
def _check_header(f: h5py.File) -> list[str]:
    problems = [f"file attribute {a!r} is missing" for a in FILE_ATTRS if a not in f.attrs]
    version = f.attrs.get("format_version")
    if version is not None and version != layout.FORMAT_VERSION:
        version = version.item() if isinstance(version, np.generic) else version
        newer = isinstance(version, int) and version > layout.FORMAT_VERSION
        hint = " (written by a newer vlagym?)" if newer else ""
        problems.append(f"format_version is {version!r}; this vlagym reads {layout.FORMAT_VERSION}{hint}")
    created = f.attrs.get("created")
    if created is not None:
        try:
            datetime.fromisoformat(_text(created))
        except ValueError:
            problems.append(f"file attribute 'created' is not an ISO 8601 time: {_text(created)!r}")
    return problems


def _json_attr(group: h5py.Group, name: str, kind: type, problems: list[str]) -> Any:
    if name not in group.attrs:
        return None
    try:
        value = json.loads(_text(group.attrs[name]))
    except ValueError:
        problems.append(f"/data attribute {name!r} is not valid JSON")
        return None
    if not isinstance(value, kind):
        problems.append(f"/data attribute {name!r} must be a JSON {kind.__name__}, got {type(value).__name__}")
        return None
    return value


def _expect(ds: Any, name: str, n: int, tail: tuple[int | None, ...], dtype: type) -> list[str]:
    """Problems of dataset `name`: shape (n, *tail) (None = any size) and dtype."""
    if not isinstance(ds, h5py.Dataset):
        return [f"{name} is missing" if ds is None else f"{name} is not a dataset"]
    out = []
    shape = ds.shape
    fits = len(shape) == 1 + len(tail) and shape[0] == n
    if not fits or any(t is not None and s != t for s, t in zip(shape[1:], tail, strict=True)):
        want = ", ".join(["N", *("*" if t is None else str(t) for t in tail)])
        out.append(f"{name} has shape {shape}, expected ({want}) with N = num_samples = {n}")
    if ds.dtype != np.dtype(dtype):
        out.append(f"{name} has dtype {ds.dtype}, expected {np.dtype(dtype)}")
    return out


def _image_size(env_kwargs: dict[str, Any] | None) -> tuple[int, int] | None:
    size = (env_kwargs or {}).get("image_size")
    if isinstance(size, int):
        return size, size
    if isinstance(size, list) and len(size) == 2:
        return int(size[0]), int(size[1])
    return None


def _check_obs(obs: h5py.Group, n: int, obs_keys: list[str] | None, size: tuple[int, int] | None) -> list[str]:
    problems = []
    keys = list(obs)
    if obs_keys is not None and set(keys) != set(obs_keys):
        problems.append(f"obs keys {sorted(keys)} differ from /data obs_keys {sorted(obs_keys)}")
    for key in ("proprio", "state"):
        if key not in keys:
            problems.append(f"obs/{key} is missing")
    for key in keys:
        ds, name = obs[key], f"obs/{key}"
        if key.endswith(layout.IMAGE_SUFFIX):
            problems += _expect(ds, name, n, (*(size or (None, None)), 3), np.uint8)
            if isinstance(ds, h5py.Dataset) and ds.ndim == 4 and ds.chunks != (1, *ds.shape[1:]):
                problems.append(f"{name} is chunked {ds.chunks}, expected one frame per chunk {(1, *ds.shape[1:])}")
            if isinstance(ds, h5py.Dataset) and n and not problems:
                ds[n - 1]  # reads (decompresses) one chunk: catches damaged data
        elif key == "proprio":
            problems += _expect(ds, name, n, (Robot.PROPRIO_DIM,), np.float32)
        elif key == "state":
            problems += _expect(ds, name, n, (STATE_DIM,), np.float32)
        elif not isinstance(ds, h5py.Dataset) or not ds.shape or ds.shape[0] != n:
            problems.append(f"{name} must be a dataset with N = {n} rows")
    return problems


def _check_arrays(g: h5py.Group, n: int) -> tuple[list[str], int | None]:
    """Problems of actions, rewards, dones and states; also the action dimension."""
    problems = _expect(g.get("actions"), "actions", n, (None,), np.float32)
    action_dim = None
    if not problems:
        action_dim = g["actions"].shape[1]
        if action_dim not in ACTION_DIMS:
            problems.append(f"actions have {action_dim} dimensions, expected one of {list(ACTION_DIMS)}")
        if not np.isfinite(g["actions"][()]).all():
            problems.append("actions contain NaN or inf")
        if layout.EXPERT_ACTIONS in g:
            labels = g[layout.EXPERT_ACTIONS]
            if not isinstance(labels, h5py.Dataset) or labels.shape != g["actions"].shape:
                shape = getattr(labels, "shape", "a group")
                problems.append(
                    f"{layout.EXPERT_ACTIONS} has shape {shape}, expected that of actions {g['actions'].shape}"
                )
            elif not np.isfinite(labels[()]).all():
                problems.append(f"{layout.EXPERT_ACTIONS} contain NaN or inf")
    reward_problems = _expect(g.get("rewards"), "rewards", n, (), np.float32)
    if not reward_problems and not np.isfinite(g["rewards"][()]).all():
        reward_problems.append("rewards contain NaN or inf")
    problems += reward_problems
    done_problems = _expect(g.get("dones"), "dones", n, (), np.uint8)
    if not done_problems:
        dones = g["dones"][()]
        if not np.isin(dones, (0, 1)).all():
            done_problems.append(f"dones hold values other than 0 and 1: {sorted(set(dones.tolist()))[:5]}")
        elif n and dones[:-1].any():
            done_problems.append(f"dones is 1 before the last step (at t = {np.flatnonzero(dones[:-1]).tolist()[:5]})")
    problems += done_problems
    problems += _expect(g.get("states"), "states", n, (None,), np.float64)
    return problems, action_dim


def _check_demo(
    g: h5py.Group, obs_keys: list[str] | None, size: tuple[int, int] | None
) -> tuple[list[str], int, int | None]:
    """Problems of one complete demo group, its sample count and its action dimension."""
    problems = [f"attribute {a!r} is missing" for a in DEMO_ATTRS if a not in g.attrs]
    n = int(g.attrs.get("num_samples", -1))
    if n < 1:
        n = g["actions"].shape[0] if isinstance(g.get("actions"), h5py.Dataset) and g["actions"].ndim else 0
        problems.append(f"num_samples must be a positive integer, got {g.attrs.get('num_samples')!r}")
    if "instruction" in g.attrs and not _text(g.attrs["instruction"]).strip():
        problems.append("instruction is empty")
    if "success" in g.attrs and not isinstance(g.attrs["success"], (bool, np.bool_)):
        problems.append(f"success must be a bool, got {g.attrs['success']!r}")
    obs = g.get("obs")
    if not isinstance(obs, h5py.Group):
        problems.append("obs group is missing")
    else:
        problems += _check_obs(obs, n, obs_keys, size)
    array_problems, action_dim = _check_arrays(g, n)
    return problems + array_problems, n, action_dim


def _check_data(data: h5py.Group, allow_incomplete: bool) -> list[str]:
    problems: list[str] = [f"/data attribute {a!r} is missing" for a in DATA_ATTRS if a not in data.attrs]
    env_kwargs = _json_attr(data, "env_kwargs", dict, problems)
    obs_keys = _json_attr(data, "obs_keys", list, problems)
    size = _image_size(env_kwargs)
    names = demo_names(data)
    problems += [f"/data/{m} is not a demo group (expected {layout.demo_name(0)}, ...)" for m in data if m not in names]
    numbers = [int(n.removeprefix(layout.DEMO_PREFIX)) for n in names]
    if numbers != list(range(len(numbers))):
        missing = sorted(set(range(max(numbers, default=-1) + 1)) - set(numbers))
        problems.append(f"demo numbers are not 0 .. {len(numbers) - 1} (missing: {missing[:10]})")
    total, dims = 0, Counter()
    for name in names:
        g = data[name]
        if not isinstance(g, h5py.Group):
            problems.append(f"/data/{name} is not a group")
            continue
        if not bool(g.attrs.get("complete", False)):
            if not allow_incomplete:
                problems.append(f"{name} is incomplete (its complete attribute is not True: an unfinished write)")
            continue
        try:
            demo_problems, n, action_dim = _check_demo(g, obs_keys, size)
        except (OSError, KeyError, ValueError, RuntimeError) as e:  # damaged data inside a readable file
            demo_problems, n, action_dim = [f"cannot read it: {e}"], 0, None
        problems += [f"{name}: {p}" for p in demo_problems[:MAX_PROBLEMS_PER_DEMO]]
        total += n
        if action_dim is not None:
            dims[action_dim] += 1
    if "total" in data.attrs and int(data.attrs["total"]) != total:
        problems.append(f"/data attribute total is {int(data.attrs['total'])}, the complete demos hold {total} steps")
    if len(dims) > 1:
        problems.append(f"demos differ in action dimension: {dict(dims)}")
    return problems


def check_dataset(path: PathLike, allow_incomplete: bool = False) -> list[str]:
    """Every way `path` departs from the demo layout, one sentence each; empty when it is fine.

    `allow_incomplete`: demos without complete=True (an interrupted writer's) are not problems; they are skipped.
    """
    try:
        f = open_demo_file(path)
    except DatasetError as e:
        return [str(e)]
    with f:
        problems = _check_header(f)
        data = f.get("data")
        if not isinstance(data, h5py.Group):
            return [*problems, "the /data group is missing"]
        return problems + _check_data(data, allow_incomplete)


# ---------------------------------------------------------------------------- summary
def _stats(x: np.ndarray) -> dict[str, list[float]]:
    if not len(x):
        return {k: [] for k in ("mean", "std", "min", "max")}
    return {
        "mean": x.mean(axis=0).tolist(),
        "std": x.std(axis=0).tolist(),
        "min": x.min(axis=0).tolist(),
        "max": x.max(axis=0).tolist(),
    }


def _summarise(f: h5py.File, path: Path) -> dict[str, Any]:
    data = f["data"]
    names = demo_names(data)
    complete = [n for n in names if bool(data[n].attrs.get("complete", False))]
    lengths = [int(data[n].attrs["num_samples"]) for n in complete]
    seeds = [int(data[n].attrs["seed"]) for n in complete]
    actions = [data[n]["actions"][()].astype(np.float64) for n in complete]
    obs: dict[str, dict[str, Any]] = {}
    if complete:
        group = data[complete[0]]["obs"]
        try:
            order = [k for k in json.loads(_text(data.attrs["obs_keys"])) if k in group]
        except (KeyError, ValueError, TypeError):
            order = []
        for key in order + sorted(set(group) - set(order)):
            ds = group[key]
            obs[key] = {"shape": list(ds.shape[1:]), "dtype": str(ds.dtype), "compression": ds.compression}
    return {
        "path": str(path),
        "file_bytes": path.stat().st_size,
        **{a: f.attrs[a].item() if hasattr(f.attrs[a], "item") else _text(f.attrs[a]) for a in FILE_ATTRS},
        "env_id": _text(data.attrs["env_id"]),
        "env_kwargs": json.loads(_text(data.attrs["env_kwargs"])),
        "episodes": len(complete),
        "incomplete": len(names) - len(complete),
        "steps": int(sum(lengths)),
        "successes": int(sum(bool(data[n].attrs["success"]) for n in complete)),
        "length": {
            "min": min(lengths, default=0),
            "mean": float(np.mean(lengths)) if lengths else 0.0,
            "max": max(lengths, default=0),
        },
        "seeds": {"min": min(seeds, default=0), "max": max(seeds, default=0)},
        "tasks": dict(Counter(_text(data[n].attrs["task"]) for n in complete).most_common()),
        "instructions": dict(Counter(_text(data[n].attrs["instruction"]) for n in complete).most_common()),
        "obs": obs,
        "actions": {"dim": actions[0].shape[1] if actions else 0, **_stats(np.concatenate(actions) if actions else [])},
    }


def dataset_info(path: PathLike) -> dict[str, Any]:
    """Counts (episodes, steps, successes, tasks, instructions), action statistics and observation keys.

    Raises `DatasetError` for a file that is not a readable demo file (`check_dataset` lists what is wrong).
    """
    path = Path(path)
    with open_demo_file(path) as f:
        try:
            return _summarise(f, path)
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise DatasetError(
                f"{path}: cannot summarise the file ({e}); `vlagym dataset check` lists its problems"
            ) from e


def format_info(info: dict[str, Any], max_instructions: int = 10) -> str:
    """`dataset_info` as readable text."""
    mb = info["file_bytes"] / 1e6
    n, steps = info["episodes"], info["steps"]
    length = info["length"]
    lines = [
        f"file          {info['path']} ({mb:.1f} MB)",
        f"format        {info['format']} v{info['format_version']}, vlagym {info['vlagym_version']}, "
        f"MuJoCo {info['mujoco_version']}, created {info['created']}",
        f"env           {info['env_id']} {json.dumps(info['env_kwargs'])}",
        f"episodes      {n} complete ({info['successes']} successful)"
        + (f", {info['incomplete']} incomplete" if info["incomplete"] else "")
        + (f", seeds {info['seeds']['min']}..{info['seeds']['max']}" if n else ""),
        f"steps         {steps} (per episode min {length['min']}, mean {length['mean']:.1f}, max {length['max']})",
        f"tasks         {len(info['tasks'])}"
        + "".join(f"{', ' if i else ': '}{t} ({c})" for i, (t, c) in enumerate(info["tasks"].items())),
        f"instructions  {len(info['instructions'])} distinct",
    ]
    for text, count in list(info["instructions"].items())[:max_instructions]:
        lines.append(f"  {count:6d}  {text}")
    if len(info["instructions"]) > max_instructions:
        lines.append(f"  ... and {len(info['instructions']) - max_instructions} more")
    lines.append("observations")
    for key, o in info["obs"].items():
        comp = f", {o['compression']}" if o.get("compression") else ""
        lines.append(f"  {key:<14}{tuple(o['shape'])} {o['dtype']}{comp}")
    a = info["actions"]
    lines.append(f"actions       {a['dim']} dims")
    if a["dim"]:
        lines.append("  dim      mean       std       min       max")
        for d in range(a["dim"]):
            lines.append(f"  {d:3d}{a['mean'][d]:10.4f}{a['std'][d]:10.4f}{a['min'][d]:10.4f}{a['max'][d]:10.4f}")
    return "\n".join(lines)


__all__ = ["DatasetError", "check_dataset", "dataset_info", "demo_names", "format_info", "open_demo_file"]
