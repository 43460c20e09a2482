"""Reading demo files (`vlagym.train.layout`): the format check, and the complete demos in numeric order.

Shared by the dataset statistics and `DemoDataset`: both accept only files of this format and version, and
count only demos marked complete.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import h5py

from vlagym.train import layout

PathLike = str | os.PathLike


def as_paths(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    """One path or several, as a non-empty list."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    out = [Path(p) for p in paths]
    if not out:
        raise ValueError("no demo files given")
    return out


def data_group(f: h5py.File, path: Path) -> h5py.Group:
    """The /data group of an open demo file, after checking its format and version (`ValueError` naming `path`)."""
    fmt, version = f.attrs.get("format"), f.attrs.get("format_version")
    if fmt != layout.FORMAT:
        raise ValueError(f"{path}: not a vlagym demo file (format attribute {fmt!r}, expected {layout.FORMAT!r})")
    if version != layout.FORMAT_VERSION:
        raise ValueError(f"{path}: demo format version {version!r}, this vlagym reads {layout.FORMAT_VERSION}")
    if "data" not in f:
        raise ValueError(f"{path}: no /data group")
    return f["data"]


def demo_number(path: Path, name: str) -> int:
    """i of the group name demo_<i>; any other name under /data is an error."""
    suffix = name.removeprefix(layout.DEMO_PREFIX)
    if not name.startswith(layout.DEMO_PREFIX) or not suffix.isdigit():
        raise ValueError(f"{path}: unexpected group /data/{name} (expected {layout.demo_name(0)!r}, ...)")
    return int(suffix)


def complete_demos(data: h5py.Group, path: Path) -> list[str]:
    """Names of the complete demos in numeric order (demo_2 before demo_10)."""
    names = sorted(data, key=lambda name: demo_number(path, name))
    return [name for name in names if bool(data[name].attrs.get("complete", False))]


def text_attr(group: h5py.Group, name: str) -> str:
    """A string attribute ("" when absent), whichever way h5py stored it."""
    value = group.attrs.get(name, "")
    return value.decode() if isinstance(value, bytes) else str(value)
