"""Reading a LeRobot dataset v3.0 folder: `lerobot_demo_file` converts it once into a vlagym demo file (the layout of
`vlagym.train.layout`) in a cache, and every reader of demo files (`DemoDataset`, the statistics, `train-bc`)
takes that file. `LeRobotMapping` says which features become which demo arrays.

The converted file is named after the folder and a hash of the mapping and of every file's path, size and
modification time, so an edited dataset (or another mapping) converts afresh and an unchanged one is read from
the cache. It is written to a temp file and renamed into place. Videos are decoded with PyAV, frame by frame;
frame t of an episode is the frame at its `from_timestamp + t / fps`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

import vlagym
from vlagym.io import temp_path
from vlagym.train import layout
from vlagym.train.lerobot.format import (
    EPISODE_COLUMNS,
    IMAGE_PREFIX,
    TASKS_PATH,
    VLAGYM_INFO,
    LeRobotError,
    LeRobotMapping,
    read_info,
    require_extras,
)

logger = logging.getLogger(__name__)

CONVERTER_VERSION = 1  # part of the cache key: a change to the conversion converts every dataset afresh


@dataclass
class _Source:
    """A LeRobot folder as the conversion needs it."""

    root: Path
    info: dict[str, Any]
    episodes: dict[str, np.ndarray | list]  # episodes table, by column, sorted by episode_index
    cameras: dict[str, str]  # vlagym camera -> video feature
    frame_size: int


# ---------------------------------------------------------------------------- reading the tables
def _read_parquet(path: Path, columns: list[str] | None = None) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise LeRobotError(f"{path}: missing")
    try:
        return pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowException, KeyError) as e:  # KeyError: a column asked for is absent
        raise LeRobotError(f"{path}: unreadable parquet ({e})") from e


def matrix(table: Any, name: str, where: Path) -> np.ndarray:
    """Column `name` of a pyarrow table as an (N, D) (list columns) or (N,) array."""
    import pyarrow as pa

    if name not in table.column_names:
        raise LeRobotError(f"{where}: no column {name!r}; it has {table.column_names}")
    column = table.column(name).combine_chunks()
    if pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
        values = column.flatten().to_numpy(zero_copy_only=False)
        n = len(column)
        if n and len(values) % n:
            raise LeRobotError(f"{where}: column {name!r} has rows of different lengths")
        return values.reshape(n, -1 if n else 0)
    return column.to_numpy(zero_copy_only=False)


def _episodes(root: Path) -> dict[str, Any]:
    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if not files:
        raise LeRobotError(f"{root}: not a LeRobot v3.0 dataset (no meta/episodes/chunk-*/file-*.parquet)")
    import pyarrow as pa

    table = pa.concat_tables([_read_parquet(p) for p in files], promote_options="default")
    where = root / "meta" / "episodes"
    cols: dict[str, Any] = {name: matrix(table, name, where) for name in table.column_names if name != "tasks"}
    if "tasks" not in table.column_names:
        raise LeRobotError(f"{where}: no column 'tasks'")
    cols["tasks"] = table.column("tasks").to_pylist()
    for name in ("episode_index", "length", "data/chunk_index", "data/file_index"):
        if name not in cols:
            raise LeRobotError(f"{where}: no column {name!r}")
    order = np.argsort(cols["episode_index"], kind="stable")
    return {k: [v[i] for i in order] if isinstance(v, list) else v[order] for k, v in cols.items()}


def _cameras(info: dict[str, Any], mapping: LeRobotMapping, root: Path) -> dict[str, str]:
    videos = [k for k, ft in info["features"].items() if isinstance(ft, dict) and ft.get("dtype") == "video"]
    if mapping.camera_features:
        missing = sorted(set(mapping.camera_features.values()) - set(videos))
        if missing:
            raise LeRobotError(f"{root}: no video features {missing}; it has {videos}")
        return dict(mapping.camera_features)
    images = [k for k, ft in info["features"].items() if isinstance(ft, dict) and ft.get("dtype") == "image"]
    if images and not videos:
        raise LeRobotError(f"{root}: images stored as files ({images}) are not supported; only video features")
    return {k.removeprefix(IMAGE_PREFIX): k for k in sorted(videos) if k.startswith(IMAGE_PREFIX)}


def open_source(root: str | os.PathLike, mapping: LeRobotMapping) -> _Source:
    """The folder's info and episode table, checked against `mapping` (`LeRobotError` naming the problem)."""
    require_extras()
    root = Path(root)
    info = read_info(root)
    features = info["features"]
    for name in (mapping.state_feature, mapping.action_feature):
        if name not in features:
            raise LeRobotError(f"{root}: no feature {name!r}; it has {sorted(features)}")
    _read_parquet(root / TASKS_PATH)  # a v3.0 folder has it; a missing or broken one means a broken folder
    cameras = _cameras(info, mapping, root)
    if cameras and not info.get("video_path"):
        raise LeRobotError(f"{root}/meta/info.json: video features but no video_path")
    size = mapping.frame_size
    if not size and cameras:
        shapes = {tuple(features[f]["shape"][:2]) for f in cameras.values()}
        if len(shapes) > 1 or next(iter(shapes))[0] != next(iter(shapes))[1]:
            raise LeRobotError(f"{root}: videos of size {sorted(shapes)}; give frame_size to resize them to a square")
        size = int(next(iter(shapes))[0])
    return _Source(root, info, _episodes(root), cameras, size)


def _frame_table(src: _Source, mapping: LeRobotMapping) -> dict[str, np.ndarray]:
    """The low-dim columns of every data file, rows sorted by (episode_index, frame_index)."""
    import pyarrow as pa

    features = src.info["features"]
    wanted = {"proprio": mapping.state_feature, "actions": mapping.action_feature}
    if mapping.env_state_feature and mapping.env_state_feature in features:
        wanted["state"] = mapping.env_state_feature
    for key, name in (("executed", "executed_action"), ("rewards", "next.reward"), ("dones", "next.done")):
        if name in features:
            wanted[key] = name
    files = sorted(
        set(zip(src.episodes["data/chunk_index"].tolist(), src.episodes["data/file_index"].tolist(), strict=True))
    )
    tables = []
    for chunk, file in files:
        path = src.root / src.info["data_path"].format(chunk_index=chunk, file_index=file)
        tables.append(_read_parquet(path, columns=[*wanted.values(), "episode_index", "frame_index"]))
    table = pa.concat_tables(tables)
    where = src.root / "data"
    cols = {key: matrix(table, name, where) for key, name in wanted.items()}
    episode, frame = matrix(table, "episode_index", where), matrix(table, "frame_index", where)
    order = np.lexsort((frame, episode))
    cols = {k: v[order] for k, v in cols.items()}
    cols["episode_index"], cols["frame_index"] = episode[order], frame[order]
    return cols


# ---------------------------------------------------------------------------- videos
def _decode(path: Path, size: int) -> Iterator[tuple[float, np.ndarray]]:
    """(time in seconds, (size, size, 3) uint8 RGB) of every frame of the first video stream of `path`."""
    import av

    if not path.is_file():
        raise LeRobotError(f"{path}: missing")
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            for frame in container.decode(stream):
                yield float(frame.time), frame.to_ndarray(format="rgb24", width=size, height=size)
    except (av.FFmpegError, IndexError) as e:
        raise LeRobotError(f"{path}: unreadable video ({e})") from e


def _fill_camera(src: _Source, camera: str, datasets: list[h5py.Dataset]) -> None:
    """Decode camera `camera`'s video files into each episode's (N, S, S, 3) dataset."""
    key = src.cameras[camera]
    ep = src.episodes
    fps = float(src.info["fps"])
    needed = [f"videos/{key}/{c}" for c in ("chunk_index", "file_index", "from_timestamp")]
    missing = [c for c in needed if c not in ep]
    if missing:
        raise LeRobotError(f"{src.root}/meta/episodes: no columns {missing}")
    lengths = ep["length"].astype(np.int64)
    filled = np.zeros(len(lengths), dtype=np.int64)
    by_file: dict[tuple[int, int], list[int]] = {}
    for e, (c, f) in enumerate(zip(ep[needed[0]].tolist(), ep[needed[1]].tolist(), strict=True)):
        by_file.setdefault((int(c), int(f)), []).append(e)
    for (chunk, file), members in sorted(by_file.items()):
        path = src.root / src.info["video_path"].format(video_key=key, chunk_index=chunk, file_index=file)
        starts = np.asarray([float(ep[needed[2]][e]) for e in members])
        for t, image in _decode(path, src.frame_size):
            j = int(np.searchsorted(starts, t + 0.5 / fps, side="right")) - 1  # the episode this frame falls in
            if j < 0:
                continue
            e = members[j]
            row = int(round((t - starts[j]) * fps))
            if 0 <= row < lengths[e]:
                datasets[e][row] = image
                filled[e] += 1
    short = np.flatnonzero(filled != lengths)
    if len(short):
        e = int(short[0])
        raise LeRobotError(f"{src.root}: video {key} has {filled[e]} frames of episode {e}, expected {lengths[e]}")


# ---------------------------------------------------------------------------- the demo file
def _env(src: _Source, mapping: LeRobotMapping) -> tuple[str, dict[str, Any]]:
    block = src.info.get(VLAGYM_INFO) or {}
    env_id = mapping.env_id or str(block.get("env_id", ""))
    env_kwargs = dict(block.get("env_kwargs") or {})
    if src.cameras:
        env_kwargs.update(image_size=src.frame_size, cameras=list(src.cameras))
    if not env_id:
        logger.warning("%s: no vlagym env id (info.json has none, the mapping gives none); no evaluation", src.root)
    return env_id, env_kwargs


def _write_demo_file(src: _Source, mapping: LeRobotMapping, path: Path) -> None:
    table = _frame_table(src, mapping)
    ep = src.episodes
    ends = np.cumsum(ep["length"])
    if int(ends[-1]) != len(table["actions"]):
        raise LeRobotError(f"{src.root}: the data files hold {len(table['actions'])} frames, the episodes {ends[-1]}")
    env_id, env_kwargs = _env(src, mapping)
    extra = {c: ep[c] for c in EPISODE_COLUMNS if c in ep}
    with h5py.File(path, "w") as f:
        f.attrs.update(
            format=layout.FORMAT,
            format_version=layout.FORMAT_VERSION,
            vlagym_version=vlagym.__version__,
            source=f"lerobot:{src.root.resolve()}",
        )
        data = f.create_group("data")
        obs_keys = [layout.image_key(c) for c in src.cameras] + [k for k in ("proprio", "state") if k in table]
        data.attrs.update(env_id=env_id, env_kwargs=json.dumps(env_kwargs), total=int(ends[-1]))
        data.attrs["obs_keys"] = json.dumps(obs_keys)
        groups, images = [], {c: [] for c in src.cameras}
        for e, end in enumerate(ends.tolist()):
            n = int(ep["length"][e])
            rows = slice(end - n, end)
            if not np.array_equal(table["episode_index"][rows], np.full(n, ep["episode_index"][e])) or not (
                np.array_equal(table["frame_index"][rows], np.arange(n))
            ):
                raise LeRobotError(
                    f"{src.root}: the data rows of episode {ep['episode_index'][e]} are not frames 0..{n - 1}"
                )
            g = data.create_group(layout.demo_name(e))
            _write_arrays(g, table, rows, n)
            for cam in src.cameras:
                shape = (n, src.frame_size, src.frame_size, 3)
                images[cam].append(
                    g["obs"].create_dataset(
                        layout.image_key(cam), shape, np.uint8, chunks=(1, *shape[1:]), compression="gzip"
                    )
                )
            tasks = ep["tasks"][e] or [""]
            g.attrs.update(
                num_samples=n, instruction=str(tasks[0]), task=str(extra.get("vlagym/task", [env_id] * len(ends))[e])
            )
            g.attrs.update(seed=int(extra["vlagym/seed"][e]) if "vlagym/seed" in extra else e)
            g.attrs.update(success=bool(extra["vlagym/success"][e]) if "vlagym/success" in extra else True)
            groups.append(g)
        for cam in src.cameras:
            _fill_camera(src, cam, images[cam])
        for g in groups:  # written last, as the layout asks: a demo without it is unfinished
            g.attrs["complete"] = True


def _write_arrays(g: h5py.Group, table: dict[str, np.ndarray], rows: slice, n: int) -> None:
    obs = g.create_group("obs")
    obs.create_dataset("proprio", data=table["proprio"][rows].astype(np.float32))
    if "state" in table:
        obs.create_dataset("state", data=table["state"][rows].astype(np.float32))
    actions = table["actions"][rows].astype(np.float32)
    if "executed" in table:  # the labels are the expert's; the executed actions go where the layout keeps them
        g.create_dataset("actions", data=table["executed"][rows].astype(np.float32))
        g.create_dataset(layout.EXPERT_ACTIONS, data=actions)
    else:
        g.create_dataset("actions", data=actions)
    rewards = table["rewards"][rows] if "rewards" in table else np.zeros(n)
    g.create_dataset("rewards", data=rewards.astype(np.float32).reshape(n))
    dones = table["dones"][rows].reshape(n) if "dones" in table else np.arange(n) == n - 1
    g.create_dataset("dones", data=dones.astype(np.uint8))


# ---------------------------------------------------------------------------- the cache
def cache_dir(mapping: LeRobotMapping) -> Path:
    if mapping.cache_dir:
        return Path(mapping.cache_dir)
    if os.environ.get("VLAGYM_CACHE"):
        return Path(os.environ["VLAGYM_CACHE"]) / "lerobot"
    return Path.home() / ".cache" / "vlagym" / "lerobot"


def fingerprint(root: Path, mapping: LeRobotMapping) -> str:
    """Hash of the converter version, the mapping (bar its cache folder) and every file's path, size and mtime."""
    h = hashlib.sha256(f"{CONVERTER_VERSION}\n{root.resolve()}\n".encode())
    h.update(json.dumps({k: v for k, v in mapping.to_dict().items() if k != "cache_dir"}, sort_keys=True).encode())
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            h.update(f"\n{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def lerobot_demo_file(root: str | os.PathLike, mapping: LeRobotMapping | None = None) -> Path:
    """The vlagym demo file of LeRobot v3.0 folder `root` (converted on first use, then from the cache).

    Raises `LeRobotError` naming the problem for a folder that is not a LeRobot v3.0 dataset this mapping fits."""
    mapping = mapping or LeRobotMapping()
    root = Path(root)
    src = open_source(root, mapping)
    out = cache_dir(mapping) / f"{root.resolve().name}-{fingerprint(root, mapping)}.hdf5"
    if out.is_file():
        logger.info("%s: converted demo file from the cache, %s", root, out)
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(out)
    try:
        _write_demo_file(src, mapping, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    logger.info("%s: converted into %s", root, out)
    return out


def resolve_dataset(path: str | os.PathLike, mapping: LeRobotMapping | None = None) -> Path:
    """`path` itself for a demo file; the converted demo file for a LeRobot folder."""
    path = Path(path)
    return lerobot_demo_file(path, mapping) if path.is_dir() else path


__all__ = ["cache_dir", "fingerprint", "lerobot_demo_file", "open_source", "resolve_dataset"]
