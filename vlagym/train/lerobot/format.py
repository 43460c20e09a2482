"""The LeRobot dataset v3.0 layout as vlagym writes and reads it, and the configs of both directions.

    DIR/meta/info.json                                   codebase_version "v3.0", fps, totals, path templates,
                                                         features (dtype, shape, names; videos: an `info` block)
    DIR/meta/stats.json                                  per numeric feature: min, max, mean, std, count
    DIR/meta/tasks.parquet                               index: the task text (the instruction); task_index
    DIR/meta/episodes/chunk-000/file-000.parquet         one row per episode (lengths, data and video spans)
    DIR/data/chunk-000/file-000.parquet                  one row per frame
    DIR/videos/<video key>/chunk-000/file-000.mp4        one stream per camera, every episode one after another

This module imports nothing heavy (no pyarrow, av, h5py, torch or mujoco): the CLI builds options from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from vlagym.checks import check_int
from vlagym.config import Config

CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE + ".parquet"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
CHUNKS_SIZE = 1000  # files per chunk folder (LeRobot's default)
DATA_FILE_MB = 100  # LeRobot's default file sizes; vlagym writes one file of each kind whatever its size
VIDEO_FILE_MB = 200
IMAGE_PREFIX = "observation.images."  # video feature of camera c: observation.images.<c>
VLAGYM_INFO = "vlagym"  # info.json block of what a LeRobot dataset has no field for: env id and kwargs
EPISODE_COLUMNS = ("vlagym/seed", "vlagym/success", "vlagym/task")  # extra columns of the episodes table
EXPORT_FORMATS = ("lerobot",)
CODECS = ("auto", "libx264", "libopenh264", "mpeg4")
PIX_FMTS = ("yuv420p", "yuv444p")
EXTRA = "pip install 'vlagym[lerobot]'"  # what installs pyarrow and av


class LeRobotError(ValueError):
    """A folder that is not a LeRobot v3.0 dataset vlagym can read, or an export that cannot be written."""


def require_extras() -> None:
    """`LeRobotError` saying how to install them when pyarrow or av is missing."""
    try:
        import av  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError as e:
        raise LeRobotError(f"LeRobot datasets need pyarrow and av ({e}); {EXTRA}") from e


def is_lerobot_folder(path: str | Path) -> bool:
    """True for a folder (LeRobot datasets are folders; demo files are files)."""
    return Path(path).is_dir()


def read_info(root: Path) -> dict:
    """meta/info.json of a LeRobot v3.0 folder, checked for the keys vlagym needs (`LeRobotError` otherwise)."""
    path = root / INFO_PATH
    if not root.is_dir():
        raise LeRobotError(f"{root}: not a folder (a LeRobot dataset is a folder with {INFO_PATH})")
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        raise LeRobotError(f"{root}: not a LeRobot dataset (no {INFO_PATH})") from None
    except (OSError, ValueError) as e:
        raise LeRobotError(f"{path}: unreadable JSON ({e})") from e
    if not isinstance(info, dict):
        raise LeRobotError(f"{path}: expected a JSON object")
    version = info.get("codebase_version")
    if version != CODEBASE_VERSION:
        raise LeRobotError(f"{root}: LeRobot codebase_version {version!r}; vlagym reads {CODEBASE_VERSION!r} only")
    missing = [k for k in ("fps", "features", "data_path", "total_episodes", "total_frames") if k not in info]
    if missing:
        raise LeRobotError(f"{path}: missing keys {missing}")
    return info


@dataclass
class LeRobotMapping(Config):
    """Which LeRobot features become which keys of a vlagym demo (and so of `DemoDataset`'s items). The defaults
    are what `vlagym dataset export --format lerobot` writes; the task text of each episode is its instruction."""

    state_feature: str = "observation.state"
    """LeRobot feature read as obs/proprio (item key observation.proprio)"""
    action_feature: str = "action"
    """LeRobot feature read as the actions (the training labels)"""
    env_state_feature: str = "observation.environment_state"
    """LeRobot feature read as obs/state when the dataset has it (privileged state; "" to skip)"""
    camera_features: dict[str, str] = field(default_factory=dict)
    """{vlagym camera: LeRobot video feature}; empty: every video feature observation.images.<camera> becomes
    camera <camera>"""
    frame_size: int = 0
    """resize decoded frames to this square size in pixels (0: keep the videos' size, which must then be square)"""
    env_id: str = ""
    """vlagym env of the demos (evaluation during training); empty: the one the exporter recorded in info.json"""
    cache_dir: str = ""
    """folder of the converted demo files; empty: $VLAGYM_CACHE/lerobot, else ~/.cache/vlagym/lerobot"""

    def __post_init__(self) -> None:
        for name in ("state_feature", "action_feature"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must name a LeRobot feature, got {getattr(self, name)!r}")
        if not isinstance(self.camera_features, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in self.camera_features.items()
        ):
            raise ValueError(f"camera_features must map camera names to video features, got {self.camera_features!r}")
        check_int("frame_size", self.frame_size, 0)
        if self.frame_size and self.frame_size < 8:
            raise ValueError(f"frame_size must be 0 or at least 8 pixels, got {self.frame_size!r}")


@dataclass
class DatasetExportConfig(Config):
    """Options of `vlagym dataset export FILE --format lerobot --out DIR`."""

    file: str
    """the vlagym demo file (.hdf5) to export"""
    out: str = ""
    """the dataset folder to write (written beside it, then renamed into place); empty: FILE without .hdf5"""
    format: str = "lerobot"
    """"lerobot": a LeRobot dataset v3.0 folder (parquet tables, one mp4 stream per camera)"""
    overwrite: bool = False
    """replace OUT when it exists and is not empty (without it, that is an error)"""
    codec: str = "auto"
    """video encoder: "auto" (libx264, else libopenh264, else mpeg4: the first PyAV's wheel has), or one of those"""
    crf: int = 18
    """libx264 quality, 0 (lossless luma) .. 51 (worst); other encoders get a bit rate of similar quality"""
    pix_fmt: str = "yuv420p"
    """"yuv420p" (what LeRobot writes and every player shows; colour at half resolution) or "yuv444p" (full
    colour resolution: near-lossless colour at small image sizes, fewer decoders)"""
    gop: int = 2
    """keyframe every this many frames (LeRobot's default 2: random access to any frame stays cheap)"""
    robot_type: str = "vlagym-arm7"
    """info.json robot_type"""

    def __post_init__(self) -> None:
        if self.format not in EXPORT_FORMATS:
            raise ValueError(f"format must be one of {list(EXPORT_FORMATS)}, got {self.format!r}")
        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of {list(CODECS)}, got {self.codec!r}")
        check_int("crf", self.crf, 0)
        if self.crf > 51:
            raise ValueError(f"crf must be between 0 and 51, got {self.crf!r}")
        if self.pix_fmt not in PIX_FMTS:
            raise ValueError(f"pix_fmt must be one of {list(PIX_FMTS)}, got {self.pix_fmt!r}")
        check_int("gop", self.gop, 1)
        if not self.out:
            self.out = str(Path(self.file).with_suffix(""))


__all__ = [
    "CODEBASE_VERSION",
    "DatasetExportConfig",
    "LeRobotError",
    "LeRobotMapping",
    "is_lerobot_folder",
    "read_info",
]
