"""`export_lerobot`: a vlagym demo file as a LeRobot dataset v3.0 folder (layout in `vlagym.train.lerobot.format`).

Every complete demo becomes an episode, in file order. The frame table holds the proprio vector as
`observation.state`, the training labels as `action` (a demo's `expert_actions` where it has them; the executed
actions then go to `executed_action`), the privileged state as `observation.environment_state`, the rewards and
dones as `next.reward` / `next.done`, and LeRobot's own index columns. Each camera is one mp4 stream (yuv420p)
with every episode one after another; an episode starts at its `from_timestamp`. The folder is written beside
OUT and renamed into place, so OUT is either absent, the previous version, or complete.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np

from vlagym.io import atomic_write_json
from vlagym.train import layout
from vlagym.train.demo_reader import complete_demos, data_group, text_attr
from vlagym.train.lerobot.format import (
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_FILE_MB,
    DATA_PATH,
    EPISODES_PATH,
    IMAGE_PREFIX,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_FILE_MB,
    VIDEO_PATH,
    VLAGYM_INFO,
    DatasetExportConfig,
    LeRobotError,
    require_extras,
)

logger = logging.getLogger(__name__)

DEFAULT_FPS = 20  # vlagym's control rate when neither the file nor the env says otherwise
EE_ACTION_NAMES = ["dx", "dy", "dz", "drx", "dry", "drz", "gripper"]
FIRST = {"chunk_index": 0, "file_index": 0}  # vlagym writes one file of each kind


@dataclass
class ExportSummary:
    """What `export_lerobot` wrote."""

    out: str
    episodes: int
    frames: int
    tasks: int
    codec: str
    seconds: float
    bytes: int


@dataclass
class _Frames:
    """The frame table being built, one list entry per episode."""

    proprio: list[np.ndarray] = field(default_factory=list)
    state: list[np.ndarray] = field(default_factory=list)
    action: list[np.ndarray] = field(default_factory=list)
    executed: list[np.ndarray] = field(default_factory=list)
    reward: list[np.ndarray] = field(default_factory=list)
    done: list[np.ndarray] = field(default_factory=list)
    task_index: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


# ---------------------------------------------------------------------------- small pieces
def control_freq(env_id: str, env_kwargs: dict[str, Any]) -> int:
    """The env's control rate in Hz (frames per second of the demos): its kwarg, else its class default."""
    if "control_freq" in env_kwargs:
        return int(env_kwargs["control_freq"])
    from vlagym.envs.catalog import task_class

    try:
        defaults: dict[str, Any] = {}
        for cls in reversed(task_class(env_id).__mro__):
            if "__init__" in vars(cls):
                params = inspect.signature(vars(cls)["__init__"]).parameters
                defaults.update({k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty})
        defaults.update(gym.spec(env_id).kwargs)
        return int(defaults.get("control_freq", DEFAULT_FPS))
    except (KeyError, ValueError, gym.error.Error) as e:
        logger.warning("cannot find the control rate of %r (%s); writing fps=%d", env_id, e, DEFAULT_FPS)
        return DEFAULT_FPS


def pick_codec(wanted: str) -> str:
    """The encoder to use: `wanted`, or for "auto" the first of libx264, libopenh264, mpeg4 in PyAV's build."""
    import av

    available = set(av.codecs_available)
    if wanted != "auto":
        if wanted not in available:
            known = sorted(available & {"libx264", "libopenh264", "mpeg4"})
            raise LeRobotError(f"codec {wanted!r} is not in this PyAV build; it has {known}")
        return wanted
    for codec in ("libx264", "libopenh264", "mpeg4"):
        if codec in available:
            return codec
    raise LeRobotError("this PyAV build has none of the encoders libx264, libopenh264, mpeg4")


class VideoWriter:
    """One mp4 stream of (H, W, 3) uint8 frames at `fps`, frame i at pts i (time base 1/fps), in `cfg.pix_fmt`."""

    def __init__(self, path: Path, fps: int, height: int, width: int, cfg: DatasetExportConfig, codec: str) -> None:
        import av

        if cfg.pix_fmt == "yuv420p" and (height % 2 or width % 2):
            raise LeRobotError(f"yuv420p video needs an even image size, got {height}x{width}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.container = av.open(str(path), mode="w")
        self.stream = self.container.add_stream(codec, rate=fps)
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, cfg.pix_fmt
        self.stream.time_base = Fraction(1, fps)
        if codec == "libx264":
            self.stream.options = {"crf": str(cfg.crf), "g": str(cfg.gop)}
        else:  # no crf: a generous bit rate, falling with crf as x264's quality does (about 2x per 6 crf)
            self.stream.bit_rate = int(width * height * fps * 8 * 2 ** (-cfg.crf / 6))
            self.stream.codec_context.gop_size = cfg.gop
        self.frames = 0

    def write(self, images: np.ndarray) -> None:
        import av

        for image in images:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            # Area averaging of the chroma planes: at small image sizes it keeps ~0.5 dB more than swscale's default.
            frame = frame.reformat(format=self.stream.pix_fmt, interpolation="AREA")
            frame.pts = self.frames
            self.frames += 1
            for packet in self.stream.encode(frame):
                self.container.mux(packet)

    def close(self) -> None:
        for packet in self.stream.encode():
            self.container.mux(packet)
        self.container.close()


class ImageStats:
    """Per-channel min, max, mean, std of images scaled to [0, 1], shaped (3, 1, 1) as LeRobot stores them."""

    def __init__(self) -> None:
        self.n, self.sum, self.sumsq = 0, np.zeros(3), np.zeros(3)
        self.lo, self.hi = np.full(3, 255), np.zeros(3, dtype=np.int64)

    def update(self, images: np.ndarray) -> None:
        pixels = images.reshape(-1, 3)
        self.n += len(pixels)
        self.sum += pixels.sum(0, dtype=np.float64)
        self.sumsq += np.square(pixels, dtype=np.float64).sum(0)
        self.lo, self.hi = np.minimum(self.lo, pixels.min(0)), np.maximum(self.hi, pixels.max(0))

    def result(self, frames: int) -> dict[str, Any]:
        mean = self.sum / self.n
        std = np.sqrt(np.maximum(self.sumsq / self.n - mean**2, 0.0))
        column = lambda v: [[[float(x)]] for x in v]  # noqa: E731 - (3,) -> (3, 1, 1)
        return {
            "min": column(self.lo / 255),
            "max": column(self.hi / 255),
            "mean": column(mean / 255),
            "std": column(std / 255),
            "count": [frames],
        }


def array_stats(x: np.ndarray) -> dict[str, Any]:
    """min, max, mean, std (per dimension) and count of an (N, D) or (N,) array."""
    x = x.reshape(len(x), -1).astype(np.float64)
    return {
        "min": x.min(0).tolist(),
        "max": x.max(0).tolist(),
        "mean": x.mean(0).tolist(),
        "std": x.std(0).tolist(),
        "count": [len(x)],
    }


def list_column(x: np.ndarray) -> Any:
    """An (N, D) float32 array as a pyarrow list<float32> column."""
    import pyarrow as pa

    n, d = x.shape
    offsets = pa.array(np.arange(0, (n + 1) * d, d, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(x.reshape(-1).astype(np.float32)))


def write_tasks(path: Path, tasks: list[str]) -> None:
    """meta/tasks.parquet: the task text as the pandas index, column task_index (pandas reads it back so)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }  # fmt: skip
    table = table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


# ---------------------------------------------------------------------------- reading the demo file
def _read_demos(
    f: h5py.File, src: Path, tmp: Path, cfg: DatasetExportConfig, fps: int
) -> tuple[_Frames, list[dict[str, Any]], list[str], dict[str, ImageStats], str]:
    """Stream every complete demo of `f` into the frame table and the camera videos under `tmp`; returns the
    table, the per-episode rows (seed, success, task, instruction), the tasks, the image statistics, the codec."""
    data = data_group(f, src)
    names = complete_demos(data, src)
    if not names:
        raise LeRobotError(f"{src}: no complete demos to export")
    first = data[names[0]]["obs"]
    cameras = sorted(k.removesuffix(layout.IMAGE_SUFFIX) for k in first if k.endswith(layout.IMAGE_SUFFIX))
    has_state = all("state" in data[n]["obs"] for n in names)
    has_expert = any(layout.EXPERT_ACTIONS in data[n] for n in names)
    codec = pick_codec(cfg.codec) if cameras else "none"
    writers: dict[str, VideoWriter] = {}
    image_stats = {cam: ImageStats() for cam in cameras}
    frames, episodes, tasks = _Frames(), [], []
    try:
        for name in names:
            demo = data[name]
            n = int(demo.attrs["num_samples"])
            instruction = text_attr(demo, "instruction")
            if instruction not in tasks:
                tasks.append(instruction)
            frames.task_index.append(tasks.index(instruction))
            frames.lengths.append(n)
            frames.proprio.append(demo["obs"]["proprio"][()].astype(np.float32))
            if has_state:
                frames.state.append(demo["obs"]["state"][()].astype(np.float32))
            frames.action.append(layout.label_actions(demo)[()].astype(np.float32))
            if has_expert:
                frames.executed.append(demo["actions"][()].astype(np.float32))
            frames.reward.append(demo["rewards"][()].astype(np.float32) if "rewards" in demo else np.zeros(n, "f4"))
            frames.done.append(demo["dones"][()].astype(bool) if "dones" in demo else np.arange(n) == n - 1)
            for cam in cameras:
                key = layout.image_key(cam)
                if key not in demo["obs"]:
                    raise LeRobotError(f"{src}:/data/{name} has no obs/{key}; earlier demos have camera {cam!r}")
                images = demo["obs"][key][()]
                if cam not in writers:
                    video = tmp / VIDEO_PATH.format(video_key=IMAGE_PREFIX + cam, **FIRST)
                    h, w = images.shape[1:3]
                    writers[cam] = VideoWriter(video, fps, h, w, cfg, codec)
                writers[cam].write(images)
                image_stats[cam].update(images)
            episodes.append(
                {"seed": int(demo.attrs.get("seed", -1)), "success": bool(demo.attrs.get("success", False)),
                 "task": text_attr(demo, "task"), "instruction": instruction}
            )  # fmt: skip
    finally:
        for writer in writers.values():
            writer.close()
    return frames, episodes, tasks, image_stats, codec


# ---------------------------------------------------------------------------- the tables
def _write_data(tmp: Path, frames: _Frames, fps: int) -> dict[str, np.ndarray]:
    """data/chunk-000/file-000.parquet; returns its numeric columns (for the statistics)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lengths = np.asarray(frames.lengths)
    episode_index = np.repeat(np.arange(len(lengths)), lengths)
    frame_index = np.concatenate([np.arange(n) for n in lengths])
    columns: dict[str, np.ndarray] = {
        "observation.state": np.concatenate(frames.proprio),
        "action": np.concatenate(frames.action),
    }
    if frames.state:
        columns["observation.environment_state"] = np.concatenate(frames.state)
    if frames.executed:
        columns["executed_action"] = np.concatenate(frames.executed)
    columns["next.reward"] = np.concatenate(frames.reward).astype(np.float32)
    columns["next.done"] = np.concatenate(frames.done)
    columns["timestamp"] = (frame_index / fps).astype(np.float32)
    columns["frame_index"] = frame_index.astype(np.int64)
    columns["episode_index"] = episode_index.astype(np.int64)
    columns["index"] = np.arange(len(frame_index), dtype=np.int64)
    columns["task_index"] = np.repeat(np.asarray(frames.task_index, dtype=np.int64), lengths)
    table = pa.table({k: list_column(v) if v.ndim == 2 else pa.array(v) for k, v in columns.items()})
    path = tmp / DATA_PATH.format(**FIRST)
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    return columns


def _write_episodes(tmp: Path, frames: _Frames, episodes: list[dict[str, Any]], cameras: list[str], fps: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    lengths = np.asarray(frames.lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    n = len(lengths)
    zeros = np.zeros(n, dtype=np.int64)
    cols: dict[str, Any] = {
        "episode_index": np.arange(n, dtype=np.int64),
        "tasks": pa.array([[e["instruction"]] for e in episodes], pa.list_(pa.string())),
        "length": lengths,
        "data/chunk_index": zeros,
        "data/file_index": zeros,
        "dataset_from_index": starts,
        "dataset_to_index": ends,
    }
    for cam in cameras:
        key = IMAGE_PREFIX + cam
        cols[f"videos/{key}/chunk_index"] = zeros
        cols[f"videos/{key}/file_index"] = zeros
        cols[f"videos/{key}/from_timestamp"] = starts / fps
        cols[f"videos/{key}/to_timestamp"] = ends / fps
    cols["meta/episodes/chunk_index"] = zeros
    cols["meta/episodes/file_index"] = zeros
    cols["vlagym/seed"] = np.asarray([e["seed"] for e in episodes], dtype=np.int64)
    cols["vlagym/success"] = np.asarray([e["success"] for e in episodes], dtype=bool)
    cols["vlagym/task"] = pa.array([e["task"] for e in episodes], pa.string())
    path = tmp / EPISODES_PATH.format(**FIRST)
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in cols.items()}), path)


def _features(columns: dict[str, np.ndarray], videos: dict[str, dict[str, Any]], action_dim: int) -> dict[str, Any]:
    features: dict[str, Any] = {}
    for key, video in videos.items():
        shape = [video["video.height"], video["video.width"], 3]
        features[key] = {"dtype": "video", "shape": shape, "names": ["height", "width", "channels"], "info": video}
    for key, x in columns.items():
        dtype = "bool" if x.dtype == bool else str(x.dtype)
        names = EE_ACTION_NAMES if key in ("action", "executed_action") and action_dim == 7 else None
        features[key] = {"dtype": dtype, "shape": [x.shape[1]] if x.ndim == 2 else [1], "names": names}
    return features


def _video_info(path: Path, fps: int) -> dict[str, Any]:
    """The `info` block of a video feature, read back from the written file."""
    import av

    with av.open(str(path)) as container:
        s = container.streams.video[0]
        return {"video.height": s.height, "video.width": s.width, "video.codec": s.codec_context.name,
                "video.pix_fmt": s.pix_fmt, "video.is_depth_map": False, "video.fps": fps, "video.channels": 3,
                "has_audio": False}  # fmt: skip


# ---------------------------------------------------------------------------- the whole folder
def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise LeRobotError(f"--out {str(out)!r} is a file; give a folder for the LeRobot dataset")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise LeRobotError(f"{out} exists and is not empty; pass --overwrite to replace it")


def _swap_in(tmp: Path, out: Path) -> None:
    """Rename the finished folder `tmp` to `out`, moving a previous `out` aside first and deleting it after."""
    old = out.with_name(f".{out.name}.{os.getpid()}.old")
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def export_lerobot(cfg: DatasetExportConfig) -> ExportSummary:
    """Write the demo file `cfg.file` as a LeRobot v3.0 dataset folder `cfg.out` (see the module docstring).

    Raises `LeRobotError` (and `ValueError` for a file that is not a vlagym demo file) naming the problem."""
    require_extras()
    start = time.perf_counter()
    src, out = Path(cfg.file), Path(cfg.out)
    if not src.is_file():
        raise LeRobotError(f"{src}: no such demo file")
    _check_out(out, cfg.overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        try:
            f = h5py.File(src, "r")
        except OSError as e:
            raise LeRobotError(f"{src}: not an HDF5 file ({e})") from e
        with f:
            env_id, env_kwargs = (
                str(f["data"].attrs.get("env_id", "")),
                json.loads(f["data"].attrs.get("env_kwargs", "{}")),
            )
            fps = control_freq(env_id, env_kwargs)
            frames, episodes, tasks, image_stats, codec = _read_demos(f, src, tmp, cfg, fps)
        cameras = list(image_stats)
        columns = _write_data(tmp, frames, fps)
        _write_episodes(tmp, frames, episodes, cameras, fps)
        write_tasks(tmp / TASKS_PATH, tasks)
        total = int(sum(frames.lengths))
        videos = {
            IMAGE_PREFIX + c: _video_info(tmp / VIDEO_PATH.format(video_key=IMAGE_PREFIX + c, **FIRST), fps)
            for c in cameras
        }
        stats = {IMAGE_PREFIX + c: s.result(total) for c, s in image_stats.items()}
        stats.update({k: array_stats(v) for k, v in columns.items() if v.dtype != bool})
        atomic_write_json(tmp / STATS_PATH, stats)
        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": cfg.robot_type,
            "total_episodes": len(episodes),
            "total_frames": total,
            "total_tasks": len(tasks),
            "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": DATA_FILE_MB,
            "video_files_size_in_mb": VIDEO_FILE_MB,
            "fps": fps,
            "splits": {"train": f"0:{len(episodes)}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if cameras else None,
            "features": _features(columns, videos, columns["action"].shape[1]),
            VLAGYM_INFO: {"env_id": env_id, "env_kwargs": env_kwargs, "source": src.name, "codec": codec},
        }
        atomic_write_json(tmp / INFO_PATH, info)
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    summary = ExportSummary(str(out), len(episodes), total, len(tasks), codec, time.perf_counter() - start, size)
    logger.info(
        "%s: %d episodes, %d frames, %.1f MB in %.1f s", out, summary.episodes, total, size / 1e6, summary.seconds
    )
    return summary


__all__ = ["ExportSummary", "export_lerobot"]
